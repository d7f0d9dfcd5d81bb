"""Run one training stage: check its inputs, build data and module, fit, save the artefact.

Everything a user can get wrong (a missing upstream artefact, an interrupted run, another config in
the same folder) is checked before any data or model is loaded. What each stage trains is in
`adaspec.stages`; the rules about artefacts are in `adaspec.artefacts.rules`.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import wandb
from omegaconf import DictConfig

from adaspec.artefacts import paths
from adaspec.artefacts.rules import check_not_done, check_upstream, record_run_start
from adaspec.artefacts.store import read_meta, remove_stale_temporaries, save_artefact
from adaspec.callbacks.best_validation import KeepBestValidation
from adaspec.callbacks.steps_this_run import StepsThisRun
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.stdlib_corpus import corpus_blocks, corpus_splits
from adaspec.data.target_answers import training_splits
from adaspec.data.tasks import first_training_examples, load_task
from adaspec.distill.budget import apply_token_budget
from adaspec.errors import UserError
from adaspec.models.build import enable_gradient_checkpointing, n_trainable
from adaspec.models.vocab import check_stage_vocabularies
from adaspec.stages import stage_module
from adaspec.stages.draft_init import ensure_draft_init
from adaspec.stages.tokenizer_source import load_tokenizer
from adaspec.training.distributed import is_global_zero, say
from adaspec.training.stage_specs import Data, pretrain_stage_config, stage_dir, stage_of, stage_seed
from adaspec.training.trainer import (
    build_trainer,
    checkpoint_log_step,
    full_student_state,
    peak_memory_mb,
    total_steps,
    world_size,
)


def resolve_stage_config(cfg: DictConfig) -> tuple[DictConfig, dict | None]:
    """The config the stage really trains with (stage 0's own settings, the matched token budget), and
    the task's splits when resolving needed them."""
    cfg = pretrain_stage_config(cfg)
    if cfg.stage.name == "draft" and cfg.distill.match_token_budget:  # the budget depends on the data's size
        splits = load_task(cfg.task)  # as loaded: build_data makes the training splits from them
        n_train = len(training_splits(cfg, splits)["train"])
        return apply_token_budget(cfg, n_train, world_size(cfg.trainer)), splits
    return cfg, None


def build_data(cfg: DictConfig, splits: dict | None) -> tuple[TaskDataModule, dict, dict]:
    """(data module, upstream hashes that only exist once the tokenizer does, corpus identity)."""
    stage = stage_of(cfg)
    on_corpus = stage.data == Data.corpus  # stage 0 trains on the code corpus, not on the task
    splits = splits or load_task(cfg.task)
    if cfg.stage.name == "target" and cfg.task.get("target_n_train") is not None:
        splits = {**splits, "train": first_training_examples(cfg.task, cfg.task.target_n_train, "task.target_n_train")}
    blocks = corpus_blocks(cfg) if on_corpus else []  # read once: tokenizer and training data
    tokenizer = load_tokenizer(cfg, splits, blocks)
    upstream = {}
    if stage.makes_draft_init:
        upstream["draft_init"] = read_meta(ensure_draft_init(cfg, tokenizer))["weights"]
    corpus = {}
    if on_corpus:
        splits, corpus = corpus_splits(blocks, cfg.pretrain.n_val)
    elif stage.data == Data.training:  # after the tokenizer and draft vocabulary, which the dataset's text made
        splits = training_splits(cfg, splits)
    data = TaskDataModule(
        tokenizer,
        splits,
        batch_size=cfg.stage.batch_size,
        max_length=cfg.task.max_length,
        n_val=cfg.pretrain.n_val if on_corpus else cfg.task.n_val,
        seed=stage_seed(cfg),
        prompt_format="plain" if on_corpus else cfg.task.prompt_format,
        group_by_length=cfg.stage.group_by_length,
    )
    return data, upstream, corpus


def start_fresh(cfg: DictConfig, folder: Path) -> None:
    """Forget an earlier run's checkpoints and logs (overwrite=true) and record which config writes the new
    ones."""
    for leftover in (paths.last_checkpoint(folder).parent, folder / "logs"):
        shutil.rmtree(leftover, ignore_errors=True)
    record_run_start(cfg, folder)


def run_stage(cfg: DictConfig) -> Path:
    """Train the stage named by `cfg.stage.name` and return its `final/` artefact folder. `cfg` has been
    validated by the entry point."""
    cfg, splits = resolve_stage_config(cfg)
    stage, folder = cfg.stage.name, stage_dir(cfg)
    if check_not_done(cfg, folder):
        say(f"[adaspec] {stage}: {paths.final(folder)} is up to date, skipping (overwrite=true retrains it)")
        return paths.final(folder)
    upstream = check_upstream(cfg)
    check_stage_vocabularies(cfg)  # a draft/target pair, or artefacts, with different tokenizers: refuse
    pl.seed_everything(stage_seed(cfg), workers=True, verbose=False)

    data, more_upstream, corpus = build_data(cfg, splits)
    upstream.update(more_upstream)
    module = stage_module(cfg).from_config(cfg, data.tokenizer, data)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(module.student)
    steps = total_steps(cfg.stage, len(data.train_set), world_size(cfg.trainer))
    run_name = f"{cfg.task.name}/{cfg.model.name}/{folder.parent.name}/{folder.name}"
    last = paths.last_checkpoint(folder)
    resuming = bool(cfg.resume and not cfg.overwrite and last.exists())
    if is_global_zero():
        remove_stale_temporaries(paths.final(folder))
        if not resuming:
            start_fresh(cfg, folder)
    steps_this_run = StepsThisRun(steps)
    trainer = build_trainer(
        cfg,
        folder,
        len(data.train_set),
        run_name,
        [steps_this_run, *module.callbacks(cfg, data)],
        module,
        resume_step=checkpoint_log_step(last) if resuming else None,
    )
    ckpt_path = str(last) if resuming else None
    say(
        f"[adaspec] {stage}: training {n_trainable(module.student) / 1e6:.2f}M parameters for {steps} steps "
        f"on {len(data.train_set)} examples -> {paths.final(folder)}"
        + (f" (resuming {last})" if ckpt_path else "")
    )
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            if ckpt_path and trainer.world_size == 1:
                # ours is: TaskDataModule.train_dataloader's ResumableShuffle (single-process runs only)
                # continues from the checkpoint's batch
                warnings.filterwarnings("ignore", message=".*your dataloader is not resumable")
            trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    except FloatingPointError as err:
        raise UserError(
            f"{err}; last good checkpoint: {last if last.exists() else 'none'} (lower stage.lr)"
        ) from err
    train_seconds = time.perf_counter() - started
    stopping = [cb for cb in trainer.callbacks if isinstance(cb, KeepBestValidation)]
    stopped_early = any(cb.stopped_early for cb in stopping)
    if trainer.interrupted or (trainer.global_step < steps and not stopped_early):
        raise UserError(
            f"{stage} stopped at step {trainer.global_step} of {steps}; nothing was saved to {paths.final(folder)}. "
            f"Continue with resume=true (last checkpoint: {last})"
        )
    if trainer.global_step > 0:  # a crash while saving the artefact then redoes no training (with no step
        trainer.save_checkpoint(last)  # taken there is none to redo: a 0-step target skips 0.5 GB here)
    final_train = {
        name: float(v) for name, v in trainer.callback_metrics.items() if name.startswith("train/")
    }
    validation = trainer.validate(module, datamodule=data, verbose=False)[0]
    metrics = {
        **final_train,
        **{name: float(v) for name, v in validation.items()},
        "steps": trainer.global_step,
        "resumed_from_step": steps_this_run.first_step,
        "steps_this_run": steps_this_run.steps,
        "train_seconds": round(train_seconds, 2),
        "peak_memory_mb": round(peak_memory_mb(), 1),
        "parameters": n_trainable(module.student),
        **{f"corpus/{name}": value for name, value in corpus.items()},
        **{name: value for cb in stopping for name, value in cb.summary().items()},
    }
    state = full_student_state(trainer, module)  # FSDP / ZeRO-3: gathered on rank 0 (every rank takes part)
    if trainer.is_global_zero:  # one writer: the other ranks of a data-parallel run return without saving
        save_artefact(
            paths.final(folder),
            model=module.artefact,
            tokenizer=data.tokenizer,
            cfg=cfg,
            stage=stage,
            metrics=metrics,
            upstream=upstream,
            state_dict=state,
        )
    if wandb.run is not None:
        wandb.run.summary.update(metrics)
        wandb.finish()
    say(f"[adaspec] {stage}: done in {train_seconds:.0f}s, {json.dumps(metrics)}")
    return paths.final(folder)
