"""selection=global: estimate one dL threshold on calibration batches and refresh it periodically."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from adaspec.distill.selection import threshold_for_fraction


class ThresholdRefresh(pl.Callback):
    """Sets `pl_module.threshold` at the start of training and every `every_n_steps` optimiser steps.

    The calibration batches come from `calibration_loader`, a loader of its own, so that the
    training data order is the same as with the other selection modes.
    """

    def __init__(self, calibration_loader, n_batches: int, every_n_steps: int):
        self.loader = calibration_loader
        self.n_batches = n_batches
        self.every_n_steps = every_n_steps

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
        pl_module.threshold = threshold_for_fraction(torch.cat(deltas), pl_module.k)
        pl_module.student.train(was_training)

    def on_train_start(self, trainer, pl_module) -> None:
        if pl_module.threshold is None:  # a resumed run keeps the threshold from its checkpoint
            self.refresh(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step > 0 and step % self.every_n_steps == 0:
            self.refresh(pl_module)
