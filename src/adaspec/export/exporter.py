"""`export_draft`: one trained draft artefact written in its serving format (see `adaspec.export`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from omegaconf import OmegaConf

from adaspec.artefacts import paths
from adaspec.artefacts.store import read_meta, verify_weights, write_atomically
from adaspec.drafts import artefact_kind, load_draft
from adaspec.errors import UserError
from adaspec.toolkit import checked_config

PROVENANCE = "adaspec_export.json"


def format_of(draft_folder: Path) -> str:
    """The format a draft artefact exports to, its kind's (`TrainedDraft.export_format`)."""
    return artefact_kind(draft_folder).export_format


def trained_folder(draft: Path | None, overrides: list[str], stage: str = "draft", k: float = 0.4) -> Path:
    """The trained artefact a command names: `draft` (a final/ folder) as given, else the `final/` of `stage`
    (`draft`: draft-k<k>; `ref`) of the config `overrides` compose."""
    if draft is not None:
        return draft
    cfg = checked_config(*overrides, f"stage={stage}", f"k={k}")
    layout = paths.of(cfg)
    return paths.final(layout.draft_dir() if stage == "draft" else layout.ref_dir())


def default_target(draft_folder: Path) -> Path:
    """Where the stages put the target of the draft artefact at `draft_folder`, by the config it was trained
    with (paths relative to where the stages ran: the repository root)."""
    return paths.final(paths.of(OmegaConf.load(draft_folder / "config.yaml")).target_dir())


def export_draft(draft_folder: Path, out: Path, *, target_folder: Path | None = None, verifier: str | None = None,
                 speculative_tokens: int = 3, dtype: torch.dtype | None = None, overwrite: bool = False,
                 embedding: bool = False) -> str:
    """Export the draft artefact at `draft_folder` (a stage's `final/`) to `out`; the format it was written in.
    `target_folder`: the target artefact it was trained against (default: beside it in the run), whose
    config names the verifier's architecture; `verifier`: the name a server finds the target by (default:
    that folder); `embedding`: an EAGLE-3 head's export carries its copy of the target's embedding (by default
    the server shares the target's)."""
    draft_folder = Path(draft_folder)
    meta = verify_weights(draft_folder, rerun="the stage that wrote it")
    target_folder = Path(target_folder) if target_folder is not None else default_target(draft_folder)
    target_config = _target_config(target_folder, meta)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"{out} exists and is not empty; pass --overwrite to replace it, or choose --out")
    draft = load_draft(draft_folder, dtype=dtype) if dtype is not None else load_draft(draft_folder)

    form = draft.export_format
    if form == "speculators":
        # each format's writer is imported only when it writes
        from safetensors.torch import save_file

        from adaspec.export.speculators_format import speculators_config, speculators_tensors

        verifier = verifier or str(target_folder.resolve())
        config = speculators_config(draft, verifier, target_config, speculative_tokens)

        def write(folder: Path) -> None:
            (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            save_file(speculators_tensors(draft, embedding), folder / "model.safetensors", metadata={"format": "pt"})
    elif form == "hf":
        # each format's writer is imported only when it writes
        from transformers import AutoTokenizer

        from adaspec.export.hf_folder import check_full_vocabulary, write_hf_folder

        check_full_vocabulary(draft, draft_folder, target_config)
        tokenizer = AutoTokenizer.from_pretrained(draft_folder)

        def write(folder: Path) -> None:
            write_hf_folder(draft, tokenizer, folder)
    else:  # pragma: no cover - every trained kind exports to one of the two
        raise UserError(f"{draft_folder} holds a draft of kind {draft.kind!r}, whose format {form!r} has no writer")

    def fill(folder: Path) -> None:
        write(folder)
        shutil.copyfile(draft_folder / "config.yaml", folder / "adaspec_config.yaml")
        provenance = {"format": form, "source": str(draft_folder.resolve()), "artefact": meta,
                      "target": str(target_folder.resolve()), "verifier": verifier,
                      "dtype": None if dtype is None else str(dtype).removeprefix("torch.")}
        if form == "speculators":
            provenance["embedding"] = "included" if embedding else "the target's, shared by the server"
        (folder / PROVENANCE).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")

    write_atomically(out, fill)
    return form


def _target_config(target_folder: Path, draft_meta: dict) -> dict:
    """The target's config.json, after checking that it is the target the draft was trained against."""
    if not (target_folder / "config.json").is_file():
        raise UserError(
            f"no target model at {target_folder} (the draft's run keeps it at <run>/target/final); pass --target "
            f"with the target artefact the draft was trained against"
        )
    expected = draft_meta.get("upstream", {}).get("target")
    if expected is not None and (target_folder / "meta.json").is_file():
        found = read_meta(target_folder).get("weights")
        if found != expected:
            raise UserError(
                f"{target_folder} holds target weights {found}, the draft was trained against {expected}; "
                f"pass --target with the right target artefact"
            )
    return json.loads((target_folder / "config.json").read_text())
