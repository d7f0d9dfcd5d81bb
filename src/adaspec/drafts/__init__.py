"""Kinds of draft (`Draft`): a small causal LM (`ModelDraft`), prompt lookup (`PromptLookupDraft`) and an
EAGLE-3 head reading the target's hidden states (`Eagle3Draft`).

The kinds the stages train (`TrainedDraft`) are listed by their `model.draft_kind` in `TRAINED_KINDS`;
`load_draft` opens a trained draft artefact; `build_baseline` makes a training-free draft from its config
(`conf/baseline/<name>.yaml`, listed in `eval.baselines`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adaspec.drafts.base import Draft, DraftSession, GreedyBlocks
from adaspec.drafts.eagle3 import Eagle3Draft
from adaspec.drafts.feature_source import FeatureSource
from adaspec.drafts.model import ModelDraft
from adaspec.drafts.prompt_lookup import PromptLookupDraft
from adaspec.drafts.trained import TrainedDraft

TRAINED_KINDS: dict[str, type[TrainedDraft]] = {kind.kind: kind for kind in (ModelDraft, Eagle3Draft)}


def trained_kind(draft_kind: Any) -> type[TrainedDraft]:
    """The kind of draft `model.draft_kind` names."""
    return TRAINED_KINDS[str(draft_kind)]


def artefact_kind(folder: str | Path) -> type[TrainedDraft]:
    """The kind of the trained draft artefact at `folder`, told by its config's `model_type` (a small causal LM:
    any other)."""
    model_type = json.loads((Path(folder) / "config.json").read_text()).get("model_type")
    return next((kind for kind in TRAINED_KINDS.values() if kind.model_type == model_type), ModelDraft)


def load_draft(folder: str | Path, attn_implementation: str = "auto", target=None, **kwargs) -> TrainedDraft:
    """A saved draft artefact of any trained kind. An EAGLE-3 head reads `target` (the target model) to train and
    to replay greedy blocks; decoding hands it the features."""
    return artefact_kind(folder).load(folder, attn_implementation, target=target, **kwargs)


def build_baseline(spec: Any) -> Draft:
    """A training-free draft from its config node (`_target_` and its arguments)."""
    from hydra.utils import instantiate  # only the evaluation builds baselines

    return instantiate(spec)


__all__ = ["TRAINED_KINDS", "Draft", "DraftSession", "Eagle3Draft", "FeatureSource", "GreedyBlocks", "ModelDraft",
           "PromptLookupDraft", "TrainedDraft", "artefact_kind", "build_baseline", "load_draft", "trained_kind"]
