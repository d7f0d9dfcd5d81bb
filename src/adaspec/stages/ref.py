"""Stage 2: distil the reference from the frozen target with a per-token divergence (forward KL)."""

from __future__ import annotations

import torch
from omegaconf import DictConfig
from transformers import PreTrainedModel

from adaspec.distill.divergence import token_divergence
from adaspec.distill.tokens import answer_logits, answer_mask
from adaspec.stages.base import StageModule


class ReferenceDistill(StageModule):
    def __init__(
        self,
        student: PreTrainedModel,
        stage: DictConfig,
        distill: DictConfig,
        target: PreTrainedModel,
        frozen: dict[str, PreTrainedModel] | None = None,
    ):
        super().__init__(student, stage, frozen={"target": target, **(frozen or {})})
        self.distill_cfg = distill

    def _answer_logits(self, model: PreTrainedModel, batch: dict[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return answer_logits(logits, mask)

    def _divergence(self, teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
        return token_divergence(teacher, student, self.distill_cfg.divergence, self.distill_cfg.chunk_size)

    def student_divergence(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(per-token divergence of the student [N], teacher answer logits [N, V], answer mask [B, T-1])."""
        mask = answer_mask(batch["labels"])
        with torch.no_grad():
            teacher = self._answer_logits(self.frozen["target"], batch, mask)
        return self._divergence(teacher, self._answer_logits(self.student, batch, mask)), teacher, mask

    def loss(self, batch):
        kl, _, _ = self.student_divergence(batch)
        return kl.mean(), {}

    def val_metrics(self, batch):
        kl, _, _ = self.student_divergence(batch)
        return {"kl": kl.mean()}
