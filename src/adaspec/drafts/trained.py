"""A kind of draft the stages train (`model.draft_kind`), declared by its class: the suffix of its folders, how its
first weights are made, what training reads of the target, its loss on a batch and its export format. The kinds
are listed by name in `adaspec.drafts.TRAINED_KINDS`; nothing outside `adaspec.drafts` asks which kind it has."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig
from torch import Tensor, nn
from transformers import PretrainedConfig, PreTrainedModel

from adaspec.drafts.base import Draft
from adaspec.drafts.feature_source import FeatureSource
from adaspec.models.draft_vocab import DraftVocab


class TrainedDraft(Draft):
    """`model`: the weights the optimiser updates; `vocab`: its id map when its vocabulary is reduced."""

    # on the folders of its stages (adaspec.artefacts.paths), before -<model.draft_name>: kinds share the target, never a draft
    folder_suffix: ClassVar[str] = ""
    export_format: ClassVar[str]  # how adaspec.export writes it: "hf" or "speculators"
    model_type: ClassVar[str | None] = None  # its artefacts' config.json `model_type`; None: any other
    # its first weights are `from_target` of the target artefact; else built from model.draft (stage 0's draft, a
    # pretrained one, or model.draft_init: adaspec.stages.draft_init)
    starts_from_target: ClassVar[bool] = False

    model: nn.Module
    vocab: DraftVocab | None
    feature_source: FeatureSource | None = None  # where it reads the target's hidden states (`attach_training`)

    @classmethod
    @abstractmethod
    def load(cls, folder: str | Path, attn_implementation: str = "auto", target: PreTrainedModel | None = None,
             **kwargs: Any) -> TrainedDraft:
        """A saved artefact of this kind; `target` for a kind that reads the target's hidden states."""

    @classmethod
    def feature_layers(cls, target_config: PretrainedConfig) -> list[int]:
        """The target's hidden states training reads for a target of `target_config` (its `target_layers`)."""
        return []

    @classmethod
    def from_target(cls, model: DictConfig, seed: int, target: PreTrainedModel, vocab: DraftVocab | None
                    ) -> TrainedDraft:
        """The initial draft of a kind that `starts_from_target` (`model`: the model config, `seed`: the run's),
        over `vocab` (None: the target's vocabulary)."""
        raise NotImplementedError(f"a {cls.kind} draft starts from model.draft")

    def attach_training(self, source: FeatureSource) -> None:
        """Read the target's hidden states from `source` in training (a draft with `target_layers`)."""
        self.feature_source = source

    @abstractmethod
    def answer_divergence(self, batch: dict[str, Tensor], mask: Tensor, divergence: Callable[[Tensor], Tensor],
                          passes: int = 1) -> Tensor:
        """[N] divergence of the answer tokens (`mask` [B, T-1]) of `batch`: `divergence` of their logits
        `[N, support]` (the teacher's, adaspec.distill.draft_divergence); `passes`: distill.ttt_passes."""

    def to(self, device: torch.device | str) -> TrainedDraft:
        """The weights and the id map on `device`: the map moves once here, not once per drafted token."""
        self.model.to(device)
        if self.vocab is not None:
            self.vocab = self.vocab.to(device)
        return self

    def eval(self) -> TrainedDraft:
        self.model.eval()
        return self

    def to_draft_ids(self, target_ids: Tensor) -> Tensor:
        return target_ids if self.vocab is None else self.vocab.to(target_ids.device).to_draft(target_ids)

    def to_target_ids(self, draft_ids: Tensor) -> Tensor:
        return draft_ids if self.vocab is None else self.vocab.to(draft_ids.device).to_target(draft_ids)

    def to_target_distribution(self, q: Tensor) -> Tensor:
        """Distributions `[..., support]` over the draft's ids as ones over the target's (zero where it has none)."""
        return q if self.vocab is None else self.vocab.to(q.device).scatter(q)

    def save_vocab(self, folder: Path) -> None:
        if self.vocab is not None:
            self.vocab.save(folder)
