"""Stage 0 (`pretrain=stdlib`): causal-LM pre-training of the from-scratch target (stage=pretrain_target,
once) and of the draft initialisation (stage=pretrain_draft, per seed) on the standard library's source.

Stage 0 trains the BPE tokenizer on the corpus and the task's training text; stage 1 then fine-tunes
the pre-trained target, and the reference and every draft start from the pre-trained draft.
"""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import DictConfig

from adaspec.config import PRETRAIN_STAGES
from adaspec.data.example import Example
from adaspec.data.stdlib_corpus import corpus_identity, stdlib_blocks


def uses_pretrain(cfg: DictConfig) -> bool:
    return cfg.get("pretrain") is not None and cfg.pretrain.corpus != "none"


def pretrain_stage_config(cfg: DictConfig) -> DictConfig:
    """Stage 0 trains with pretrain.lr / batch_size / max_epochs: the task's stage settings are for the task."""
    if cfg.stage.name not in PRETRAIN_STAGES:
        return cfg
    resolved = copy.deepcopy(cfg)
    for key in ("lr", "batch_size", "max_epochs"):
        resolved.stage[key] = cfg.pretrain[key]
    return resolved


def corpus_blocks(cfg: DictConfig) -> list[str]:
    p = cfg.pretrain
    return stdlib_blocks(p.max_chars, p.block_chars, seed=p.seed)


def corpus_splits(blocks: list[str], n_val: int) -> tuple[dict[str, list[Example]], dict[str, Any]]:
    """Every block is an example with an empty prompt, so the loss covers all its tokens; the first
    `n_val` blocks are held out."""
    examples = [Example(prompt="", target=block, reference="") for block in blocks]
    return {"train": examples[n_val:], "test": examples[:n_val]}, corpus_identity(blocks)
