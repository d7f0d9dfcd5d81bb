"""Run one training stage end to end: check inputs, build data and models, fit, save the artefact.

Everything a user can get wrong (config values, a missing upstream artefact, an interrupted run)
is checked before any data or model is loaded.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import wandb
from omegaconf import DictConfig
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from adaspec import paths
from adaspec.artefacts import fingerprint, read_meta, save_artefact
from adaspec.callbacks.acceptance import AcceptanceMonitor, prompt_ids
from adaspec.callbacks.selection_stats import SelectionStats
from adaspec.callbacks.threshold import ThresholdRefresh
from adaspec.config import PRETRAIN_STAGES, validate
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.tasks import Example, load_task
from adaspec.data.tokenizer import frequent_dotted_names, padded_vocab_size, train_bpe_tokenizer
from adaspec.distill.budget import apply_token_budget
from adaspec.distill.ref_kl_cache import load_ref_kl, write_ref_kl
from adaspec.distill.teacher import CachedTeacher
from adaspec.distill.teacher_cache import TeacherCache
from adaspec.distill.token_classes import domain_tables
from adaspec.distributed import is_global_zero, say, wait_for
from adaspec.errors import UserError
from adaspec.models.attention import resolve_attn_implementation
from adaspec.models.build import (
    enable_gradient_checkpointing,
    freeze,
    load_model,
    n_params,
    pretrained_tokenizer,
    resize_embeddings,
    scratch_model,
)
from adaspec.models.operator_embedding import add_operator_embedding
from adaspec.models.vocab import check_stage_vocabularies, vocabulary_mismatch
from adaspec.pretrain import corpus_blocks, corpus_splits, pretrain_stage_config, uses_pretrain
from adaspec.stages.base import StageModule
from adaspec.stages.draft import SelectiveDistill
from adaspec.stages.ref import ReferenceDistill
from adaspec.stages.target import TargetFinetune
from adaspec.trainer import (
    CHECKPOINTS,
    LAST_CHECKPOINT,
    build_trainer,
    full_student_state,
    is_half,
    total_steps,
    world_size,
)

MAKE_HINT = {
    "pretrain_target": "python -m adaspec.train pretrain=stdlib stage=pretrain_target",
    "pretrain_draft": "python -m adaspec.train pretrain=stdlib stage=pretrain_draft",
    "target": "make stage1 (python -m adaspec.train stage=target)",
    "ref": "make stage2 (python -m adaspec.train stage=ref)",
    "draft": "make stage3 (python -m adaspec.train stage=draft)",
}


def require_artefact(folder: Path, stage: str, needed_by: str, cfg: DictConfig, extra_args: str = "") -> dict:
    final = paths.final(folder)
    if not (final / "meta.json").is_file():
        raise UserError(
            f"stage {needed_by} needs the {stage} artefact {final}, which does not exist; make it first with "
            f"`{MAKE_HINT[stage]} task={cfg.task.name} model={cfg.model.name}{extra_args}` and the same seeds"
        )
    return read_meta(final)


def check_upstream(cfg: DictConfig) -> dict[str, str]:
    """The upstream artefacts this stage trains from, as {name: weights hash}; raises if any is missing."""
    stage = cfg.stage.name
    if stage == "pretrain_target":
        return {}
    if stage == "pretrain_draft" or (stage == "target" and uses_pretrain(cfg)):
        meta = require_artefact(
            paths.pretrain_target_dir(cfg), "pretrain_target", stage, cfg, " pretrain=stdlib"
        )
        return {"pretrain_target": meta["weights"]}
    if stage == "target":
        return {}
    upstream = {"target": require_artefact(paths.target_dir(cfg), "target", stage, cfg)["weights"]}
    if stage == "draft":
        ref_meta = require_artefact(paths.ref_dir(cfg), "ref", stage, cfg)
        init_meta = read_meta(paths.final(paths.draft_init_dir(cfg)))
        if ref_meta["upstream"].get("target") != upstream["target"]:
            raise UserError(
                f"the reference {paths.final(paths.ref_dir(cfg))} was distilled from another target than "
                f"{paths.final(paths.target_dir(cfg))}; retrain it with `make stage2` and overwrite=true"
            )
        if ref_meta["upstream"].get("draft_init") != init_meta["weights"]:
            raise UserError(
                f"the reference {paths.final(paths.ref_dir(cfg))} did not start from the draft initialisation "
                f"{paths.final(paths.draft_init_dir(cfg))}; retrain it with `make stage2` and overwrite=true"
            )
        upstream["ref"] = ref_meta["weights"]
        upstream["draft_init"] = init_meta["weights"]
    return upstream


def check_not_done(cfg: DictConfig, folder: Path) -> bool:
    """True when a finished artefact of the same config exists (nothing to do); raises on conflicts."""
    final = paths.final(folder)
    last = folder / CHECKPOINTS / LAST_CHECKPOINT
    if (final / "meta.json").is_file() and not cfg.resume:
        same = read_meta(final)["fingerprint"] == fingerprint(cfg, cfg.stage.name)
        if same and not cfg.overwrite:
            return True
        if not same and not cfg.overwrite:
            raise UserError(
                f"{final} exists and was trained with a different config; pass overwrite=true to replace it, "
                f"or set stage.tag=<name> to keep both"
            )
    elif last.is_file() and not cfg.resume and not cfg.overwrite:
        raise UserError(
            f"an interrupted run left {last}; pass resume=true to continue it or overwrite=true to start over"
        )
    return False


def training_texts(examples: list[Example]) -> list[str]:
    return [e.prompt + e.target for e in examples]


def tokenizer_home(cfg: DictConfig) -> Path | None:
    """The artefact whose tokenizer this stage uses; None for the stage that makes it (stage 1, or stage 0
    with pretrain=stdlib)."""
    stage, pretrain = cfg.stage.name, uses_pretrain(cfg)
    if stage == "pretrain_target" or (stage == "target" and not pretrain):
        return None
    if stage == "pretrain_draft" or stage == "target":
        return paths.final(paths.pretrain_target_dir(cfg))
    return paths.final(paths.target_dir(cfg))


def load_tokenizer(
    cfg: DictConfig, splits: dict[str, list[Example]], corpus: list[str] = ()
) -> PreTrainedTokenizerBase:
    """Stage 1 (stage 0 with pretrain=stdlib) trains the tokenizer, on the task's training text and stage
    0's `corpus`, or loads a pretrained model's; later stages read it from that artefact."""
    home = tokenizer_home(cfg)
    if home is not None:
        return AutoTokenizer.from_pretrained(str(home))
    if cfg.model.source == "pretrained":
        return pretrained_tokenizer(cfg.model.target_path)[0]  # with a pad token added if it had none
    texts = training_texts(splits["train"]) + list(corpus)
    api_names = frequent_dotted_names([e.target for e in splits["train"]], cfg.task.domain.api_vocab_size)
    return train_bpe_tokenizer(texts, cfg.task.vocab_size, added_tokens=api_names)


def ensure_draft_init(cfg: DictConfig, tokenizer: PreTrainedTokenizerBase) -> Path:
    """The weights both the reference and every stage-3 draft start from, saved once per seed (by global
    rank zero; other ranks wait for it). From scratch, or the pretrained draft (model.draft_path) with
    its embeddings resized to the target's tokenizer, saved with that tokenizer."""
    folder = paths.final(paths.draft_init_dir(cfg))
    if (folder / "meta.json").is_file():
        return folder
    upstream: dict[str, str] = {}
    if not is_global_zero():
        wait_for(folder / "meta.json", "the draft initialisation")
        return folder
    if cfg.model.source == "pretrained":
        own, n_added = pretrained_tokenizer(cfg.model.draft_path)
        why = vocabulary_mismatch(tokenizer, own)
        if why is not None:
            raise UserError(
                f"the draft model.draft_path={cfg.model.draft_path} does not share the target's tokenizer "
                f"{paths.final(paths.target_dir(cfg))} ({why}); use a draft of the target's family"
            )
        model = resize_embeddings(
            load_model(cfg.model.draft_path, cfg.model.attn_implementation), tokenizer, n_added
        )
    elif uses_pretrain(cfg):  # stage 0's draft for this seed
        meta = require_artefact(
            paths.pretrain_draft_dir(cfg), "pretrain_draft", cfg.stage.name, cfg, " pretrain=stdlib"
        )
        model = load_model(paths.final(paths.pretrain_draft_dir(cfg)), cfg.model.attn_implementation)
        upstream = {"pretrain_draft": meta["weights"]}
    else:
        model = scratch_model(
            cfg.model.draft,
            vocab_size=padded_vocab_size(tokenizer),
            max_positions=cfg.model.max_position_embeddings,
            seed=cfg.seed,
            tokenizer=tokenizer,
        )
    save_artefact(
        folder, model=model, tokenizer=tokenizer, cfg=cfg, stage="draft_init", metrics={}, upstream=upstream
    )
    return folder


