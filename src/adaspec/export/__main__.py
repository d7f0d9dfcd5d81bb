"""`make export` (`python -m adaspec.export`): a trained draft in the format its servers load.

    python -m adaspec.export [--draft FOLDER | --stage draft|ref [--k 0.4]] [--out DIR] [--target FOLDER]
                             [--verifier NAME] [--gamma 3] [--dtype float32|bfloat16|float16] [--overwrite]
                             [--with-embedding]
                             [hydra overrides naming the trained draft, as for stages 2-3 ...]

An EAGLE-3 head goes out in vllm-project/speculators' format (vLLM: `--speculative-config
'{"model": "DIR"}'`), an independent full-vocabulary draft as a Hugging Face folder (transformers:
`assistant_model=`; vLLM: `'{"model": "DIR", "num_speculative_tokens": 3}'`); see `adaspec.export`.
`--verifier` is the name the server finds the target by (a Hub id such as HuggingFaceTB/SmolLM2-135M-Instruct);
default: the local target folder. Default `--out`: `<the draft's stage folder>/export-<format>`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adaspec.errors import UserError, reported_as_one_line

DTYPES = ("float32", "bfloat16", "float16")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m adaspec.export", description=__doc__.splitlines()[0])
    parser.add_argument("--draft", type=Path, default=None, help="a finished draft or reference folder (its final/)")
    parser.add_argument("--stage", choices=("draft", "ref"), default="draft", help="which artefact of the config")
    parser.add_argument("--k", type=float, default=0.4, help="which trained draft: draft-k<k>")
    parser.add_argument("--out", type=Path, default=None, help="the export folder")
    parser.add_argument("--target", type=Path, default=None, help="the target artefact the draft was trained against")
    parser.add_argument("--verifier", default=None, help="the name a server finds the target by")
    parser.add_argument("--gamma", type=int, default=3, help="speculative tokens an EAGLE-3 export proposes")
    parser.add_argument("--dtype", choices=DTYPES, default=None, help="cast the weights (default: as trained)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export folder")
    parser.add_argument("--with-embedding", action="store_true",
                        help="an EAGLE-3 head carries its copy of the target's embedding (vLLM shares the target's)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides naming the draft, e.g. model=smollm2 task=gsm8k")
    args = parser.parse_args(argv)
    if args.gamma < 1:
        parser.error("--gamma must be >= 1")
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.draft is not None and args.overrides:
        raise UserError("give either --draft FOLDER or the overrides naming the draft, not both")
    # imported after the arguments are parsed, so --help and argument errors answer at once
    import torch

    from adaspec.export.exporter import export_draft, format_of, trained_folder

    folder = trained_folder(args.draft, args.overrides, args.stage, args.k)
    if not (folder / "config.json").is_file():
        raise UserError(f"no trained draft in {folder}: train it first (make stage2/stage3 ARGS=...) or pass --draft")
    dtype = None if args.dtype is None else getattr(torch, args.dtype)
    out = args.out or folder.parent / f"export-{format_of(folder)}"
    form = export_draft(folder, out, target_folder=args.target, verifier=args.verifier,
                        speculative_tokens=args.gamma, dtype=dtype, overwrite=args.overwrite,
                        embedding=args.with_embedding)
    print(f"[adaspec] export: {folder} -> {out} ({form} format)")
    return out


if __name__ == "__main__":
    with reported_as_one_line():
        main()
