"""Stage 0: the draft initialisation (stage=pretrain_draft, per seed) learns from more text than the task's
answers before stage 2, on the standard library's source.

`pretrain=stdlib` (objective=lm, from-scratch presets): causal-LM pre-training of the target
(stage=pretrain_target, once) and of the draft; stage 0 trains the BPE tokenizer on the corpus and the
task's training text, and stage 1 fine-tunes the pre-trained target. `pretrain=distill` (objective=kd,
pretrained targets): the draft distils the stage-1 target's distribution on the corpus and
`pretrain.task_prompts` of the task's training prompts. Either way the reference and every draft start
from stage 0's draft.
"""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import DictConfig

from adaspec.config import PRETRAIN_STAGES
from adaspec.data.example import Example
from adaspec.data.stdlib_corpus import corpus_identity, stdlib_blocks
from adaspec.data.tasks import first_training_examples


def uses_pretrain(cfg: DictConfig) -> bool:
    """Stage 0 makes the draft initialisation (either objective)."""
    return cfg.get("pretrain") is not None and cfg.pretrain.corpus != "none"


def pretrains_target(cfg: DictConfig) -> bool:
    """Stage 0 also pre-trains the target, which stage 1 then starts from (objective=lm)."""
    return uses_pretrain(cfg) and cfg.pretrain.objective == "lm"


def pretrain_stage_config(cfg: DictConfig) -> DictConfig:
    """Stage 0 trains with pretrain.lr / batch_size / max_epochs: the task's stage settings are for the task."""
    if cfg.stage.name not in PRETRAIN_STAGES:
        return cfg
    resolved = copy.deepcopy(cfg)
    for key in ("lr", "batch_size", "max_epochs"):
        resolved.stage[key] = cfg.pretrain[key]
    return resolved


def corpus_blocks(cfg: DictConfig) -> list[str]:
    """The corpus' blocks, then the first pretrain.task_prompts prompts of the task's training split."""
    p = cfg.pretrain
    blocks = stdlib_blocks(p.max_chars, p.block_chars, seed=p.seed)
    return blocks + [e.prompt for e in first_training_examples(cfg.task, p.task_prompts)] if p.task_prompts else blocks


def corpus_splits(blocks: list[str], n_val: int) -> tuple[dict[str, list[Example]], dict[str, Any]]:
    """Every block is an example with an empty prompt, so the loss covers all its tokens; the first
    `n_val` blocks are held out."""
    examples = [Example(prompt="", target=block, reference="") for block in blocks]
    return {"train": examples[n_val:], "test": examples[:n_val]}, corpus_identity(blocks)
