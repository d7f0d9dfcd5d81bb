"""`checkpoints/last.ckpt` every n optimiser steps, written when the next batch starts.

Lightning's ModelCheckpoint saves in `on_train_batch_end`, before the step's metrics are logged; a run
killed between the two would resume after a step whose row never reached `logs/metrics.csv`. Saving at
the start of the next batch, after the row is written (the CSV log flushes every row), keeps the log on
disk a superset of what the checkpoint has trained.

Lightning counts a checkpoint's logging step as if it had been saved at the end of a batch, before its
count of batches that stepped was incremented, and increments it on restore; a checkpoint saved here,
after the increment, therefore records one less.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl


class StepCheckpoint(pl.Callback):
    def __init__(self, path: Path, every_n_steps: int) -> None:
        self.path = Path(path)
        self.every_n_steps = every_n_steps
        self.saved_step = -1
        self._saving = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.saved_step = trainer.global_step  # a resumed run does not rewrite the checkpoint it started from

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if self.every_n_steps > 0 and step > 0 and step % self.every_n_steps == 0 and step != self.saved_step:
            self._saving = True
            try:
                trainer.save_checkpoint(self.path)
            finally:
                self._saving = False
            self.saved_step = step

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        if self._saving:
            checkpoint["loops"]["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"] -= 1
