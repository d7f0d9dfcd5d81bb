"""Helpers the entry points share: compose a config, write files atomically, render a markdown table,
W&B on/off, the device to run on, tokenised prompts, and the tokenizers' thread setting.

Importing this module is cheap (no torch): the entry points import it before they validate the config.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

if TYPE_CHECKING:
    import torch

CONF = Path(__file__).resolve().parents[2] / "conf"


def no_tokenizer_parallelism() -> None:
    """Hugging Face tokenizers' own threads warn, and can deadlock, once the process forks (DataLoader
    workers, the MBPP sandbox); the entry points run one tokenizer call at a time, so they need none."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def compose_config(*overrides: str, config_dir: Path = CONF, config_name: str = "config") -> DictConfig:
    """The project's config composed from `conf/` with Hydra overrides, as `python -m adaspec.commands.train` would."""
    from hydra import compose, initialize_config_dir

    import adaspec.config.schema  # noqa: F401  (registers the schemas)

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


def checked_config(*overrides: str) -> DictConfig:
    """`compose_config`, then `validate`: for the entry points that run what they compose in their own
    process (bench, gpu-check, the paper runner, make models), where no Hydra entry point has checked it.
    A misspelt key or a bad value is one UserError line, as at the Hydra entry points."""
    # cheap, but they import hydra's ConfigStore and errors: kept out of this module's import
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from adaspec.cli import composition_error
    from adaspec.config.rules import validate
    from adaspec.errors import UserError

    try:
        cfg = compose_config(*overrides)
    except (ConfigCompositionException, OverrideParseException) as err:
        raise UserError(composition_error(err)) from None
    return validate(cfg)


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename it over `path`: readers never see half a file,
    and a writer that fails leaves the old file as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")  # "x": never someone else's
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    write_bytes_atomically(path, text.encode())


def jsonable(value: Any) -> Any:
    """NaN and infinities become null (JSON has neither); containers are converted recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def write_json_atomically(path: Path, payload: Any, *, sort_keys: bool = False) -> None:
    """Strict JSON (NaN and infinities as null), indented, written atomically. The payload is serialised
    before the file is touched, so a value JSON cannot hold leaves the old file intact."""
    text = json.dumps(jsonable(payload), indent=2, sort_keys=sort_keys, allow_nan=False) + "\n"
    write_text_atomically(path, text)


def format_cell(value: Any, digits: int = 3) -> str:
    """None and non-finite numbers as n/a, floats with `digits` decimals, anything else as str."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(
    header: Sequence[str], rows: Iterable[Sequence[Any]], cell: Callable[[Any], str] = format_cell
) -> str:
    """A GitHub markdown table, without a trailing newline; cells that are not str go through `cell`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells for {len(header)} columns: {row!r}")
        lines.append("| " + " | ".join(v if isinstance(v, str) else cell(v) for v in row) + " |")
    return "\n".join(lines)


def wandb_enabled(logger: DictConfig) -> bool:
    """Whether this command logs to Weights & Biases (`logger=wandb`, mode other than disabled)."""
    wb = logger.wandb
    return bool(wb.enabled) and wb.mode != "disabled"


def wants_gpu(trainer: DictConfig) -> bool:
    return str(trainer.accelerator) in ("gpu", "cuda", "auto")


def device_for(trainer: DictConfig) -> torch.device:
    """`cuda` when `trainer.accelerator` allows a GPU (gpu, cuda, auto) and one is present, else `cpu`."""
    import torch  # here, not at the top: the entry points import this module before they validate

    return torch.device("cuda" if wants_gpu(trainer) and torch.cuda.is_available() else "cpu")


def tokenize_prompts(tokenizer, texts: Iterable[str], device: torch.device | str | None = None) -> list[torch.Tensor]:
    """One (1, length) tensor of token ids per prompt, without special tokens (the task templates
    carry their own), on `device` when given."""
    ids = [tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids for text in texts]
    return ids if device is None else [t.to(device) for t in ids]
