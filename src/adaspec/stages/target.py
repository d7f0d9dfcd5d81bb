"""Stage 1: fine-tune the target with cross-entropy on answer tokens only."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from adaspec.distill.tokens import answer_logits, answer_mask, answer_targets
from adaspec.stages.base import StageModule


class TargetFinetune(StageModule):
    def _cross_entropy(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        mask = answer_mask(batch["labels"])
        return F.cross_entropy(answer_logits(logits, mask).float(), answer_targets(batch["labels"], mask))

    def loss(self, batch):
        return self._cross_entropy(batch), {}

    def val_metrics(self, batch):
        return {"ce": self._cross_entropy(batch)}
