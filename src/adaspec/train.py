"""Train one stage: `python -m adaspec.train stage=target|ref|draft [task=...] [model=...] [k=...]`."""

from __future__ import annotations

import os

import hydra
from omegaconf import DictConfig

from adaspec.config import validate
from adaspec.errors import reported_as_one_line

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    with reported_as_one_line():
        validate(cfg)  # before the heavy imports below, so a typo is reported in a second
        from adaspec.pipeline import run_stage

        run_stage(cfg)


if __name__ == "__main__":
    main()
