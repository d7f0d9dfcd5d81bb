"""selection=global: one dL threshold for every batch, that keeps selecting about the fraction k it promises.

A threshold frozen between refreshes starves the draft: it learns the selected tokens within a few steps,
their dL falls below the threshold, and almost nothing is selected until the next refresh (issue 14: 0-1.6 %
of the tokens at k = 0.3). So the threshold tracks the draft: after every training batch it moves towards
that batch's (1 - k) quantile of dL (the cut `select_top_k` would make on the batch alone),

    threshold <- (1 - ema) * threshold + ema * q_batch        (distill.threshold_ema; 0: frozen),

averaged over data-parallel ranks so that every rank keeps the same threshold. On top of that it is
recalibrated from scratch on `calibration_batches` held-out batches at the start of training and every
`refresh_every_n_steps` optimiser steps. Each recalibration is logged (`train/threshold_refresh`, the new
threshold, and a log message). The threshold is part of the module's checkpoint, so a resumed run continues
with it.
"""

from __future__ import annotations

import logging

import lightning.pytorch as pl
import torch

from adaspec.distill.selection import SelectionRecord, threshold_for_fraction

log = logging.getLogger(__name__)


class ThresholdRefresh(pl.Callback):
    """Sets the rule's threshold (`pl_module.selection_state.threshold`) at the start of training, moves it
    after every batch (from the step's selection record) and recalibrates it every `every_n_steps` optimiser
    steps.

    The calibration batches come from `calibration_loader`, a loader of its own, so that the
    training data order is the same as with the other selection modes.
    """

    def __init__(self, calibration_loader, n_batches: int, every_n_steps: int, ema: float = 0.0):
        self.loader = calibration_loader
        self.n_batches = n_batches
        self.every_n_steps = every_n_steps
        self.ema = ema
        self._refreshed_at: int | None = None
        self._batch_step = 0

    @torch.no_grad()
    def refresh(self, pl_module) -> None:
        was_training = pl_module.student.training
        pl_module.student.eval()
        deltas = []
        for i, batch in enumerate(self.loader):
            if i == self.n_batches:
                break
            batch = {name: t.to(pl_module.device) for name, t in batch.items()}
            deltas.append(pl_module.token_deltas(batch)[1].cpu())
        state = pl_module.selection_state
        state.threshold = threshold_for_fraction(torch.cat(deltas), pl_module.current_k())
        pl_module.student.train(was_training)
        log.info("selection threshold recalibrated to %.4f at step %d", state.threshold, pl_module.global_step)

    def on_train_start(self, trainer, pl_module) -> None:
        if pl_module.selection_state.threshold is None:  # a resumed run keeps the threshold from its checkpoint
            self.refresh(pl_module)
            self._log_refresh(trainer, pl_module, step=trainer.global_step)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batch_step = trainer.global_step

    def track(self, trainer, pl_module, record: SelectionRecord | None) -> bool:
        """Move the threshold towards the batch's (1 - k) quantile of dL, or reset it to that quantile when
        it selected a fraction outside the band on any rank. True when it was reset."""
        state = pl_module.selection_state
        if record is None or record.delta.numel() == 0 or state.threshold is None:
            return False
        cut = torch.tensor(threshold_for_fraction(record.delta, pl_module.current_k()), device=pl_module.device)
        cut = float(trainer.strategy.reduce(cut, reduce_op="mean"))
        reset = trainer.strategy.reduce_boolean_decision(bool(record.out_of_band), all=False)
        if reset:
            state.threshold = cut
        elif self.ema > 0:
            state.threshold = (1 - self.ema) * state.threshold + self.ema * cut
        return reset

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        reset = self.track(trainer, pl_module, (outputs or {}).get("selection"))
        step = trainer.global_step
        # with gradient accumulation the step repeats over its micro-batches: recalibrate once
        if step > 0 and step % self.every_n_steps == 0 and step != self._refreshed_at:
            self._refreshed_at = step
            self.refresh(pl_module)
        elif reset:
            log.info("selection threshold reset to the batch's cut %.4f at step %d", pl_module.selection_state.threshold, step)
        else:
            return
        self._log_refresh(trainer, pl_module, step=self._batch_step)

    def _log_refresh(self, trainer, pl_module, step: int) -> None:
        """Logged at the step whose batch caused it (the row of that step's training metrics), not at the
        already incremented global step: a checkpoint saved before the next step then holds the threshold
        and its log row alike, and a run resumed from it neither loses the row nor logs it twice."""
        for logger in trainer.loggers:
            logger.log_metrics({"train/threshold_refresh": float(pl_module.selection_state.threshold)}, step=step)
