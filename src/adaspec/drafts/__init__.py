"""Kinds of draft (`Draft`): a small causal LM (`ModelDraft`), prompt lookup (`PromptLookupDraft`) and an
EAGLE-3 head reading the target's hidden states (`Eagle3Draft`).

`load_draft` opens a trained draft artefact; `build_baseline` makes a training-free draft from its
config (`conf/baseline/<name>.yaml`, listed in `eval.baselines`)."""

from __future__ import annotations

from typing import Any

from adaspec.drafts.base import Draft, DraftSession, GreedyBlocks
from adaspec.drafts.eagle3 import Eagle3Draft
from adaspec.drafts.model import ModelDraft
from adaspec.drafts.prompt_lookup import PromptLookupDraft

load_draft = ModelDraft.load


def build_baseline(spec: Any) -> Draft:
    """A training-free draft from its config node (`_target_` and its arguments)."""
    from hydra.utils import instantiate  # only the evaluation builds baselines

    return instantiate(spec)


__all__ = ["Draft", "DraftSession", "Eagle3Draft", "GreedyBlocks", "ModelDraft", "PromptLookupDraft", "build_baseline", "load_draft"]
