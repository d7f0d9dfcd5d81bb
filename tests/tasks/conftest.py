"""Fixtures for the real tasks: the data folders beside the repository, skipped when absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from tests.conftest import shared_data


@pytest.fixture
def gsm8k_dir() -> Path:
    return shared_data("gsm8k")


@pytest.fixture
def mbpp_dir() -> Path:
    return shared_data("mbpp")


def task_cfg(name: str, local_dir: Path | str | None, **overrides) -> DictConfig:
    hub = {"gsm8k": ("openai/gsm8k", "main"), "mbpp": ("google-research-datasets/mbpp", "full")}[name]
    fields = {"name": name, "local_dir": None if local_dir is None else str(local_dir)}
    fields |= {"hub_path": hub[0], "hub_name": hub[1], "n_train": None, "n_test": None}
    return OmegaConf.create(fields | overrides)
