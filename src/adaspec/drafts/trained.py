"""A kind of draft the stages train (`model.draft_kind`), declared by its class: what training reads of the target
and its loss on a batch."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path

from torch import Tensor, nn

from adaspec.drafts.base import Draft
from adaspec.drafts.feature_source import FeatureSource
from adaspec.models.draft_vocab import DraftVocab


class TrainedDraft(Draft):
    """`model`: the weights the optimiser updates; `vocab`: its id map when its vocabulary is reduced."""

    model: nn.Module
    vocab: DraftVocab | None
    feature_source: FeatureSource | None = None  # where it reads the target's hidden states (`attach_training`)

    def attach_training(self, source: FeatureSource) -> None:
        """Read the target's hidden states from `source` in training (a draft with `target_layers`)."""
        self.feature_source = source

    @abstractmethod
    def answer_divergence(self, batch: dict[str, Tensor], mask: Tensor, divergence: Callable[[Tensor], Tensor],
                          passes: int = 1) -> Tensor:
        """[N] divergence of the answer tokens (`mask` [B, T-1]) of `batch`: `divergence` of their logits
        `[N, support]` (the teacher's, adaspec.distill.draft_divergence); `passes`: distill.ttt_passes."""

    def save_vocab(self, folder: Path) -> None:
        if self.vocab is not None:
            self.vocab.save(folder)
