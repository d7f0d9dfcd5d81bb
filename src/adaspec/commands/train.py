"""Train one stage: `python -m adaspec.commands.train stage=target|ref|draft [task=...] [model=...] [k=...]`."""

from __future__ import annotations

from omegaconf import DictConfig

from adaspec.cli import hydra_entry
from adaspec.toolkit import no_tokenizer_parallelism

no_tokenizer_parallelism()


@hydra_entry
def main(cfg: DictConfig) -> None:
    # imported here, after hydra_entry has validated the config: a typo is reported in a second
    from adaspec.training.pipeline import run_stage

    run_stage(cfg)


if __name__ == "__main__":
    main()
