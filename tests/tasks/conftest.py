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


def hub_layout(folder: Path, configs: dict[str, dict[str, list[dict]]]) -> Path:
    """A local folder laid out as a Hub dataset repository is: a README.md whose YAML header declares each
    config's splits, and `<config>/<split>-00000-of-00001.parquet` (openai/gsm8k's main/ and socratic/,
    google-research-datasets/mbpp's full/ and sanitized/). `datasets.load_dataset(folder, config)` reads it
    as it reads the Hub repository."""
    import datasets

    header = ["---", "configs:"]
    for config, splits in configs.items():
        header += [f"- config_name: {config}", "  data_files:"]
        for split, records in splits.items():
            (folder / config).mkdir(parents=True, exist_ok=True)
            datasets.Dataset.from_list(records).to_parquet(str(folder / config / f"{split}-00000-of-00001.parquet"))
            header += [f"  - split: {split}", f"    path: {config}/{split}-*"]
    (folder / "README.md").write_text("\n".join([*header, "---", ""]))
    return folder


def task_cfg(name: str, local_dir: Path | str | None, **overrides) -> DictConfig:
    hub = {"gsm8k": ("openai/gsm8k", "main"), "mbpp": ("google-research-datasets/mbpp", "full")}[name]
    fields = {"name": name, "local_dir": None if local_dir is None else str(local_dir)}
    fields |= {"hub_path": hub[0], "hub_name": hub[1], "n_train": None, "n_test": None}
    return OmegaConf.create(fields | overrides)
