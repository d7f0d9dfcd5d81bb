"""Assemble the Lightning Trainer of a stage: loggers, checkpointing, step budget, precision, strategy.

`cfg.trainer` is instantiated as `lightning.pytorch.Trainer` (its `_target_`); the keys that are not
Trainer arguments are consumed here:

- `fp16_init_scale`: with `precision=16-mixed` the gradient scaler starts at this loss scale (128,
  the practice note's fp16 setting; torch's default 65536 overflows the first steps). Passed as
  Lightning's own precision plugin (MixedPrecision / FSDPPrecision with a GradScaler) or, under
  DeepSpeed, as `DeepSpeedStrategy(initial_scale_power=log2(scale))`.
- `strategy=fsdp` becomes `FSDPStrategy` wrapping each transformer block of the trained model (the
  classes in its `_no_split_modules`) with full (rank-0, unsharded) state dicts, so checkpoints and
  artefacts are ordinary files.
"""

from __future__ import annotations

import math
import resource
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from hydra.utils import instantiate
from lightning.pytorch.loggers import Logger, WandbLogger
from omegaconf import DictConfig, ListConfig, OmegaConf

from adaspec.artefacts.paths import CHECKPOINTS, LAST_CHECKPOINT
from adaspec.callbacks.free_memory import FreeMemory
from adaspec.callbacks.step_checkpoint import StepCheckpoint
from adaspec.logs import one_line_per_event
from adaspec.toolkit import wandb_enabled
from adaspec.training.resumable_csv import ResumableCSVLogger


def world_size(trainer: DictConfig) -> int:
    """Processes of a run (devices per node x nodes), as Lightning will count them, from the config alone."""
    devices = trainer.devices
    if isinstance(devices, ListConfig | list | tuple):
        per_node = len(devices)
    elif isinstance(devices, str) and "," in devices:
        per_node = len([d for d in devices.split(",") if d.strip()])
    elif str(devices) in ("auto", "-1"):
        gpu = str(trainer.accelerator) in ("gpu", "cuda", "auto") and torch.cuda.is_available()
        per_node = torch.cuda.device_count() if gpu else 1
    else:
        per_node = int(devices)
    return max(1, per_node) * int(trainer.get("num_nodes", 1))


def steps_per_epoch(stage: DictConfig, n_train: int, world: int = 1) -> int:
    """Optimiser steps per epoch; under data parallelism each of `world` processes sees 1/world of the data."""
    return math.ceil(math.ceil(math.ceil(n_train / world) / stage.batch_size) / stage.accumulate_grad_batches)


def total_steps(stage: DictConfig, n_train: int, world: int = 1) -> int:
    """Optimiser steps of a stage: stage.max_steps if set (0: none), else max_epochs over the training set."""
    if stage.max_steps >= 0:
        return int(stage.max_steps)
    return steps_per_epoch(stage, n_train, world) * stage.max_epochs


def build_loggers(
    logger: DictConfig, group: str, config: dict, folder: Path, run_name: str, resume_step: int | None = None
) -> list[Logger]:
    """`logs/metrics.csv` (continued from `resume_step` when resuming) and, when the `logger` group turns it on,
    W&B (the run `run_name` in `group`, recording the resolved `config`)."""
    loggers: list[Logger] = [
        ResumableCSVLogger(
            save_dir=str(folder), name="logs", version="", flush_logs_every_n_steps=1, resume_step=resume_step
        )
    ]
    wb = logger.wandb
    if wandb_enabled(logger):
        loggers.append(
            WandbLogger(
                project=wb.project,
                entity=wb.entity,
                name=run_name,
                group=group,
                save_dir=str(folder),
                mode=wb.mode,
                config=config,
            )
        )
    return loggers


def is_half(precision: str) -> bool:
    return str(precision).startswith(("16", "bf16"))