def build_module(
    cfg: DictConfig, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule | None = None
) -> StageModule:
    stage = cfg.stage.name
    attn = resolve_attn_implementation(cfg.model.attn_implementation, is_half(cfg.trainer.precision))
    if stage in PRETRAIN_STAGES:  # stage 0: plain causal-LM training from random weights
        arch, seed = (
            (cfg.model.target, cfg.target_seed) if stage == "pretrain_target" else (cfg.model.draft, cfg.seed)
        )
        student = scratch_model(
            arch,
            vocab_size=padded_vocab_size(tokenizer),
            max_positions=cfg.model.max_position_embeddings,
            seed=seed,
            tokenizer=tokenizer,
            attn_implementation=attn,
        )
        return TargetFinetune(student, cfg.stage)
    if stage == "target":
        if uses_pretrain(cfg):
            student = load_model(paths.final(paths.pretrain_target_dir(cfg)), attn)
        elif cfg.model.source == "pretrained":  # embeddings resized for the tokens load_tokenizer added
            student = resize_embeddings(
                load_model(cfg.model.target_path, attn),
                tokenizer,
                pretrained_tokenizer(cfg.model.target_path)[1],
            )
        else:
            student = scratch_model(
                cfg.model.target,
                vocab_size=padded_vocab_size(tokenizer),
                max_positions=cfg.model.max_position_embeddings,
                seed=cfg.target_seed,
                tokenizer=tokenizer,
                attn_implementation=attn,
            )
        return TargetFinetune(student, cfg.stage)
    teacher = cached_teacher(cfg, data) if cfg.distill.teacher == "cache" else None
    # with a cached teacher the target is loaded only for the acceptance monitor, which decodes with it
    needs_target = teacher is None or cfg.stage.monitor_every_n_steps > 0
    target = freeze(load_model(paths.final(paths.target_dir(cfg)), attn)) if needs_target else None
    student = load_model(ensure_draft_init(cfg, tokenizer), attn)
    domain = domain_tables(cfg.task.domain, tokenizer, stage)  # task.domain: loss weights, kept tokens
    if stage == "ref":
        return ReferenceDistill(
            student, cfg.stage, cfg.distill, target, teacher=teacher, token_weights=domain.token_weights
        )
    if domain.operator_types is not None:
        add_operator_embedding(student, domain.operator_types)
    ref_kl = cached_ref_kl(cfg, teacher, data, tokenizer) if cfg.distill.cache_ref_kl else None
    reference = None if ref_kl is not None else freeze(load_model(paths.final(paths.ref_dir(cfg)), attn))
    return SelectiveDistill(
        student,
        cfg.stage,
        cfg.distill,
        target,
        reference,
        cfg.k,
        teacher=teacher,
        ref_kl=ref_kl,
        token_weights=domain.token_weights,
        always_keep=domain.always_keep,
    )


