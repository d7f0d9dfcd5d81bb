"""What each stage is, said once: its folder, the command that makes its artefact, the seed it belongs to,
what it trains on and the upstream artefacts it trains from. The pipeline, the artefact rules and the
paper runner ask the stage instead of comparing its name.

Imports nothing else of adaspec.training (no Lightning): evaluation, the cache and diagnostics read it too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from omegaconf import DictConfig

from adaspec.artefacts import paths

# Stage 0: `pretrain=stdlib` (objective=lm, from-scratch presets) pre-trains the target (stage=pretrain_target,
# once) and the draft initialisation (stage=pretrain_draft, per seed) on the standard library's source, and
# stage 1 fine-tunes that target; `pretrain=distill` (objective=kd, pretrained targets) has the draft distil
# the stage-1 target on the corpus and pretrain.task_prompts training prompts. Either way the reference and
# every draft start from stage 0's draft.


def uses_pretrain(pretrain: DictConfig | None) -> bool:
    """Stage 0 makes the draft initialisation (either objective)."""
    return pretrain is not None and pretrain.corpus != "none"


def pretrains_target(pretrain: DictConfig | None) -> bool:
    """Stage 0 also pre-trains the target, which stage 1 then starts from (objective=lm)."""
    return uses_pretrain(pretrain) and pretrain.objective == "lm"


def with_pretrain_settings(stage: DictConfig, pretrain: DictConfig | None) -> DictConfig:
    """Stage 0 trains with pretrain.lr / batch_size / max_epochs: the task's stage settings are for the task."""
    if STAGES[stage.name].data != Data.corpus:
        return stage
    resolved = copy.deepcopy(stage)
    for key in ("lr", "batch_size", "max_epochs"):
        resolved[key] = pretrain[key]
    return resolved


class Data(StrEnum):
    corpus = "corpus"  # stage 0: the code corpus, not the task
    task = "task"  # the task's splits as loaded
    training = "training"  # the training splits made after the tokenizer and draft vocabulary (stages 2-3)


@dataclass(frozen=True)
class Stage:
    name: str
    label: str  # how messages name its artefact
    folder: Callable[[paths.Layout], Path]
    make: str  # the command that makes its artefact
    # the artefacts it trains from, in the order they are checked, given the run's pretrain config
    needs: Callable[[DictConfig | None], tuple[str, ...]]
    seed_key: str = "seed"  # the config key of its seed (its folder's seed<n>, its data order)
    data: Data = Data.task
    makes_draft_init: bool = False  # it saves the draft initialisation the reference and drafts start from


def _after_stage_0(pretrain: DictConfig | None) -> tuple[str, ...]:
    return ("pretrain_target",) if pretrains_target(pretrain) else ()


def _stage_0_draft_needs(pretrain: DictConfig | None) -> tuple[str, ...]:
    return ("pretrain_target",) if pretrains_target(pretrain) else ("target",)  # objective=kd distils the target


STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        Stage("pretrain_target", "pretrain_target", paths.Layout.pretrain_target_dir,
              "python -m adaspec.commands.train pretrain=stdlib stage=pretrain_target", lambda pretrain: (),
              seed_key="target_seed", data=Data.corpus),
        Stage("pretrain_draft", "pretrain_draft", paths.Layout.pretrain_draft_dir,
              "python -m adaspec.commands.train stage=pretrain_draft", _stage_0_draft_needs, data=Data.corpus),
        Stage("target", "target", paths.Layout.target_dir, "make stage1 (python -m adaspec.commands.train stage=target)",
              _after_stage_0, seed_key="target_seed"),
        Stage("ref", "ref", paths.Layout.ref_dir, "make stage2 (python -m adaspec.commands.train stage=ref)",
              lambda pretrain: ("target",), data=Data.training, makes_draft_init=True),
        Stage("draft", "draft", paths.Layout.draft_dir, "make stage3 (python -m adaspec.commands.train stage=draft)",
              lambda pretrain: ("target", "ref", "draft_init"), data=Data.training),
        # not trained on its own: stage 2 saves it before it trains (from stage 0's draft, where that ran)
        Stage("draft_init", "draft initialisation", paths.Layout.draft_init_dir, "make stage2", lambda pretrain: ()),
    )
}


def stage_dir(layout: paths.Layout) -> Path:
    """The folder of the stage `layout`'s run trains."""
    return STAGES[layout.stage].folder(layout)


def stage_seed(layout: paths.Layout) -> int:
    """The seed of the stage `layout`'s run trains (its folder's seed<n>, its data order)."""
    return getattr(layout, STAGES[layout.stage].seed_key)
