"""Train until the held-out divergence stops improving, and keep the best validated weights
(`stage.early_stop_patience`): the "optimal epoch" setting of the paper's second comparison, where each
draft trains as long as it still gets closer to the target on held-out answers, under the epoch cap
`stage.max_epochs`.

After every validation: a lower `val/kl` than any before keeps a copy of the student's weights; after
`patience` validations in a row without one, training stops. At the end of training the best copy is put
back, so the saved draft is the one with the lowest held-out KL. The copy and the counters are part of
the checkpoint, so a resumed run stops where the uninterrupted one would.

`counted_after_step`: validations up to that optimiser step neither keep weights nor count against the
patience. An EAGLE-3 head's warm-up (distill.ttt_warmup_steps) trains only the first pass of the training-time
test, so its validations, which run every pass, judge passes not trained yet.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch


class KeepBestValidation(pl.Callback):
    def __init__(self, patience: int, monitor: str = "val/kl", counted_after_step: int = 0) -> None:
        self.patience, self.monitor, self.counted_after_step = patience, monitor, counted_after_step
        self.best: float | None = None
        self.best_step: int | None = None
        self.best_state: dict[str, torch.Tensor] | None = None
        self.bad_validations = 0
        self.stopped_early = False

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        fitting = trainer.state.fn == "fit"  # not the final validation of the kept weights
        if trainer.sanity_checking or not fitting or self.monitor not in trainer.callback_metrics:
            return
        if self.counted_after_step and trainer.global_step <= self.counted_after_step:  # 0: every validation
            return
        value = float(trainer.callback_metrics[self.monitor])
        if self.best is None or value < self.best:
            self.best, self.best_step, self.bad_validations = value, trainer.global_step, 0
            self.best_state = {k: v.detach().cpu().clone() for k, v in pl_module.student.state_dict().items()}
            return
        self.bad_validations += 1
        if self.bad_validations >= self.patience:
            trainer.should_stop = self.stopped_early = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.best_state is not None:
            pl_module.student.load_state_dict(self.best_state)

    def summary(self) -> dict[str, float | int | bool | None]:
        """For the artefact's metrics.json."""
        return {"early_stop/best_step": self.best_step, "early_stop/best_val_kl": self.best,
                "early_stop/stopped": self.stopped_early}

    def state_dict(self) -> dict:
        return {"best": self.best, "best_step": self.best_step, "best_state": self.best_state,
                "bad_validations": self.bad_validations, "stopped_early": self.stopped_early}

    def load_state_dict(self, state_dict: dict) -> None:
        self.best, self.best_step = state_dict["best"], state_dict["best_step"]
        self.best_state, self.bad_validations = state_dict["best_state"], state_dict["bad_validations"]
        self.stopped_early = state_dict["stopped_early"]
