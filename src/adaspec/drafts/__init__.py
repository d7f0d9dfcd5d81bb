"""Kinds of draft (`Draft`): a small causal LM (`ModelDraft`), prompt lookup (`PromptLookupDraft`) and an
EAGLE-3 head reading the target's hidden states (`Eagle3Draft`).

`load_draft` opens a trained draft artefact; `build_baseline` makes a training-free draft from its
config (`conf/baseline/<name>.yaml`, listed in `eval.baselines`)."""

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
from adaspec.models.eagle3 import Eagle3Config


def load_draft(folder: str | Path, attn_implementation: str = "auto", target=None, **kwargs) -> TrainedDraft:
    """A saved draft artefact of either trained kind, told apart by its config's `model_type`. An EAGLE-3 head
    reads `target` (the target model) to train and to replay greedy blocks; decoding hands it the features."""
    config = json.loads((Path(folder) / "config.json").read_text())
    if config.get("model_type") == Eagle3Config.model_type:
        return Eagle3Draft.load(folder, target, dtype=kwargs.get("dtype"))
    return ModelDraft.load(folder, attn_implementation, **kwargs)


def build_baseline(spec: Any) -> Draft:
    """A training-free draft from its config node (`_target_` and its arguments)."""
    from hydra.utils import instantiate  # only the evaluation builds baselines

    return instantiate(spec)


__all__ = ["Draft", "DraftSession", "Eagle3Draft", "FeatureSource", "GreedyBlocks", "ModelDraft", "PromptLookupDraft",
           "TrainedDraft", "build_baseline", "load_draft"]
