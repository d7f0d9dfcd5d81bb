"""Stage 2: distil the reference from the frozen target with a per-token divergence (forward KL)."""

from __future__ import annotations

import torch
from omegaconf import DictConfig
from transformers import PreTrainedModel

from adaspec.distill.teacher import LiveTeacher
from adaspec.distill.tokens import answer_logits, answer_mask, answer_targets
from adaspec.stages.base import StageModule


class ReferenceDistill(StageModule):
    def __init__(
        self,
        student: PreTrainedModel,
        stage: DictConfig,
        distill: DictConfig,
        target: PreTrainedModel | None,
        frozen: dict[str, PreTrainedModel] | None = None,
        teacher=None,
        token_weights: torch.Tensor | None = None,
    ):
        """`teacher` (a LiveTeacher or CachedTeacher) defaults to running `target` live. With a cached
        teacher, `target` may be None, or kept only for callbacks that decode with it. `token_weights` [V]:
        the loss weight of each label token id (task.domain digit/operator weights; None: all 1)."""
        models = {"target": target} if target is not None else {}
        super().__init__(student, stage, frozen={**models, **(frozen or {})})
        self.distill_cfg = distill
        self.teacher = teacher or LiveTeacher(target, distill.divergence, distill.chunk_size)
        self.register_buffer("token_weights", token_weights, persistent=False)

    def _answer_logits(self, model: PreTrainedModel, batch: dict[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return answer_logits(logits, mask)

    def student_divergence(self, batch: dict[str, torch.Tensor]):
        """(per-token divergence of the student [N], the teacher's signal for the batch, answer mask [B, T-1])."""
        mask = answer_mask(batch["labels"])
        with torch.no_grad():
            signal = self.teacher.signal(batch, mask)
        return self.teacher.divergence(signal, self._answer_logits(self.student, batch, mask)), signal, mask

    def answer_weights(self, batch: dict[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor | None:
        """[N] loss weight of each answer token's label, or None when every weight is 1. The weighted sum is
        divided by a token count, never by the sum of weights, so a weight of 2 doubles that token's step."""
        if self.token_weights is None:
            return None
        return self.token_weights[answer_targets(batch["labels"], mask)].float()

    def loss(self, batch):
        kl, _, mask = self.student_divergence(batch)
        weights = self.answer_weights(batch, mask)
        if weights is None:
            return kl.mean(), {}
        return (kl * weights).sum() / max(kl.numel(), 1), {}

    def val_metrics(self, batch):
        kl, _, _ = self.student_divergence(batch)
        return {"kl": kl.mean()}