def cached_teacher(cfg: DictConfig, data: TaskDataModule) -> CachedTeacher:
    """The teacher cache for this target and data; refuses one made for anything else."""
    from adaspec.cache import cache_identity

    cache = TeacherCache(paths.teacher_cache_dir(cfg))
    cache.check_identity(cache_identity(cfg, data.train_set + data.val_set))
    return CachedTeacher(cache, cfg.distill.divergence, cfg.distill.chunk_size)


def cached_ref_kl(cfg: DictConfig, teacher: CachedTeacher, data: TaskDataModule, tokenizer) -> np.ndarray:
    """The reference's per-token KL to the cached teacher, computed on first use."""
    folder = paths.ref_dir(cfg) / "teacher_kl" / teacher.cache.spec.name
    identity = {
        "reference": read_meta(paths.final(paths.ref_dir(cfg)))["weights"],
        **teacher.cache.meta["identity"],
    }
    values = load_ref_kl(folder, identity)
    if values is None:
        reference = freeze(load_model(paths.final(paths.ref_dir(cfg)), cfg.model.attn_implementation))
        values = write_ref_kl(
            reference,
            teacher,
            data.train_set + data.val_set,
            folder,
            identity,
            batch_size=cfg.stage.batch_size,
            pad_id=tokenizer.pad_token_id,
        )
    return values


def stage_callbacks(cfg: DictConfig, module: StageModule, data: TaskDataModule) -> list[pl.Callback]:
    callbacks: list[pl.Callback] = []
    if cfg.stage.name == "draft" and cfg.distill.selection == "global" and cfg.k < 1:
        callbacks.append(
            ThresholdRefresh(
                data.calibration_dataloader(),
                cfg.distill.calibration_batches,
                cfg.distill.refresh_every_n_steps,
            )
        )
    # most often selected / filtered tokens -> <draft stage folder>/selected_tokens.*
    if cfg.stage.name == "draft":
        callbacks.append(SelectionStats(data.tokenizer, paths.stage_dir(cfg)))
    prompts = prompt_ids(data.val_set, cfg.stage.monitor_prompts)
    if cfg.stage.name in ("ref", "draft") and cfg.stage.monitor_every_n_steps > 0 and prompts:
        eos = module.student.config.eos_token_id
        callbacks.append(
            AcceptanceMonitor(
                prompts,
                every_n_steps=cfg.stage.monitor_every_n_steps,
                gamma=cfg.decode.gamma,
                eos_token_id=eos[0] if isinstance(eos, list) else eos,
            )
        )
    return callbacks


