"""What every stage shares: the trained model, AdamW with the warmup-cosine schedule, logging."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from adaspec.data.datamodule import TaskDataModule
from adaspec.models.attention import resolve_attn_implementation
from adaspec.stages.schedule import lr_multiplier
from adaspec.stages.stage_run import StageRun
from adaspec.training.trainer import is_half


def attn_implementation(run: StageRun) -> str:
    """The attention kernel of every model a stage loads (`auto` resolved for this machine and precision)."""
    return resolve_attn_implementation(run.model.attn_implementation, is_half(run.precision))


class StageModule(pl.LightningModule):
    """Base of the stages. Subclasses implement `build` (the stage's models, from what the run says: `StageRun`),
    `loss(batch) -> (loss, metrics)` and `val_metrics`, and may add `callbacks`.

    Only `self.student` is registered as a submodule, so only it is optimised and checkpointed;
    frozen teachers live in `self.frozen` (a plain dict), in eval mode and without gradients.

    Under every strategy `on_fit_start` puts the frozen models on this process's device, in the
    student's parameter dtype: float32 under `*-mixed` precision, where autocast runs their forward in
    bf16/fp16 like the student's; bf16/fp16 under `*-true` precision and DeepSpeed, which convert the
    student. FSDP and DeepSpeed shard only registered parameters, so frozen teachers are replicated on
    every device, not sharded: they have no gradients or optimiser state (what sharding saves most on),
    and sharding them would add an all-gather of weights that never change to every forward.
    """

    def __init__(
        self, student: PreTrainedModel, stage: DictConfig, frozen: dict[str, PreTrainedModel] | None = None
    ):
        super().__init__()
        self.student = student
        self.stage_cfg = stage
        self.frozen = frozen or {}
        self._step_started: float | None = None

    @classmethod
    def build(cls, run: StageRun, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule) -> StageModule:
        raise NotImplementedError

    @property
    def artefact(self):
        """What the stage saves: the student (a draft stage's `TrainedDraft`, with its id map)."""
        return self.student

    def callbacks(self, run: StageRun, data: TaskDataModule) -> list[pl.Callback]:
        """The Lightning callbacks this stage trains with, besides checkpointing."""
        return []

    def on_fit_start(self) -> None:
        dtype = next((p.dtype for p in self.student.parameters() if p.is_floating_point()), None)
        for model in self.frozen.values():
            model.to(device=self.device, dtype=dtype).eval()

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def step(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float], dict[str, Any]]:
        """(loss, metrics to log, what the step hands its callbacks beside the loss: their `outputs`)."""
        loss, metrics = self.loss(batch)
        return loss, metrics, {}

    def val_metrics(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        self._step_started = time.perf_counter()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, Any]:
        loss, metrics, outputs = self.step(batch)
        finite = bool(torch.isfinite(loss))
        # every rank of a data-parallel run stops together (one rank alone would leave the others waiting)
        if not self.trainer.strategy.reduce_boolean_decision(finite, all=True):
            raise FloatingPointError(
                f"non-finite training loss ({loss.item() if not finite else 'on another rank'}) at step {self.global_step}"
            )
        n = batch["input_ids"].shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], batch_size=n)
        for name, value in metrics.items():
            self.log(f"train/{name}", value, batch_size=n)
        return {"loss": loss, **outputs}

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self._step_started is not None:
            tokens = int(batch["attention_mask"].sum())
            self.log("train/tokens_per_s", tokens / (time.perf_counter() - self._step_started))

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        for name, value in self.val_metrics(batch).items():
            self.log(
                f"val/{name}", value, batch_size=batch["input_ids"].shape[0], prog_bar=True, sync_dist=True
            )

    def configure_optimizers(self):
        st = self.stage_cfg
        optimizer = torch.optim.AdamW(self.student.parameters(), lr=st.lr, weight_decay=st.weight_decay)
        schedule = partial(
            lr_multiplier,
            total_steps=max(1, self.trainer.max_steps),
            warmup_frac=st.warmup_frac,
            min_lr_ratio=st.min_lr_ratio,
            decay_end_frac=st.decay_end_frac,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
