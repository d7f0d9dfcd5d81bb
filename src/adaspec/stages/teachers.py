"""The frozen models and teacher signals of the distillation stages: the target (live, or read from
the teacher cache of `make cache`) and the reference's per-token KL cache. A draft with a reduced
vocabulary sees the teacher through `SupportTeacher`."""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from adaspec.artefacts import paths
from adaspec.artefacts.rules import cache_identity
from adaspec.artefacts.store import read_meta
from adaspec.data.datamodule import TaskDataModule
from adaspec.distill.divergence import support_token_divergence, topk_divergence
from adaspec.distill.feature_cache import (
    FeatureCache,
    feature_cache_bytes,
    feature_identity,
    write_feature_cache,
)
from adaspec.distill.ref_kl_cache import MIXED_AUTOCAST, load_ref_kl, write_ref_kl
from adaspec.distill.teacher import CachedSignal, CachedTeacher, LiveTeacher
from adaspec.distill.teacher_cache import TeacherCache
from adaspec.drafts import FeatureSource, TrainedDraft, load_draft
from adaspec.models.build import freeze, load_model
from adaspec.stages.stage_run import StageRun


def frozen_artefact(folder, attn: str) -> PreTrainedModel:
    """A finished stage's model (`folder` is its stage folder), in eval mode and without gradients."""
    return freeze(load_model(paths.final(folder), attn))


def frozen_draft(folder, attn: str, source: FeatureSource | None = None) -> TrainedDraft:
    """A finished draft stage's draft (the reference), with its id map, frozen; a head reads the target's hidden
    states from `source`, its student's (so the two run the target once per batch)."""
    draft = load_draft(paths.final(folder), attn)
    freeze(draft.model)
    if source is not None:
        draft.attach_training(source)
    return draft


class SupportTeacher:
    """A teacher (live or cached) for a draft with a reduced vocabulary: the same signal, per-token
    divergences over the draft's support (`adaspec.distill.divergence`: the teacher's mass outside it is
    credited, so a draft equal to the teacher conditioned on its support has divergence 0)."""

    def __init__(self, teacher: LiveTeacher | CachedTeacher, draft: TrainedDraft):
        self.inner, self.vocab = teacher, draft.vocab
        self.kind, self.chunk_size = teacher.kind, teacher.chunk_size

    @property
    def cache(self) -> TeacherCache:
        return self.inner.cache

    def signal(self, batch: dict[str, torch.Tensor], mask: torch.Tensor):
        return self.inner.signal(batch, mask)

    def divergence(self, signal: torch.Tensor | CachedSignal, student_logits: torch.Tensor) -> torch.Tensor:
        """[N] divergence of the draft's answer logits [N, vocab.size] from the teacher's signal."""
        d2t = self.vocab.draft_to_target
        # distill.jsd_beta where the teacher has one (read only by divergence=jsd)
        beta = {"jsd_beta": self.inner.jsd_beta} if hasattr(self.inner, "jsd_beta") else {}
        if isinstance(signal, CachedSignal):
            if self.cache.spec.mode == "exact":  # log-probabilities are valid logits
                return support_token_divergence(
                    signal.payload, student_logits, d2t, self.kind, self.chunk_size, **beta
                )
            return topk_divergence(
                *signal.payload, student_logits, self.kind, target_to_draft=self.vocab.target_to_draft,
                chunk_size=self.chunk_size, **beta,
            )
        return support_token_divergence(signal, student_logits, d2t, self.kind, self.chunk_size, **beta)


def for_draft(teacher: LiveTeacher | CachedTeacher, draft: TrainedDraft):
    """The teacher as `draft` sees it: itself for a full-vocabulary draft, over its support for a reduced one."""
    return teacher if draft.vocab is None else SupportTeacher(teacher, draft)


def feature_cache(run: StageRun, data: TaskDataModule, target: PreTrainedModel, layers: list[int],
                  pad_id: int) -> FeatureCache:
    """The target's features at `layers` on this data (distill.teacher=cache with an EAGLE-3 head), built on
    first use; refuses one made for anything else."""
    folder = run.layout.feature_cache_dir(layers)
    encoded = data.train_set + data.val_set
    identity = feature_identity(cache_identity(run.layout, run.task, encoded), layers)
    if folder.is_dir() and not run.overwrite:
        cache = FeatureCache(folder)
        cache.check_identity(identity)
        return cache
    width = len(layers) * target.config.hidden_size
    print(f"[adaspec] feature cache: layers {layers} of {len(encoded)} examples, "
          f"{feature_cache_bytes(encoded, width) / 2**20:.1f} MiB -> {folder}")
    return write_feature_cache(target, encoded, layers, folder, identity, batch_size=run.stage.batch_size,
                               pad_id=pad_id)


def cached_teacher(run: StageRun, data: TaskDataModule) -> CachedTeacher | None:
    """The teacher cache for this target and data with distill.teacher=cache (None: run the target live);
    refuses a cache made for anything else."""
    distill = run.distill
    if distill.teacher != "cache":
        return None
    cache = TeacherCache(run.layout.teacher_cache_dir())
    cache.check_identity(cache_identity(run.layout, run.task, data.train_set + data.val_set))
    return CachedTeacher(cache, distill.divergence, distill.chunk_size, distill.jsd_beta)


def cached_ref_kl(
    run: StageRun, teacher: CachedTeacher, data: TaskDataModule, tokenizer: PreTrainedTokenizerBase,
    source: FeatureSource | None = None,
) -> np.ndarray:
    """The reference's per-token KL to the cached teacher, computed on first use; an EAGLE-3 reference reads the
    target's features from `source` (its student's: their cache)."""
    folder = run.layout.ref_dir() / "teacher_kl" / teacher.cache.spec.name
    identity = {
        "reference": read_meta(paths.final(run.layout.ref_dir()))["weights"],
        **teacher.cache.meta["identity"],
    }
    distill = run.distill
    if distill.divergence != "forward_kl":  # dL needs the reference's divergence of the same kind
        identity["divergence"] = f"{distill.divergence}(beta={distill.jsd_beta})"
    passes = int(distill.ttt_passes)  # above 1 for EAGLE-3 heads only (adaspec.config.rules)
    if passes > 1:  # a head's divergence sums its passes
        identity["ttt_passes"] = str(passes)
    autocast = MIXED_AUTOCAST.get(run.precision)
    if autocast is not None:  # as the live reference runs under mixed precision (a float32 cache keeps its identity)
        identity["precision"] = run.precision
    values = load_ref_kl(folder, identity)
    if values is None:
        reference = frozen_draft(run.layout.ref_dir(), run.model.attn_implementation, source)
        values = write_ref_kl(
            reference,
            for_draft(teacher, reference),
            data.train_set + data.val_set,
            folder,
            identity,
            batch_size=run.stage.batch_size,
            pad_id=tokenizer.pad_token_id,
            passes=passes,
            autocast=autocast,
        )
    return values
