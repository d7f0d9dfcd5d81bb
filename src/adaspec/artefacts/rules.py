"""The rules about stage artefacts that every command shares: that the upstream artefacts a stage needs
(adaspec.training.stage_specs) exist and agree, whether a stage's own artefact is already done, and the
identity of a teacher cache.

Imports nothing from training but `adaspec.training.stage_specs` (no Lightning), so evaluation, the cache
and diagnostics can use it without loading Lightning.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from adaspec.artefacts import paths
from adaspec.artefacts.store import fingerprint, read_meta, verify_weights
from adaspec.distill.teacher_cache import data_identity
from adaspec.errors import UserError
from adaspec.training.stage_specs import STAGES, stage_of


def require_artefact(folder: Path, stage: str, needed_by: str, cfg: DictConfig, extra_args: str = "") -> dict:
    """The meta of `stage`'s finished artefact in `folder`, its files checked against the hashes it was
    saved with; raises with the command that makes it."""
    final = paths.final(folder)
    made_by = STAGES[stage]
    rerun = f"`{made_by.make} task={cfg.task.name} model={cfg.model.name}{extra_args}`"
    if not (final / "meta.json").is_file():
        raise UserError(
            f"stage {needed_by} needs the {made_by.label} artefact {final}, which does not exist; make it first "
            f"with {rerun} and the same seeds"
        )
    return verify_weights(final, rerun)


def check_upstream(cfg: DictConfig) -> dict[str, str]:
    """The upstream artefacts this stage trains from (`Stage.needs`), as {name: weights hash}; raises if
    any is missing, or if one of them was made from another artefact than this stage's own of that name
    (a reference from another target or draft initialisation)."""
    stage = stage_of(cfg)
    metas = {name: require_artefact(STAGES[name].folder(cfg), name, stage.name, cfg) for name in stage.needs(cfg)}
    upstream = {name: meta["weights"] for name, meta in metas.items()}
    for name, meta in metas.items():
        for source, weights in meta["upstream"].items():
            if source in upstream and weights != upstream[source]:
                made, other = STAGES[name], STAGES[source]
                raise UserError(
                    f"the {made.label} {paths.final(made.folder(cfg))} was made from another {other.label} than "
                    f"{paths.final(other.folder(cfg))}; retrain it with `{made.make}` and overwrite=true"
                )
    return upstream


def check_not_done(cfg: DictConfig, folder: Path) -> bool:
    """True when a finished artefact of this config exists (nothing to do, with or without resume=true);
    raises when the artefact, or the checkpoint a resume would continue, was made with another config."""
    final, last = paths.final(folder), paths.last_checkpoint(folder)
    wanted = fingerprint(cfg, cfg.stage.name)
    if cfg.overwrite:
        return False
    if (final / "meta.json").is_file():
        if read_meta(final)["fingerprint"] == wanted:
            return True
        raise UserError(
            f"{final} exists and was trained with a different config; pass overwrite=true to replace it, "
            f"or set stage.tag=<name> to keep both"
        )
    if last.exists() and not cfg.resume:
        raise UserError(
            f"an interrupted run left {last}; pass resume=true to continue it or overwrite=true to start over"
        )
    if last.exists() and started_fingerprint(folder) != wanted:
        raise UserError(
            f"the interrupted run in {folder} was trained with a different config; resume it with that config, "
            f"pass overwrite=true to replace it, or set stage.tag=<name> to keep both"
        )
    return False


def started_fingerprint(folder: Path) -> str | None:
    record = paths.run_record(folder)
    return json.loads(record.read_text())["fingerprint"] if record.is_file() else None


def record_run_start(cfg: DictConfig, folder: Path) -> None:
    """Note which config writes this stage's checkpoints, for `check_not_done` to compare a resume with."""
    folder.mkdir(parents=True, exist_ok=True)
    paths.run_record(folder).write_text(json.dumps({"fingerprint": fingerprint(cfg, cfg.stage.name)}) + "\n")


def cache_identity(cfg: DictConfig, encoded) -> dict[str, str]:
    """What a teacher cache was computed from: the target's weights, the task and its tokenised data."""
    return {
        "target": read_meta(paths.final(paths.target_dir(cfg)))["weights"],
        "task": cfg.task.name,
        "max_length": str(cfg.task.max_length),
        "data": data_identity(encoded),
    }
