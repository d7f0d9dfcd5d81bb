"""Expected speed-up at the best gamma, per draft, over the seeds of a paper run on the real target.

    python experiments/smollm2/best_gamma.py experiments/results/smollm2-paper-stage0/smollm2_gsm8k [--costs bench/results/smollm2.json]
        [--cost-curve bench/results/costs-smollm2.json --serving bfloat16-compiled --threads 2]

Each seed's main.json holds the draft's acceptance at every gamma (replayed exactly from the target's greedy
output on all prompts). With the measured seconds of the calls a block makes (the evaluation's own `costs`,
or `--costs`, a bench-real JSON from the same machine: for results written before evaluations measured
them, or measured while other work shared the cores)
`adaspec.evaluation.cost.expected_speedups` gives the speed-up each gamma would bring; this picks the best
per seed and reports its mean and 95 % interval over seeds beside the wall-clock speed-up measured at the
evaluation's own gamma. `--cost-curve` takes the target's one-token and verification costs from a
`make bench-costs` curve of one serving configuration instead, so that the best gamma is the one of the
configuration that will serve (the draft's cost stays the evaluation's). Writes best_gamma.json and
best_gamma.md next to the seeds (best_gamma-<serving>.* with --cost-curve).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from adaspec.evaluation.cost import expected_speedups
from adaspec.machine import mixed_cpus
from adaspec.paper.stats import describe, interval, mean_and_spread
from adaspec.toolkit import markdown_table, write_json_atomically, write_text_atomically


def curve_costs(path: Path, serving: str, threads: int) -> tuple[float, dict[str, float]]:
    """(target one-token s, verification s by gamma) from the medians of a `make bench-costs` curve."""
    curves = json.loads(path.read_text())["curves"]
    key = f"target/{serving}/t{threads}"
    if key not in curves:
        raise SystemExit(f"{path} has no curve {key}: it has {', '.join(sorted(curves))}")
    points = curves[key]["points"]
    return points["1"]["median_s"], {str(int(n) - 1): p["median_s"] for n, p in points.items() if int(n) > 1}


def costs_of(results: dict, fallback: dict | None, row: str,
             curve: tuple[float, dict[str, float]] | None = None) -> tuple[float, float, dict[str, float]]:
    """(draft one-token s, target one-token s, target verification s by gamma) for one draft row: `--costs`
    when given, else the evaluation's own; the target's from `curve` when given."""
    if fallback is not None:
        draft = fallback["draft_1_s"]
        draft = draft.get("trained", draft.get(row)) if isinstance(draft, dict) else draft
        costs = draft, fallback["target_1_s"], fallback["target_verify_s"]
    elif "costs" in results:
        c = results["costs"]
        costs = c["draft_1_s"][row], c["target_1_s"], c["target_verify_s"]
    else:
        raise SystemExit("these results hold no call costs: pass --costs bench/results/<name>.json")
    return costs if curve is None else (costs[0], *curve)


def best_gamma_table(folder: Path, fallback: dict | None, curve: tuple | None = None) -> dict[str, dict]:
    seeds = sorted(folder.glob("seed*/main.json"))
    per_row: dict[str, dict[str, list]] = {}
    for path in seeds:
        results = json.loads(path.read_text())
        for row, d in results["drafts"].items():
            draft_s, target_s, verify_s = costs_of(results, fallback, row, curve)
            taus = {g: v["tau"] for g, v in d["acceptance_vs_gamma"]["by_gamma"].items() if g in verify_s}
            speedups = expected_speedups(taus, draft_s, target_s, verify_s)
            best = max(speedups, key=speedups.get)
            entry = per_row.setdefault(row, {"label": d["label"], "best_gamma": [], "expected": [], "measured": []})
            entry["best_gamma"].append(int(best))
            entry["expected"].append(speedups[best])
            entry["measured"].append(d["speedup_vs_target"])
    return {
        row: {
            "label": e["label"],
            "best_gamma": e["best_gamma"],
            "expected_speedup_at_best_gamma": describe(e["expected"]),
            "measured_speedup_at_eval_gamma": describe(e["measured"]),
        }
        for row, e in per_row.items()
    } | {"seeds": [p.parent.name for p in seeds]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--costs", type=Path, default=None, help="bench-real JSON whose `costs` to use")
    parser.add_argument("--cost-curve", type=Path, default=None, help="bench-costs JSON: the target's costs")
    parser.add_argument("--serving", default="float32", help="the curve's serving configuration")
    parser.add_argument("--threads", type=int, default=2, help="the curve's torch threads")
    args = parser.parse_args()
    fallback = json.loads(args.costs.read_text())["costs"] if args.costs else None
    curve = curve_costs(args.cost_curve, args.serving, args.threads) if args.cost_curve else None
    table = best_gamma_table(args.folder, fallback, curve)
    seeds = table.pop("seeds")

    def fmt(d: dict) -> str:
        return f"{mean_and_spread(d)}{interval(d)}"

    rows = [
        [t["label"], ", ".join(f"{g}: {n}" for g, n in sorted(Counter(t["best_gamma"]).items())),
         fmt(t["expected_speedup_at_best_gamma"]), fmt(t["measured_speedup_at_eval_gamma"])]
        for t in table.values()
    ]
    text = markdown_table(
        ["draft", "best gamma (seeds)", "expected speed-up at best gamma", "measured speed-up at eval gamma"], rows
    )
    source = "each evaluation's own call costs" if fallback is None else f"call costs of {args.costs}"
    name = "best_gamma"
    if curve is not None:
        source += f"; the target's from {args.cost_curve}, {args.serving}, {args.threads} threads"
        name += f"-{args.serving}"
    text += f"\n\nSeeds: {', '.join(seeds)}; {source}.\n"
    machines = {p.parent.name: json.loads(p.read_text()).get("machine") for p in sorted(args.folder.glob("seed*/main.json"))}
    for path in (args.costs, args.cost_curve):
        if path is not None:
            machines[str(path)] = json.loads(path.read_text()).get("machine")
    mixed = mixed_cpus(machines)  # the costs and the measured speed-ups come from these runs
    if mixed:
        text += f"\n**Mixed machines**: {mixed}; the expected speed-ups hold for none of them exactly.\n"
    write_json_atomically(args.folder / f"{name}.json",
                          {"seeds": seeds, "costs_from": source, "mixed_machines": mixed, "drafts": table})
    write_text_atomically(args.folder / f"{name}.md", text)
    print(text)


if __name__ == "__main__":
    main()
