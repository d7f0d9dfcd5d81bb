"""Where this process's training started and how many optimiser steps it took: what shows a resumed run resumed.

A resumed run and the uninterrupted one end with the same weights and log, so neither tells whether the resume
continued from the checkpoint or silently trained again from step 0; these two numbers do (metrics.json's
`resumed_from_step` and `steps_this_run`, and the line printed when training starts at a step above 0).
"""

from __future__ import annotations

import lightning.pytorch as pl

from adaspec.training.distributed import say


class StepsThisRun(pl.Callback):
    def __init__(self, total_steps: int) -> None:
        self.total_steps = total_steps
        self.first_step = self.steps = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.first_step = self.last_step = trainer.global_step
        if self.first_step:
            say(f"[adaspec] resumed at step {self.first_step}: {self.total_steps - self.first_step} steps to go")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.last_step:  # an optimiser step (not an accumulated batch)
            self.steps += 1
            self.last_step = trainer.global_step
