"""GGUF checkpoints -> `save_pretrained` folders, converted once so that later loads are fast and offline.

transformers reads a GGUF file directly (`from_pretrained(folder, gguf_file=name)`, with the `gguf` and
`accelerate` packages) and dequantises it to float32, which takes tens of seconds for a 100 MB file. The
converted folder (safetensors, tokenizer with its chat template, and `source.json` recording the GGUF's
sha256) loads like any Hugging Face checkpoint.
"""

from __future__ import annotations

import json
import shutil
from importlib.metadata import version
from pathlib import Path
from typing import Any

from adaspec.artefacts.store import sha256_of
from adaspec.errors import UserError

SOURCE_FILE = "source.json"  # in a converted folder: where its weights came from


def check_sha256(path: Path, expected: str) -> None:
    """A UserError naming the file when its content is not the pinned one."""
    actual = sha256_of(path)
    if actual != expected:
        raise UserError(
            f"{path} has sha256 {actual}, expected {expected}: the file is corrupt or not the pinned "
            f"release; delete it and fetch it again"
        )


def is_hf_checkpoint(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def gguf_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.gguf"))


def load_gguf(gguf_path: Path):
    """The GGUF's model dequantised to a plain float32 checkpoint (savable), and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    kwargs: dict[str, Any] = {}
    try:  # transformers >= 5.24 can keep GGUF weights packed; ask for plain tensors
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=name, dequantize=True)
    except ImportError:  # older releases always dequantise
        pass
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, **kwargs)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # the weights are plain tensors now; only the marker refuses save_pretrained
        quantizer.remove_quantization_config(model)
    return model, AutoTokenizer.from_pretrained(folder, gguf_file=name)


def convert_gguf(gguf_path: Path, out_dir: Path, source: dict[str, Any] | None = None) -> Path:
    """Dequantise `gguf_path` into the `save_pretrained` folder `out_dir` (written whole or not at all).
    `source` is recorded in `out_dir/source.json` next to the GGUF's name and sha256."""
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    sha = sha256_of(gguf_path)
    model, tokenizer = load_gguf(gguf_path)
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)  # safetensors
    tokenizer.save_pretrained(partial)
    record = {
        "gguf_file": gguf_path.name,
        "gguf_sha256": sha,
        **(source or {}),
        "converted_with": {pkg: version(pkg) for pkg in ("transformers", "gguf", "torch")},
    }
    (partial / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    partial.rename(out_dir)
    return out_dir


def converted_dir(gguf_path: Path, models_dir: Path) -> Path:
    """Where a user's GGUF file is converted to: named by the file and the start of its sha256, so a
    changed file gets a new folder."""
    return Path(models_dir) / "converted" / f"{gguf_path.stem}-{sha256_of(gguf_path)[:12]}"


def checkpoint_from_gguf(path: str | Path, models_dir: str | Path) -> Path:
    """The Hugging Face folder for `path`: a .gguf file, or a folder holding one .gguf and no config.json,
    converted on first use under `models_dir/converted/`. Any other path is returned as it is."""
    path = Path(path)
    if path.is_dir():
        if is_hf_checkpoint(path):
            return path
        found = gguf_files(path)
        if not found:
            raise UserError(
                f"{path} holds neither a Hugging Face checkpoint (config.json) nor a .gguf file: point "
                f"model.target_path at a folder with one of them"
            )
        if len(found) > 1:
            raise UserError(
                f"{path} holds {len(found)} .gguf files ({', '.join(f.name for f in found)}): point "
                f"model.target_path at one of them"
            )
        path = found[0]
    if path.suffix != ".gguf" or not path.is_file():
        return path
    out = converted_dir(path, Path(models_dir))
    if not is_hf_checkpoint(out):
        convert_gguf(path, out, source={"origin": str(path.resolve())})
    return out