def _strategy_and_plugins(trainer: dict[str, Any], init_scale: float, student) -> tuple[Any, list]:
    """The Lightning strategy (a name or a Strategy object) and precision plugins for the config; sets
    trainer["precision"] to None where a plugin carries it."""
    strategy, precision = trainer.pop("strategy", "auto"), str(trainer.get("precision"))
    fp16 = precision in ("16-mixed", "16")
    if isinstance(strategy, str) and strategy.startswith("deepspeed"):
        if not fp16:
            return strategy, []
        from lightning.pytorch.strategies import DeepSpeedStrategy

        stage = int(strategy.rsplit("_", 1)[-1]) if strategy[-1].isdigit() else 2
        return DeepSpeedStrategy(stage=stage, initial_scale_power=round(math.log2(init_scale))), []
    if strategy == "fsdp":
        from lightning.pytorch.plugins.precision import FSDPPrecision
        from lightning.pytorch.strategies import FSDPStrategy
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        blocks = set(getattr(student, "_no_split_modules", None) or [])
        wrap = (
            {type(m) for m in student.modules() if type(m).__name__ in blocks}
            if student is not None
            else set()
        )
        strategy = FSDPStrategy(auto_wrap_policy=wrap or None, state_dict_type="full")
        if fp16:
            trainer["precision"] = None  # given by the plugin
            plugin = FSDPPrecision("16-mixed")
            # FSDPPrecision(scaler=...) rejects any scaler (Lightning 2.6 checks self.precision before
            # setting it) and would drop it anyway: replace the default ShardedGradScaler it made.
            plugin.scaler = ShardedGradScaler(init_scale=init_scale)
            return strategy, [plugin]
        return strategy, []
    if fp16:
        from lightning.pytorch.plugins.precision import MixedPrecision

        device = "cpu" if trainer.get("accelerator") == "cpu" else "cuda"
        trainer["precision"] = None  # given by the plugin
        return strategy, [
            MixedPrecision("16-mixed", device, torch.amp.GradScaler(device, init_scale=init_scale))
        ]
    return strategy, []


def build_trainer(
    stage: DictConfig,
    trainer_cfg: DictConfig,
    folder: Path,
    n_train: int,
    loggers: list[Logger] | None = None,
    callbacks: list[pl.Callback] | None = None,
    module: pl.LightningModule | None = None,
) -> pl.Trainer:
    """The Trainer of `stage` (its schedule, checkpointing and validation), with the `trainer` group's settings;
    `module` (the stage module) names the transformer blocks FSDP wraps."""
    one_line_per_event()
    st = stage
    world = world_size(trainer_cfg)
    steps = total_steps(st, n_train, world)
    trainer_kwargs = OmegaConf.to_container(trainer_cfg, resolve=True)
    init_scale = float(trainer_kwargs.pop("fp16_init_scale", 128.0))
    strategy, plugins = _strategy_and_plugins(trainer_kwargs, init_scale, getattr(module, "student", None))
    checkpointing = StepCheckpoint(folder / CHECKPOINTS / LAST_CHECKPOINT, st.checkpoint_every_n_steps)
    trainer = instantiate(
        trainer_kwargs,
        strategy=strategy,
        plugins=plugins or None,
        max_steps=steps,
        max_epochs=math.ceil(steps / steps_per_epoch(st, n_train, world)),
        gradient_clip_val=st.gradient_clip_val,
        accumulate_grad_batches=st.accumulate_grad_batches,
        val_check_interval=st.val_every_n_steps if st.val_every_n_steps > 0 else 1.0,
        check_val_every_n_epoch=None if st.val_every_n_steps > 0 else 1,
        num_sanity_val_steps=0,
        logger=loggers or False,
        callbacks=[checkpointing, FreeMemory(), *(callbacks or [])],
        enable_checkpointing=False,  # StepCheckpoint writes the only checkpoint
        default_root_dir=str(folder),
        enable_model_summary=False,
    )
    if trainer.world_size != world:
        raise RuntimeError(
            f"expected {world} processes from cfg.trainer, Lightning counts {trainer.world_size}"
        )
    return trainer


def peak_memory_mb() -> float:
    """Peak GPU memory allocated by torch, or on CPU the process's peak resident set size."""
    if torch.cuda.is_available() and torch.cuda.max_memory_allocated() > 0:
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def full_student_state(trainer: pl.Trainer, module: pl.LightningModule) -> dict[str, torch.Tensor] | None:
    """The trained model's full state dict where the strategy shards its weights (FSDP, DeepSpeed ZeRO-3),
    complete on global rank zero; None where the module holds the full weights (single device, DDP,
    ZeRO-1/2). A collective call under sharding: every rank must make it."""
    # the strategy modules import optional packages (deepspeed) on first use
    from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy

    strategy = trainer.strategy
    if isinstance(strategy, FSDPStrategy):
        prefix = "student."
        return {
            k[len(prefix) :]: v
            for k, v in strategy.lightning_module_state_dict().items()
            if k.startswith(prefix)
        }
    if isinstance(strategy, DeepSpeedStrategy) and strategy.zero_stage_3:
        import deepspeed

        student = module.student
        with deepspeed.zero.GatheredParameters(list(student.parameters()), modifier_rank=None):
            if not trainer.is_global_zero:
                return {}
            return {k: v.detach().cpu().clone() for k, v in student.state_dict().items()}
    return None


def checkpoint_log_step(path: Path) -> int:
    """The first logging step of a run resumed from this checkpoint (Lightning adds one to the count of
    batches that stepped it records; see adaspec.callbacks.step_checkpoint)."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    return int(state["loops"]["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"]) + 1
