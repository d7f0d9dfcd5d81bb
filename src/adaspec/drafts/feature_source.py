"""Where a draft that reads the target's hidden states (`Draft.target_layers`) gets them outside decoding: from a
run of the frozen target, or in training from the feature cache of the training data (distill.teacher=cache,
`adaspec.distill.feature_cache`) for a batch that carries its examples' indices."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor
from transformers import PreTrainedModel

from adaspec.models.eagle3 import target_features

if TYPE_CHECKING:  # a type only: the cache's module reaches this package again through adaspec.artefacts.store
    from adaspec.distill.feature_cache import FeatureCache


class FeatureSource:
    """The frozen `target`, and the feature `cache` when there is one. The last batch's features run on the target
    are kept, so the drafts given one source (stage 3's student and its reference) run the target once per batch."""

    def __init__(self, target: PreTrainedModel | None, cache: FeatureCache | None = None):
        self.target, self.cache = target, cache
        # (input_ids, attention_mask, layers, features) of the last run: holding the tensors keeps their ids from
        # being reused while they are compared by identity
        self._last: tuple[Tensor, Tensor | None, list[int], Tensor] | None = None

    def live(self, input_ids: Tensor, attention_mask: Tensor | None, layers: list[int]) -> Tensor:
        """The target's features `[B, T, len(layers) * H]` of every position (no gradient)."""
        last = self._last
        if last is not None and last[0] is input_ids and last[1] is attention_mask and last[2] == layers:
            return last[3]
        with torch.no_grad():
            out = self.target(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                              logits_to_keep=1)
        features = target_features(out.hidden_states, layers)
        self._last = (input_ids, attention_mask, layers, features)
        return features
