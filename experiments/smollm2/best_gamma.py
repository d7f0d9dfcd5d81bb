"""Expected speed-up at the best gamma, per draft, over the seeds of a paper run on the real target.

    python experiments/smollm2/best_gamma.py experiments/results/smollm2-paper-stage0/smollm2_gsm8k [--costs bench/results/smollm2.json]

Each seed's main.json holds the draft's acceptance at every gamma (replayed exactly from the target's greedy
output on all prompts). With the measured seconds of the calls a block makes (the evaluation's own `costs`,
or `--costs`, a bench-real JSON from the same machine: for results written before evaluations measured
them, or measured while other work shared the cores)
`adaspec.evaluation.cost.expected_speedups` gives the speed-up each gamma would bring; this picks the best
per seed and reports its mean and 95 % interval over seeds beside the wall-clock speed-up measured at the
evaluation's own gamma. Writes best_gamma.json and best_gamma.md next to the seeds.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from adaspec.evaluation.cost import expected_speedups
from adaspec.paper.stats import describe, interval, mean_and_spread
from adaspec.toolkit import markdown_table, write_json_atomically, write_text_atomically


def costs_of(results: dict, fallback: dict | None, row: str) -> tuple[float, float, dict[str, float]]:
    """(draft one-token s, target one-token s, target verification s by gamma) for one draft row: `--costs`
    when given, else the evaluation's own."""
    if fallback is not None:
        return fallback["draft_1_s"], fallback["target_1_s"], fallback["target_verify_s"]
    if "costs" not in results:
        raise SystemExit("these results hold no call costs: pass --costs bench/results/<name>.json")
    c = results["costs"]
    return c["draft_1_s"][row], c["target_1_s"], c["target_verify_s"]


def best_gamma_table(folder: Path, fallback: dict | None) -> dict[str, dict]:
    seeds = sorted(folder.glob("seed*/main.json"))
    per_row: dict[str, dict[str, list]] = {}
    for path in seeds:
        results = json.loads(path.read_text())
        for row, d in results["drafts"].items():
            taus = {g: v["tau"] for g, v in d["acceptance_vs_gamma"]["by_gamma"].items()}
            speedups = expected_speedups(taus, *costs_of(results, fallback, row))
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
    args = parser.parse_args()
    fallback = json.loads(args.costs.read_text())["costs"] if args.costs else None
    table = best_gamma_table(args.folder, fallback)
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
    text += f"\n\nSeeds: {', '.join(seeds)}; {source}.\n"
    write_json_atomically(args.folder / "best_gamma.json", {"seeds": seeds, "costs_from": source, "drafts": table})
    write_text_atomically(args.folder / "best_gamma.md", text)
    print(text)


if __name__ == "__main__":
    main()
