"""Build the teacher-signal cache of a config's target (`make cache`, the paper runner, bench): the trained
target run once over the task's training split, or a smaller top-K cut from a larger one."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from omegaconf import DictConfig
from transformers import AutoTokenizer

from adaspec.artefacts import paths
from adaspec.artefacts.rules import cache_identity, require_artefact
from adaspec.artefacts.store import write_atomically
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.target_answers import AnswerSpec, ensure_target_answers, training_splits
from adaspec.data.tasks import load_task
from adaspec.distill.feature_cache import FeatureSink, feature_cache_bytes, feature_identity
from adaspec.distill.teacher_cache import (
    CacheSpec,
    TeacherCache,
    answer_counts,
    cache_bytes,
    derive_topk,
    write_teacher_cache,
)
from adaspec.drafts import trained_kind
from adaspec.errors import UserError
from adaspec.models.build import freeze, load_model
from adaspec.toolkit import device_for


def build_cache(cfg: DictConfig) -> Path:
    """The teacher cache of `cfg`'s target, built or found up to date; `cfg` is validated where it was
    composed (the entry point, the paper runner)."""
    answers = AnswerSpec.of(cfg)  # the target's answers, where the cache covers them
    layout = answers.layout
    require_artefact(layout.target_dir(), "target", "cache", layout)
    target_final = paths.final(layout.target_dir())
    folder = layout.teacher_cache_dir()
    spec = CacheSpec(cfg.distill.cache_mode, cfg.distill.cache_topk)
    tokenizer = AutoTokenizer.from_pretrained(str(target_final))
    splits, target = load_task(cfg.task), None
    if paths.fixed_answers(cfg.distill) == "target":  # the cache covers the target's answers: generate them first
        target = freeze(load_model(target_final, cfg.model.attn_implementation)).to(device_for(cfg.trainer))
        ensure_target_answers(answers, splits["train"], target, tokenizer)
    data = TaskDataModule(
        tokenizer,
        training_splits(answers, splits),
        batch_size=cfg.stage.batch_size,
        max_length=cfg.task.max_length,
        n_val=cfg.task.n_val,
        seed=cfg.seed,
        prompt_format=cfg.task.prompt_format,
    )
    encoded = data.train_set + data.val_set  # the training split and the validation examples
    identity = cache_identity(layout, cfg.task, encoded)
    if folder.exists() and not cfg.overwrite:
        try:
            TeacherCache(folder).check_identity(identity)
        except UserError as err:
            raise UserError(f"{err} (pass overwrite=true to replace it)") from err
        print(f"[adaspec] cache: {folder} is up to date, skipping")
        return folder
    larger = larger_topk_cache(folder, spec, identity)
    if larger is not None:
        print(f"[adaspec] cache: {spec.name} cut from {larger.folder} (no target pass) -> {folder}")
        return derive_topk(larger, folder, spec.topk, identity)
    target = target or freeze(load_model(target_final, cfg.model.attn_implementation)).to(device_for(cfg.trainer))
    rows = int(answer_counts(encoded).sum())
    size = cache_bytes(rows, target.config.vocab_size, spec)
    print(
        f"[adaspec] cache: {spec.name} teacher signal for {rows} answer tokens, {size / 2**20:.1f} MiB -> {folder}"
    )
    write = partial(write_teacher_cache, target, encoded, folder, spec, identity, batch_size=cfg.stage.batch_size,
                    pad_id=tokenizer.pad_token_id)
    layers = head_feature_layers(cfg.distill, cfg.model, target)
    features = layout.feature_cache_dir(layers) if layers else None
    if features is None or features.exists():
        return write()
    print(f"[adaspec] feature cache: layers {layers} from the same forward, "
          f"{feature_cache_bytes(encoded, len(layers) * target.config.hidden_size) / 2**20:.1f} MiB -> {features}")

    def fill(tmp: Path) -> None:  # the feature cache is kept only when the teacher cache was written
        sink = FeatureSink(tmp, encoded, layers, target.config.hidden_size)
        write(features=sink)
        sink.finish(feature_identity(identity, layers))

    write_atomically(features, fill)
    return folder


def head_feature_layers(distill: DictConfig, model: DictConfig, target) -> list[int] | None:
    """The target layers the draft of `model` trains on (an EAGLE-3 head's: `TrainedDraft.feature_layers`), so the
    teacher cache's forward fills its feature cache too and stage 2 finds it built; None for other drafts."""
    if distill.teacher != "cache":
        return None
    return trained_kind(model.draft_kind).feature_layers(target.config) or None


def larger_topk_cache(folder: Path, spec, identity: dict[str, str]):
    """A finished top-K' cache (K' > K) beside `folder` for the same target and data, the smallest such."""
    if spec.mode != "topk" or not folder.parent.is_dir():
        return None
    prefix = folder.name[: -len(spec.name)]  # "" or "target-answers-"
    found = []
    for other in folder.parent.iterdir():
        suffix = other.name[len(prefix) + len("topk"):]
        if other.name.startswith(prefix + "topk") and suffix.isdigit() and int(suffix) > spec.topk:
            try:
                cache = TeacherCache(other)
                cache.check_identity(identity)
            except UserError:
                continue
            found.append(cache)
    return min(found, key=lambda c: c.spec.topk, default=None)
