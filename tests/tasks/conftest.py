"""Fixtures for the real tasks: the data folders beside the repository, skipped when absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def data_dir(name: str) -> Path:
    folder = SHARED_DATA / name
    if not folder.is_dir():
        pytest.skip(f"real {name} data not found at {folder.resolve()} (the shared/ folder beside the repo)")
    return folder


@pytest.fixture
def gsm8k_dir() -> Path:
    return data_dir("gsm8k")


@pytest.fixture
def mbpp_dir() -> Path:
    return data_dir("mbpp")


def task_cfg(name: str, local_dir: Path | str | None, **overrides) -> DictConfig:
    hub = {"gsm8k": ("openai/gsm8k", "main"), "mbpp": ("google-research-datasets/mbpp", "full")}[name]
    fields = {"name": name, "local_dir": None if local_dir is None else str(local_dir)}
    fields |= {"hub_path": hub[0], "hub_name": hub[1], "n_train": None, "n_test": None}
    return OmegaConf.create(fields | overrides)
