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
from adaspec.artefacts.store import read_meta, verify_weights
from adaspec.distill.teacher_cache import data_identity
from adaspec.errors import UserError
from adaspec.training.stage_specs import STAGES


def require_artefact(folder: Path, stage: str, needed_by: str, layout: paths.Layout, extra_args: str = "") -> dict:
    """The meta of `stage`'s finished artefact in `folder`, its files checked against the hashes it was
    saved with; raises with the command that makes it (for `layout`'s task and model)."""
    final = paths.final(folder)
    made_by = STAGES[stage]
    rerun = f"`{made_by.make} {layout.names}{extra_args}`"
    if not (final / "meta.json").is_file():
        raise UserError(
            f"stage {needed_by} needs the {made_by.label} artefact {final}, which does not exist; make it first "
            f"with {rerun} and the same seeds"
        )
    return verify_weights(final, rerun)


def check_upstream(layout: paths.Layout, pretrain: DictConfig | None) -> dict[str, str]:
    """The upstream artefacts `layout`'s stage trains from (`Stage.needs`), as {name: weights hash}; raises if
    any is missing, or if one of them was made from another artefact than this stage's own of that name
    (a reference from another target or draft initialisation)."""
    stage = STAGES[layout.stage]
    metas = {name: require_artefact(STAGES[name].folder(layout), name, stage.name, layout)
             for name in stage.needs(pretrain)}
    upstream = {name: meta["weights"] for name, meta in metas.items()}
    for name, meta in metas.items():
        for source, weights in meta["upstream"].items():
            if source in upstream and weights != upstream[source]:
                made, other = STAGES[name], STAGES[source]
                raise UserError(
                    f"the {made.label} {paths.final(made.folder(layout))} was made from another {other.label} than "
                    f"{paths.final(other.folder(layout))}; retrain it with `{made.make}` and overwrite=true"
                )
    return upstream


def check_not_done(folder: Path, wanted: str, resume: bool, overwrite: bool) -> bool:
    """True when a finished artefact of the config fingerprinted `wanted` exists in `folder` (nothing to do, with
    or without resume=true); raises when the artefact, or the checkpoint a resume would continue, was made with
    another config."""
    final, last = paths.final(folder), paths.last_checkpoint(folder)
    if overwrite:
        return False
    if (final / "meta.json").is_file():
        if read_meta(final)["fingerprint"] == wanted:
            return True
        raise UserError(
            f"{final} exists and was trained with a different config; pass overwrite=true to replace it, "
            f"or set stage.tag=<name> to keep both"
        )
    if last.exists() and not resume:
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


def record_run_start(folder: Path, fingerprint: str) -> None:
    """Note which config (`fingerprint`) writes this stage's checkpoints, for `check_not_done` to compare a
    resume with."""
    folder.mkdir(parents=True, exist_ok=True)
    paths.run_record(folder).write_text(json.dumps({"fingerprint": fingerprint}) + "\n")


def cache_identity(layout: paths.Layout, task: DictConfig, encoded) -> dict[str, str]:
    """What a teacher cache was computed from: the target's weights, the task and its tokenised data."""
    return {
        "target": read_meta(paths.final(layout.target_dir()))["weights"],
        "task": task.name,
        "max_length": str(task.max_length),
        "data": data_identity(encoded),
    }
