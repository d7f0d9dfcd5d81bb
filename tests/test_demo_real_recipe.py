"""`make demo-real` as the Makefile writes it: every command's overrides compose and validate, and the
stages agree on the folders they hand on (the draft stages find the reference the ref stage writes, the
evaluation the drafts), so a typo in the recipe fails here, not 20 minutes into a run."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from adaspec import paths
from adaspec.toolkit import checked_config
from tests.conftest import REPO


def recipe(target: str = "demo-real") -> list[tuple[str, list[str]]]:
    """(module, overrides) of every adaspec command of `make -n <target>`."""
    if shutil.which("make") is None:
        pytest.skip(f"needs make (the recipe is read from `make -n {target}`)")
    printed = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, check=True)
    commands = []
    for line in printed.stdout.splitlines():
        words = shlex.split(line)
        if "-m" in words and words[words.index("-m") + 1].startswith("adaspec."):
            at = words.index("-m") + 1
            commands.append((words[at], words[at + 1 :]))
    return commands


def test_every_demo_real_command_composes_and_the_stages_hand_on_their_folders():
    commands = recipe()
    modules = [m for m, _ in commands]
    assert modules == ["adaspec.commands.models", "adaspec.commands.train", "adaspec.commands.answers", "adaspec.commands.cache", "adaspec.commands.train",
                       "adaspec.commands.train", "adaspec.commands.train", "adaspec.commands.train", "adaspec.commands.evaluate"]
    configs = [checked_config(*overrides) for module, overrides in commands if module != "adaspec.commands.models"]
    target, _, cache, stage0, ref, draft04, draft1, evaluation = configs
    assert target.stage.name == "target" and target.stage.max_steps == 0 and str(target.model.name) == "smollm2"
    assert stage0.stage.name == "pretrain_draft" and stage0.pretrain.objective == "kd"  # the best of issue 13's
    assert ref.pretrain.objective == "kd"  # so the reference starts from stage 0's draft
    assert ref.stage.name == "ref" and draft04.k == 0.4 and draft1.k == 1.0
    for cfg in configs:
        assert cfg.distill.data == "target" and cfg.task.prompt_format == "chat"
        assert paths.target_dir(cfg) == paths.target_dir(target)
    assert paths.teacher_cache_dir(ref) == paths.teacher_cache_dir(cache)
    assert paths.ref_dir(draft04) == paths.ref_dir(ref) == paths.ref_dir(draft1)
    assert {paths.draft_dir(evaluation, k) for k in evaluation.eval.draft_ks} == {
        paths.draft_dir(draft04), paths.draft_dir(draft1)
    }


def test_the_eagle3_recipe_trains_heads_on_the_same_target_and_data_under_its_own_root():
    commands = [(m, o) for m, o in recipe("eagle3-real") if m != "adaspec.commands.models"]
    configs = [checked_config(*overrides) for _, overrides in commands]
    target, _, cache, ref, draft04, draft1, evaluation = configs
    demo = {m: checked_config(*o) for m, o in recipe() if m == "adaspec.commands.cache"}["adaspec.commands.cache"]
    for cfg in (ref, draft04, draft1, evaluation):
        assert cfg.model.draft_kind == "eagle3" and cfg.pretrain.corpus == "none" and cfg.distill.ttt_passes == 3
    assert paths.teacher_cache_dir(ref) == paths.teacher_cache_dir(cache)
    assert paths.target_dir(ref) == paths.target_dir(demo)  # the same target, answers and teacher cache ...
    assert paths.ref_dir(ref) == paths.ref_dir(demo).with_name("ref-eagle3-target-answers")  # ... never a draft
    assert paths.ref_dir(draft04) == paths.ref_dir(ref) == paths.ref_dir(draft1)
    assert {paths.draft_dir(evaluation, k) for k in evaluation.eval.draft_ks} == {
        paths.draft_dir(draft04), paths.draft_dir(draft1)
    }
