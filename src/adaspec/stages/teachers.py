"""The frozen models and teacher signals of the distillation stages: the target (live, or read from
the teacher cache of `make cache`) and the reference's per-token KL cache."""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from adaspec import paths
from adaspec.artefact_rules import cache_identity
from adaspec.artefacts import read_meta
from adaspec.data.datamodule import TaskDataModule
from adaspec.distill.ref_kl_cache import load_ref_kl, write_ref_kl
from adaspec.distill.teacher import CachedTeacher
from adaspec.distill.teacher_cache import TeacherCache
from adaspec.models.build import freeze, load_model


def frozen_artefact(folder, attn: str) -> PreTrainedModel:
    """A finished stage's model (`folder` is its stage folder), in eval mode and without gradients."""
    return freeze(load_model(paths.final(folder), attn))


def cached_teacher(cfg: DictConfig, data: TaskDataModule) -> CachedTeacher | None:
    """The teacher cache for this target and data with distill.teacher=cache (None: run the target live);
    refuses a cache made for anything else."""
    if cfg.distill.teacher != "cache":
        return None
    cache = TeacherCache(paths.teacher_cache_dir(cfg))
    cache.check_identity(cache_identity(cfg, data.train_set + data.val_set))
    return CachedTeacher(cache, cfg.distill.divergence, cfg.distill.chunk_size, cfg.distill.jsd_beta)


def cached_ref_kl(
    cfg: DictConfig, teacher: CachedTeacher, data: TaskDataModule, tokenizer: PreTrainedTokenizerBase
) -> np.ndarray:
    """The reference's per-token KL to the cached teacher, computed on first use."""
    folder = paths.ref_dir(cfg) / "teacher_kl" / teacher.cache.spec.name
    identity = {
        "reference": read_meta(paths.final(paths.ref_dir(cfg)))["weights"],
        **teacher.cache.meta["identity"],
    }
    if cfg.distill.divergence != "forward_kl":  # dL needs the reference's divergence of the same kind
        identity["divergence"] = f"{cfg.distill.divergence}(beta={cfg.distill.jsd_beta})"
    values = load_ref_kl(folder, identity)
    if values is None:
        values = write_ref_kl(
            frozen_artefact(paths.ref_dir(cfg), cfg.model.attn_implementation),
            teacher,
            data.train_set + data.val_set,
            folder,
            identity,
            batch_size=cfg.stage.batch_size,
            pad_id=tokenizer.pad_token_id,
        )
    return values
