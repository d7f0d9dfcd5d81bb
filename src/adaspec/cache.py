"""Build the teacher-signal cache: `python -m adaspec.cache [distill.cache_mode=exact|topk]` (`make cache`).

Runs the trained target once over the task's training split; stages 2 and 3 then read it with
`distill.teacher=cache` instead of running the target on every batch.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from adaspec import paths
from adaspec.cli import hydra_entry
from adaspec.errors import UserError
from adaspec.toolkit import device_for, no_tokenizer_parallelism

no_tokenizer_parallelism()


def build_cache(cfg: DictConfig) -> Path:
    """The teacher cache of `cfg`'s target, built or found up to date; `cfg` is validated where it was
    composed (the entry point, the paper runner)."""
    # imported here, not at the top: `python -m adaspec.cache` answers a bad config in a second
    from transformers import AutoTokenizer

    from adaspec.artefact_rules import cache_identity, require_artefact
    from adaspec.data.datamodule import TaskDataModule
    from adaspec.data.tasks import load_task
    from adaspec.distill.teacher_cache import (
        CacheSpec,
        TeacherCache,
        answer_counts,
        cache_bytes,
        write_teacher_cache,
    )
    from adaspec.models.build import freeze, load_model

    require_artefact(paths.target_dir(cfg), "target", "cache", cfg)
    target_final = paths.final(paths.target_dir(cfg))
    folder = paths.teacher_cache_dir(cfg)
    spec = CacheSpec(cfg.distill.cache_mode, cfg.distill.cache_topk)
    tokenizer = AutoTokenizer.from_pretrained(str(target_final))
    data = TaskDataModule(
        tokenizer,
        load_task(cfg.task),
        batch_size=cfg.stage.batch_size,
        max_length=cfg.task.max_length,
        n_val=cfg.task.n_val,
        seed=cfg.seed,
        prompt_format=cfg.task.prompt_format,
    )
    encoded = data.train_set + data.val_set  # the training split and the validation examples
    identity = cache_identity(cfg, encoded)
    if folder.exists() and not cfg.overwrite:
        try:
            TeacherCache(folder).check_identity(identity)
        except UserError as err:
            raise UserError(f"{err} (pass overwrite=true to replace it)") from err
        print(f"[adaspec] cache: {folder} is up to date, skipping")
        return folder
    target = freeze(load_model(target_final, cfg.model.attn_implementation))
    target = target.to(device_for(cfg))
    rows = int(answer_counts(encoded).sum())
    size = cache_bytes(rows, target.config.vocab_size, spec)
    print(
        f"[adaspec] cache: {spec.name} teacher signal for {rows} answer tokens, {size / 2**20:.1f} MiB -> {folder}"
    )
    return write_teacher_cache(
        target,
        encoded,
        folder,
        spec,
        identity,
        batch_size=cfg.stage.batch_size,
        pad_id=tokenizer.pad_token_id,
    )


@hydra_entry
def main(cfg: DictConfig) -> None:
    build_cache(cfg)


if __name__ == "__main__":
    main()
