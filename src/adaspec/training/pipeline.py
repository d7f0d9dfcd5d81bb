"""Run one training stage: check its inputs, build data and module, fit, save the artefact.

Everything a user can get wrong (a missing upstream artefact, an interrupted run, another config in
the same folder) is checked before any data or model is loaded. What each stage trains is in
`adaspec.stages`; the rules about artefacts are in `adaspec.artefacts.rules`.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import wandb
from omegaconf import DictConfig, OmegaConf

from adaspec.artefacts import paths
from adaspec.artefacts.rules import check_not_done, check_upstream, record_run_start
from adaspec.artefacts.store import (
    fingerprint,
    provenance,
    read_meta,
    remove_stale_temporaries,
    save_artefact,
)
from adaspec.callbacks.anonymous_memory import PeakAnonymousMemory
from adaspec.callbacks.best_validation import KeepBestValidation
from adaspec.callbacks.steps_this_run import StepsThisRun
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.stdlib_corpus import corpus_blocks, corpus_splits
from adaspec.data.target_answers import AnswerSpec, training_splits
from adaspec.data.tasks import first_training_examples, load_task
from adaspec.distill.budget import apply_token_budget
from adaspec.errors import UserError
from adaspec.models.build import enable_gradient_checkpointing, n_trainable
from adaspec.models.vocab import check_stage_vocabularies
from adaspec.stages import stage_module
from adaspec.stages.draft_init import ensure_draft_init
from adaspec.stages.stage_run import StageRun
from adaspec.stages.tokenizer_source import load_tokenizer
from adaspec.training.distributed import is_global_zero, say
from adaspec.training.stage_specs import STAGES, Data, stage_dir, stage_seed, with_pretrain_settings
from adaspec.training.trainer import (
    build_loggers,
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
    resolved = cfg
    stage = with_pretrain_settings(cfg.stage, cfg.get("pretrain"))
    if stage is not cfg.stage:
        resolved = copy.deepcopy(cfg)  # the caller's config stays as composed
        resolved.stage = stage
    if stage.name == "draft" and cfg.distill.match_token_budget:  # the budget depends on the data's size
        splits = load_task(cfg.task)  # as loaded: build_data makes the training splits from them
        n_train = len(training_splits(AnswerSpec.of(cfg), splits)["train"])
        return apply_token_budget(resolved, n_train, world_size(cfg.trainer)), splits
    return resolved, None


def build_data(run: StageRun, splits: dict | None) -> tuple[TaskDataModule, dict, dict]:
    """(data module, upstream hashes that only exist once the tokenizer does, corpus identity)."""
    stage = STAGES[run.stage.name]
    on_corpus = stage.data == Data.corpus  # stage 0 trains on the code corpus, not on the task
    splits = splits or load_task(run.task)
    if run.stage.name == "target" and run.task.get("target_n_train") is not None:
        splits = {**splits, "train": first_training_examples(run.task, run.task.target_n_train, "task.target_n_train")}
    blocks = corpus_blocks(run.pretrain, run.task) if on_corpus else []  # read once: tokenizer and training data
    tokenizer = load_tokenizer(run, splits, blocks)
    upstream = {}
    if stage.makes_draft_init:
        upstream["draft_init"] = read_meta(ensure_draft_init(run.init_spec, tokenizer, run.init_made_by))["weights"]
    corpus = {}
    if on_corpus:
        splits, corpus = corpus_splits(blocks, run.pretrain.n_val)
    elif stage.data == Data.training:  # after the tokenizer and draft vocabulary, which the dataset's text made
        splits = training_splits(run.answers, splits)
    data = TaskDataModule(
        tokenizer,
        splits,
        batch_size=run.stage.batch_size,
        max_length=run.task.max_length,
        n_val=run.pretrain.n_val if on_corpus else run.task.n_val,
        seed=stage_seed(run.layout),
        prompt_format="plain" if on_corpus else run.task.prompt_format,
        group_by_length=run.stage.group_by_length,
    )
    return data, upstream, corpus


def start_fresh(folder: Path, wanted: str) -> None:
    """Forget an earlier run's checkpoints and logs (overwrite=true) and record which config (fingerprinted
    `wanted`) writes the new ones."""
    for leftover in (paths.last_checkpoint(folder).parent, folder / "logs"):
        shutil.rmtree(leftover, ignore_errors=True)
    record_run_start(folder, wanted)


def run_stage(cfg: DictConfig) -> Path:
    """Train the stage named by `cfg.stage.name` and return its `final/` artefact folder. `cfg` has been
    validated by the entry point; `trained` is what the stage really trains with (`resolve_stage_config`)."""
    trained, splits = resolve_stage_config(cfg)
    run = StageRun.of(trained)  # what the stage's module reads
    layout = run.layout
    stage, folder, wanted = trained.stage.name, stage_dir(layout), fingerprint(trained, trained.stage.name)
    if check_not_done(folder, wanted, resume=trained.resume, overwrite=trained.overwrite):
        say(f"[adaspec] {stage}: {paths.final(folder)} is up to date, skipping (overwrite=true retrains it)")
        return paths.final(folder)
    upstream = check_upstream(layout, trained.get("pretrain"))
    # a draft/target pair, or artefacts, with different tokenizers: refuse
    check_stage_vocabularies(layout, trained.model, trained.paths.models, trained.get("pretrain"))
    pl.seed_everything(stage_seed(layout), workers=True, verbose=False)

    data, more_upstream, corpus = build_data(run, splits)
    upstream.update(more_upstream)
    module = stage_module(run).build(run, data.tokenizer, data)
    if trained.model.gradient_checkpointing:
        enable_gradient_checkpointing(module.student)
    steps = total_steps(trained.stage, len(data.train_set), world_size(trained.trainer))
    run_name = f"{trained.task.name}/{trained.model.name}/{folder.parent.name}/{folder.name}"
    last = paths.last_checkpoint(folder)
    resuming = bool(trained.resume and not trained.overwrite and last.exists())
    if is_global_zero():
        remove_stale_temporaries(paths.final(folder))
        if not resuming:
            start_fresh(folder, wanted)
    steps_this_run, anonymous = StepsThisRun(steps), PeakAnonymousMemory()
    loggers = build_loggers(trained.logger, f"{trained.task.name}/{trained.model.name}",
                            OmegaConf.to_container(trained, resolve=True), folder, run_name,
                            resume_step=checkpoint_log_step(last) if resuming else None)
    trainer = build_trainer(trained.stage, trained.trainer, folder, len(data.train_set), loggers,
                            [steps_this_run, anonymous, *module.callbacks(run, data)], module)
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
        "peak_memory_mb": round(peak_memory_mb(), 1),  # mapped caches' pages included
        **({"peak_anonymous_mb": round(anonymous.peak_mb, 1)} if anonymous.peak_mb is not None else {}),
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
            made_by=provenance(trained, stage),
            metrics=metrics,
            upstream=upstream,
            state_dict=state,
        )
    if wandb.run is not None:
        wandb.run.summary.update(metrics)
        wandb.finish()
    say(f"[adaspec] {stage}: done in {train_seconds:.0f}s, {json.dumps(metrics)}")
    return paths.final(folder)
