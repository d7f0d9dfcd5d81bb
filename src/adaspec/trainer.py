"""Assemble the Lightning Trainer of a stage: loggers, checkpointing, step budget."""

from __future__ import annotations

import math
from pathlib import Path

import lightning.pytorch as pl
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from omegaconf import DictConfig, OmegaConf

CHECKPOINTS = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"


def steps_per_epoch(stage: DictConfig, n_train: int) -> int:
    return math.ceil(math.ceil(n_train / stage.batch_size) / stage.accumulate_grad_batches)


def total_steps(stage: DictConfig, n_train: int) -> int:
    """Optimiser steps of a stage: stage.max_steps if set, else max_epochs over the training set."""
    if stage.max_steps > 0:
        return int(stage.max_steps)
    return steps_per_epoch(stage, n_train) * stage.max_epochs


def build_loggers(cfg: DictConfig, folder: Path, run_name: str) -> list[Logger]:
    loggers: list[Logger] = [CSVLogger(save_dir=str(folder), name="logs", version="")]
    wb = cfg.logger.wandb
    if wb.enabled and wb.mode != "disabled":
        loggers.append(
            WandbLogger(
                project=wb.project,
                entity=wb.entity,
                name=run_name,
                group=f"{cfg.task.name}/{cfg.model.name}",
                save_dir=str(folder),
                mode=wb.mode,
                config=OmegaConf.to_container(cfg, resolve=True),
            )
        )
    return loggers


def build_trainer(
    cfg: DictConfig, folder: Path, n_train: int, run_name: str, callbacks: list[pl.Callback] | None = None
) -> pl.Trainer:
    st = cfg.stage
    steps = total_steps(st, n_train)
    checkpointing = ModelCheckpoint(
        dirpath=str(folder / CHECKPOINTS),
        filename="step{step}",
        save_last=True,
        save_top_k=0,
        every_n_train_steps=st.checkpoint_every_n_steps,
    )
    return instantiate(
        cfg.trainer,
        max_steps=steps,
        max_epochs=math.ceil(steps / steps_per_epoch(st, n_train)),
        gradient_clip_val=st.gradient_clip_val,
        accumulate_grad_batches=st.accumulate_grad_batches,
        val_check_interval=st.val_every_n_steps if st.val_every_n_steps > 0 else 1.0,
        check_val_every_n_epoch=None if st.val_every_n_steps > 0 else 1,
        num_sanity_val_steps=0,
        logger=build_loggers(cfg, folder, run_name),
        callbacks=[checkpointing, *(callbacks or [])],
        default_root_dir=str(folder),
        enable_model_summary=False,
    )
