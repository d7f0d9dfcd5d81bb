"""Build the teacher-signal cache: `python -m adaspec.commands.cache [distill.cache_mode=exact|topk]` (`make cache`).

Runs the trained target once over the task's training split; stages 2 and 3 then read it with
`distill.teacher=cache` instead of running the target on every batch.
"""

from __future__ import annotations

from omegaconf import DictConfig

from adaspec.cli import hydra_entry
from adaspec.toolkit import no_tokenizer_parallelism

no_tokenizer_parallelism()


@hydra_entry
def main(cfg: DictConfig) -> None:
    # imported after hydra_entry has validated the config: a typo is answered in a second, not after torch loads
    from adaspec.distill.cache_build import build_cache

    build_cache(cfg)


if __name__ == "__main__":
    main()
