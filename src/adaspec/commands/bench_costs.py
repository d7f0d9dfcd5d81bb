"""`make bench-costs` (`python -m adaspec.commands.bench_costs`): the cost curve of the target and its drafts.

    python -m adaspec.commands.bench_costs [--name smollm2] [--servings float32,bfloat16,bfloat16-compiled]
                                   [--threads 1,2] [--ns 1,2,3,4,5,6,7,8,9] [--context 200] [--repeats 12]
                                   [--draft-servings float32,bfloat16] [--draft FOLDER] [--k 0.4]
                                   [hydra overrides naming the trained pair, as for stages 2-3 ...]

For the target in every serving configuration of `--servings` (`<dtype>[-int8][-attn_eager][-static|-compiled]`, see
`adaspec.decoding.serving`) at every torch thread count of `--threads`, and for the trained draft (of `--k`, or
`--draft`, when it exists) in every eager configuration of `--draft-servings`: one forward of n new tokens over a
`--context`-token cache for every n of `--ns`, interleaved repeats, medians with 95 % intervals
(`adaspec.evaluation.cost_curve`). In the same run: the memory-bandwidth floor of one forward per dtype,
and the contention guard (`adaspec.evaluation.contention`): a run on a busy machine is refused as a result
(its figures go to outputs/bench/ for a look, never to bench/results/, and the command exits with 3).

Writes bench/results/costs-<name>.json and costs-<name>.png (cost against n per configuration).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import torch

from adaspec.artefacts import paths
from adaspec.errors import UserError, reported_as_one_line
from adaspec.machine import describe_machine
from adaspec.toolkit import checked_config, markdown_table, write_json_atomically

RESULTS = Path("bench/results")
CONTENDED = Path("outputs/bench")
EXIT_CONTENDED = 3


def _list(cast):
    return lambda text: [cast(item) for item in text.split(",") if item]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m adaspec.commands.bench_costs",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="smollm2", help="results file bench/results/costs-<name>.json")
    parser.add_argument("--servings", type=_list(str), default=["float32", "bfloat16", "float32-compiled",
                                                                 "bfloat16-compiled"])
    parser.add_argument("--draft-servings", type=_list(str), default=["float32", "bfloat16"])
    parser.add_argument("--threads", type=_list(int), default=[1, 2])
    parser.add_argument("--ns", type=_list(int), default=list(range(1, 10)), help="new tokens per forward")
    parser.add_argument("--context", type=int, default=200, help="cached context tokens")
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--k", type=float, default=0.4, help="which trained draft: draft-k<k>")
    parser.add_argument("--draft", type=Path, default=None, help="a finished draft folder (its final/)")
    parser.add_argument("--no-draft", action="store_true", help="the target only")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--target", type=Path, default=None,
                        help="a model folder to time instead of the config's target artefact")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides naming the pair, e.g. model=smollm2 task=gsm8k")
    args = parser.parse_args(argv)
    if min(args.ns) < 1 or args.repeats < 3 or args.context < 1:
        parser.error("--ns must be >= 1, --repeats >= 3 and --context >= 1")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    cfg = checked_config(*args.overrides, "stage=draft", f"k={args.k}")
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.decoding.serving import DTYPES, Served, parse_serving
    from adaspec.drafts import load_draft
    from adaspec.evaluation import contention
    from adaspec.evaluation.cost_curve import Configuration, measure_curve, plot_curves, read_bandwidth_gbs
    from adaspec.models.build import load_model

    servings = [parse_serving(name, "--servings") for name in args.servings]
    draft_servings = [parse_serving(name, "--draft-servings") for name in args.draft_servings]
    if any(s.compile or s.kv_cache == "static" for s in draft_servings):
        raise UserError("--draft-servings: a draft decodes eager on a dynamic cache; give eager servings only, "
                        "e.g. float32,bfloat16,bfloat16-int8")
    layout = paths.of(cfg)
    target_folder = args.target or paths.final(layout.target_dir())
    if not (target_folder / "config.json").is_file():
        raise UserError(f"no target model in {target_folder}: run stage 1 first (make stage1 ARGS=...) "
                        f"or pass --target FOLDER")
    draft_folder = None if args.no_draft else (args.draft or paths.final(layout.draft_dir()))
    if draft_folder is not None and not (draft_folder / "config.json").is_file():
        print(f"[adaspec] bench-costs: no draft at {draft_folder}: timing the target only")
        draft_folder = None

    torch.set_num_threads(max(args.threads))  # the guard's kernel runs at the same threads before and after
    before = contention.read()
    target = load_model(target_folder).eval()
    params = sum(p.numel() for p in target.parameters())  # before any serving quantises a copy
    configurations = [Configuration(f"target/{s.name}/t{t}", Served(copy.deepcopy(target), s), t)
                      for s in servings for t in args.threads]
    if draft_folder is not None:
        draft = load_draft(draft_folder).eval().model
        configurations += [Configuration(f"draft/{s.name}/t{t}", Served(copy.deepcopy(draft), s), t)
                           for s in draft_servings for t in args.threads]
    del target
    curves = measure_curve(configurations, args.ns, args.context, args.repeats)
    torch.set_num_threads(max(args.threads))
    bandwidth = read_bandwidth_gbs()
    floors = {dtype: params * DTYPES[dtype].itemsize / (bandwidth * 1e9) for dtype in {s.dtype for s in servings}}
    if any(s.weights == "int8" for s in servings):
        floors["int8 weights"] = params / (bandwidth * 1e9)
    verdict = contention.judge(before, contention.read())

    payload = {
        "name": args.name, "command": "python -m adaspec.commands.bench_costs " + " ".join(argv),
        "machine": describe_machine(),
        "target": str(target_folder), "draft": None if draft_folder is None else str(draft_folder),
        "context": args.context, "repeats": args.repeats,
        "read_bandwidth_gbs": bandwidth, "target_parameters": params,
        "bandwidth_floor_s": floors, "contention": verdict.as_dict(), "curves": curves,
    }
    out = (CONTENDED if verdict.contended else args.out) / f"costs-{args.name}.json"
    write_json_atomically(out, payload, sort_keys=True)
    plot_curves(curves, {f"target {d}": s for d, s in floors.items()}, out.with_suffix(".png"))
    _print_table(curves, args.ns)
    if verdict.contended:
        print(f"[adaspec] bench-costs: the machine was busy ({verdict.why}): not recorded as a result; the figures "
              f"are in {out} for a look. Rerun with nothing else running.")
        raise SystemExit(EXIT_CONTENDED)
    print(f"[adaspec] bench-costs: read bandwidth {bandwidth:.1f} GB/s; floor of one target forward "
          + ", ".join(f"{d} {s * 1e3:.1f} ms" for d, s in floors.items()) + f"; wrote {out} and its plot")
    return payload


def _print_table(curves: dict[str, dict], ns: list[int]) -> None:
    columns = ["configuration", "1 token (ms)"] + [f"{n}" for n in ns if n > 1]
    rows = []
    for name, curve in curves.items():
        points = curve["points"]
        rows.append([name, f"{points[str(ns[0])]['median_s'] * 1e3:.1f}"]
                    + [f"{points[str(n)]['relative_to_1']:.2f}x" for n in ns if n > 1])
    print(markdown_table(columns, rows))


if __name__ == "__main__":
    with reported_as_one_line():
        main()
