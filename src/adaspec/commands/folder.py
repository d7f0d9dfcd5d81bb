"""`python -m adaspec.commands.folder OVERRIDES...`: print the folder of the stage these overrides train.

For recipes that read a stage after training it (`make head-convergence`'s curves): the folder follows whatever
the overrides change (the answers' sampling, the stage's tag) instead of being written out by hand beside them.
"""

from __future__ import annotations

import sys

from adaspec.artefacts import paths
from adaspec.errors import reported_as_one_line
from adaspec.toolkit import checked_config
from adaspec.training.stage_specs import stage_dir


def main(argv: list[str] | None = None) -> None:
    with reported_as_one_line():
        print(stage_dir(paths.of(checked_config(*(sys.argv[1:] if argv is None else argv)))))


if __name__ == "__main__":
    main()