def peak_memory_mb() -> float:
    """Peak GPU memory allocated by torch, or on CPU the process's peak resident set size."""
    if torch.cuda.is_available() and torch.cuda.max_memory_allocated() > 0:
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_stage(cfg: DictConfig) -> Path:
    """Train the stage named by `cfg.stage.name` and return its `final/` artefact folder."""
    validate(cfg)
    cfg = pretrain_stage_config(cfg)
    splits = None
    if cfg.stage.name == "draft" and cfg.distill.match_token_budget:  # the budget depends on the data's size
        splits = load_task(cfg.task)
        cfg = apply_token_budget(cfg, len(splits["train"]), world_size(cfg.trainer))
    stage = cfg.stage.name
    folder = paths.stage_dir(cfg)
    if check_not_done(cfg, folder):
        say(f"[adaspec] {stage}: {paths.final(folder)} is up to date, skipping (overwrite=true retrains it)")
        return paths.final(folder)
    upstream = check_upstream(cfg)
    check_stage_vocabularies(cfg)  # a draft/target pair, or artefacts, with different tokenizers: refuse
    seed = cfg.target_seed if stage in ("target", "pretrain_target") else cfg.seed
    pl.seed_everything(seed, workers=True, verbose=False)

    splits = splits or load_task(cfg.task)
    blocks = corpus_blocks(cfg) if stage in PRETRAIN_STAGES else []  # read once: tokenizer and training data
    tokenizer = load_tokenizer(cfg, splits, blocks)
    if stage == "ref":
        upstream["draft_init"] = read_meta(ensure_draft_init(cfg, tokenizer))["weights"]
    corpus: dict[str, Any] = {}
    if stage in PRETRAIN_STAGES:  # stage 0 trains on the code corpus, not on the task
        splits, corpus = corpus_splits(blocks, cfg.pretrain.n_val)
    data = TaskDataModule(
        tokenizer,
        splits,
        batch_size=cfg.stage.batch_size,
        max_length=cfg.task.max_length,
        n_val=cfg.pretrain.n_val if stage in PRETRAIN_STAGES else cfg.task.n_val,
        seed=seed,
    )
    module = build_module(cfg, tokenizer, data)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(module.student)
    steps = total_steps(cfg.stage, len(data.train_set), world_size(cfg.trainer))
    run_name = f"{cfg.task.name}/{cfg.model.name}/{folder.parent.name}/{folder.name}"
    trainer = build_trainer(
        cfg, folder, len(data.train_set), run_name, stage_callbacks(cfg, module, data), module
    )
    last = folder / CHECKPOINTS / LAST_CHECKPOINT  # a folder under DeepSpeed
    ckpt_path = str(last) if cfg.resume and last.exists() else None
    say(
        f"[adaspec] {stage}: training {n_params(module.student) / 1e6:.2f}M parameters for {steps} steps "
        f"on {len(data.train_set)} examples -> {paths.final(folder)}"
        + (f" (resuming {last})" if ckpt_path else "")
    )
    started = time.perf_counter()
    try:
        trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    except FloatingPointError as err:
        raise UserError(
            f"{err}; last good checkpoint: {last if last.exists() else 'none'} (lower stage.lr)"
        ) from err
    train_seconds = time.perf_counter() - started
    if trainer.interrupted or trainer.global_step < steps:
        raise UserError(
            f"{stage} stopped at step {trainer.global_step} of {steps}; nothing was saved to {paths.final(folder)}. "
            f"Continue with resume=true (last checkpoint: {last})"
        )
    final_train = {
        name: float(v) for name, v in trainer.callback_metrics.items() if name.startswith("train/")
    }
    validation = trainer.validate(module, datamodule=data, verbose=False)[0]
    metrics = {
        **final_train,
        **{name: float(v) for name, v in validation.items()},
        "steps": trainer.global_step,
        "train_seconds": round(train_seconds, 2),
        "peak_memory_mb": round(peak_memory_mb(), 1),
        "parameters": n_params(module.student),
        **{f"corpus/{name}": value for name, value in corpus.items()},
    }
    state = full_student_state(trainer, module)  # FSDP / ZeRO-3: gathered on rank 0 (every rank takes part)
    if trainer.is_global_zero:  # one writer: the other ranks of a data-parallel run return without saving
        save_artefact(
            paths.final(folder),
            model=module.student,
            tokenizer=tokenizer,
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
