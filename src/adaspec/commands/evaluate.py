"""Evaluate trained drafts: `python -m adaspec.commands.evaluate [eval.draft_ks=[0.4,1.0]] [decode=...] [gamma=...]`.

Speculative decoding of the target with each draft against target-only decoding and Hugging Face
assisted generation; see `adaspec.evaluation.run`. Results land in `<eval_dir>/<setting>/`.
"""

from __future__ import annotations

from omegaconf import DictConfig

from adaspec.cli import hydra_entry
from adaspec.toolkit import no_tokenizer_parallelism

no_tokenizer_parallelism()


@hydra_entry
def main(cfg: DictConfig) -> None:
    # imported here, after hydra_entry has validated the config: a typo is reported in a second
    from adaspec.evaluation.run import run_evaluation

    run_evaluation(cfg)


if __name__ == "__main__":
    main()
