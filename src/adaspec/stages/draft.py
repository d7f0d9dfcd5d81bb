"""Stage 3: selective distillation. Train the draft only on the top-k fraction of answer tokens by
dL = L_draft - L_ref, the tokens where the draft lags furthest behind what the reference reached.
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig
from transformers import PreTrainedModel

from adaspec.config import Normalize
from adaspec.distill.selection import select_top_k
from adaspec.stages.ref import ReferenceDistill


class SelectiveDistill(ReferenceDistill):
    def __init__(
        self,
        student: PreTrainedModel,
        stage: DictConfig,
        distill: DictConfig,
        target: PreTrainedModel,
        reference: PreTrainedModel,
        k: float,
    ):
        super().__init__(student, stage, distill, target, frozen={"reference": reference})
        self.k = k
        self.threshold: float | None = None  # selection=global: set by the ThresholdRefresh callback

    def token_deltas(self, batch: dict[str, torch.Tensor]):
        """(L_draft [N] with gradients, dL [N] without, answer mask [B, T-1])."""
        kl_draft, teacher, mask = self.student_divergence(batch)
        with torch.no_grad():
            kl_ref = self._divergence(teacher, self._answer_logits(self.frozen["reference"], batch, mask))
        return kl_draft, kl_draft.detach() - kl_ref, mask

    def loss(self, batch):
        kl_draft, delta, mask = self.token_deltas(batch)
        sequence_ids = torch.arange(mask.shape[0], device=mask.device)[:, None].expand_as(mask)[mask]
        selected = select_top_k(delta, self.k, self.distill_cfg.selection, sequence_ids, self.threshold)
        self.last_selection = (mask, selected)  # read by callbacks that count selected tokens
        denominator = kl_draft.numel() if self.distill_cfg.normalize == Normalize.all_tokens.value else selected.sum()
        loss = (kl_draft * selected).sum() / max(int(denominator), 1)
        threshold = self.threshold if self.threshold is not None else float(delta[selected].min())
        return loss, {
            "selected_frac": selected.float().mean(),
            "delta_mean": delta.mean(),
            "threshold": threshold,
        }

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["selection_threshold"] = self.threshold

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.threshold = checkpoint.get("selection_threshold")
