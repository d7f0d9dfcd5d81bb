"""Stage artefacts: written atomically, identified by a fingerprint of what produced them.

A `final/` folder holds the Hugging Face model and tokenizer, `config.yaml` (the resolved config),
`metrics.json` and `meta.json` (stage, config fingerprint, weights hash, the upstream artefacts it
was trained from). It is written to a temporary sibling and renamed into place, so a crash while
saving never leaves a half-written `final/` for a later stage to load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspec.config.identity import fingerprint_of, identity
from adaspec.config.schema import Config
from adaspec.drafts.base import Draft
from adaspec.errors import UserError

META = "meta.json"
METRICS = "metrics.json"


def fingerprint(cfg: DictConfig, stage: str) -> str:
    """Hash of the config fields that change what `stage` produces (declared in adaspec.config.schema: `counted`)."""
    return fingerprint_of(identity(Config, cfg, stage))


DRAFT_VOCAB_FILE = "draft_vocab.json"  # adaspec.models.draft_vocab.VOCAB_FILE: a reduced draft's id map


@dataclass(frozen=True)
class Provenance:
    """What an artefact records of the run that made it: the stage, the task, the resolved config and the
    config's fingerprint for that stage (`provenance`)."""

    stage: str
    task: str
    config_yaml: str
    fingerprint: str


def provenance(cfg: DictConfig, stage: str) -> Provenance:
    return Provenance(stage, str(cfg.task.name), OmegaConf.to_yaml(cfg, resolve=True), fingerprint(cfg, stage))


def identity_files(folder: Path) -> list[str]:
    """The files that make a saved model what it is: weights, tokenizer and a reduced draft's id map."""
    return [
        name
        for name in sorted(os.listdir(folder))
        if name.endswith((".safetensors", ".bin")) or name.startswith("tokenizer") or name == DRAFT_VOCAB_FILE
    ]


def file_hashes(folder: Path) -> dict[str, str]:
    return {name: sha256_of(folder / name)[:16] for name in identity_files(folder)}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_hash(folder: Path) -> str:
    """Identity of a saved model and its tokenizer: hash of the weight and tokenizer files."""
    digest = hashlib.sha256()
    for name in identity_files(folder):
        with open(folder / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def verify_weights(folder: Path, rerun: str) -> dict[str, Any]:
    """The artefact's meta, after checking that its weight and tokenizer files are the ones it was saved
    with (one sha256 pass over them: about a second per 500 MB). Raises naming the changed file."""
    meta = read_meta(folder)
    recorded = meta.get("files")
    if recorded is None:  # an artefact saved before per-file hashes were recorded: the combined hash
        if weights_hash(folder) != meta["weights"]:
            raise UserError(
                f"the weights in {folder} are corrupted or were changed after training (hash differs from "
                f"{folder / META}); rerun {rerun} with overwrite=true"
            )
        return meta
    for name, value in recorded.items():
        if not (folder / name).is_file():
            raise UserError(
                f"{folder / name} is missing from the artefact; rerun {rerun} with overwrite=true"
            )
        if sha256_of(folder / name)[:16] != value:
            raise UserError(
                f"{folder / name} is corrupted or was changed after training (its hash differs from "
                f"{folder / META}); rerun {rerun} with overwrite=true"
            )
    extra = sorted(set(identity_files(folder)) - set(recorded))
    if extra:
        raise UserError(
            f"{folder / extra[0]} was added to the artefact after training (not in {folder / META}); "
            f"rerun {rerun} with overwrite=true"
        )
    return meta


def read_meta(folder: Path) -> dict[str, Any]:
    path = folder / META
    if not path.is_file():
        raise UserError(f"{folder} is not a finished stage artefact ({META} missing); retrain it")
    return json.loads(path.read_text())


def read_metrics(folder: Path) -> dict[str, Any]:
    """A saved artefact's metrics.json; {} for one without it (made before it was written)."""
    path = folder / METRICS
    return json.loads(path.read_text()) if path.is_file() else {}


def write_atomically(destination: Path, fill) -> None:
    """Call `fill(tmp_folder)`, then move the folder to `destination`, replacing an old one only then."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{destination.name}.tmp-", dir=destination.parent))
    try:
        fill(tmp)
        if destination.exists():
            old = destination.with_name(f".{destination.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(destination, old)
            os.replace(tmp, destination)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, destination)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_temporaries(destination: Path) -> None:
    """Delete what an interrupted `write_atomically(destination, ...)` left beside it."""
    parent = destination.parent
    if parent.is_dir():
        for leftover in [*parent.glob(f".{destination.name}.tmp-*"), parent / f".{destination.name}.old"]:
            shutil.rmtree(leftover, ignore_errors=True)


def save_artefact(
    destination: Path,
    *,
    model,
    tokenizer,
    made_by: Provenance,
    metrics: dict[str, Any],
    upstream: dict[str, str] | None = None,
    state_dict: dict | None = None,
) -> None:
    """`model`: a Hugging Face model, or a trained draft (`ModelDraft`, `Eagle3Draft`), whose id map is saved beside
    its weights as part of its identity. `state_dict`: the model's full weights where a sharding strategy
    keeps only a shard in `model`."""
    draft = model if isinstance(model, Draft) else None
    weights = draft.model if draft is not None else model

    def fill(folder: Path) -> None:
        weights.save_pretrained(folder, state_dict=state_dict)
        if draft is not None:
            draft.save_vocab(folder)
        tokenizer.save_pretrained(folder)
        (folder / "config.yaml").write_text(made_by.config_yaml)
        (folder / METRICS).write_text(json.dumps(metrics, indent=2, sort_keys=True))
        meta = {
            "stage": made_by.stage,
            "task": made_by.task,
            "fingerprint": made_by.fingerprint,
            "weights": weights_hash(folder),
            "files": file_hashes(folder),
            "upstream": upstream or {},
        }
        (folder / META).write_text(json.dumps(meta, indent=2, sort_keys=True))

    write_atomically(destination, fill)
