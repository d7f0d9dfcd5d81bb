"""Evaluate trained drafts: `python -m adaspec.evaluate [eval.draft_ks=[0.4,1.0]] [decode=...] [gamma=...]`.

Speculative decoding of the target with each draft against target-only decoding and Hugging Face
assisted generation; see `adaspec.evaluation.run`. Results land in `<eval_dir>/<setting>/`.
"""

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
        from adaspec.evaluation.run import run_evaluation

        run_evaluation(cfg)


if __name__ == "__main__":
    main()
