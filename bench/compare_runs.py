"""Compare two `make demo` output trees (e.g. before and after a refactor): every logged training value
(metrics.csv and final metrics.json, less timings), the weights hashes, and the evaluation's alpha,
accept_rate, tau, score and acceptance against gamma per draft. Prints a JSON verdict.

    python bench/compare_runs.py <before>/outputs/arith/tiny/seed0 outputs/arith/tiny/seed0
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

STAGES = ("target", "ref", "draft-k0.4", "draft-k1")
TIMING = ("tokens_per_s", "seconds", "step_s", "time", "_s", "peak_memory")  # wall-clock: moves with the load
EVAL_METRICS = ("alpha", "accept_rate", "tau", "gsm8k/exact_match", "greedy_mismatches")


def untimed(values: dict) -> dict:
    return {key: v for key, v in values.items() if not any(t in key for t in TIMING)}


def logged(path: Path) -> list[dict]:
    with open(path) as f:
        return [untimed(row) for row in csv.DictReader(f)]


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def compare(before: Path, after: Path) -> dict:
    report: dict = {"stages": {}, "eval": {}}
    same = True
    for stage in STAGES:
        rows = logged(before / stage / "logs/metrics.csv")
        row = {
            "metrics_csv_equal": rows == logged(after / stage / "logs/metrics.csv"),
            "logged_values": sum(v != "" for r in rows for v in r.values()),
            "final_metrics_equal": untimed(read(before / stage / "final/metrics.json"))
            == untimed(read(after / stage / "final/metrics.json")),
            "weights_equal": read(before / stage / "final/meta.json")["weights"]
            == read(after / stage / "final/meta.json")["weights"],
        }
        report["stages"][stage] = row
        same &= row["metrics_csv_equal"] and row["final_metrics_equal"] and row["weights_equal"]
    old, new = (read(root / "eval/greedy-g5/results.json")["drafts"] for root in (before, after))
    for name, row in old.items():
        pairs = {m: (row[m], new[name][m]) for m in EVAL_METRICS}
        equal_sweep = row["acceptance_vs_gamma"] == new[name]["acceptance_vs_gamma"]
        report["eval"][name] = {**pairs, "acceptance_vs_gamma_equal": equal_sweep}
        same &= equal_sweep and all(a == b for a, b in pairs.values())
    report["new_rows"] = sorted(set(new) - set(old))
    report["identical"] = same
    return report


if __name__ == "__main__":
    print(json.dumps(compare(Path(sys.argv[1]), Path(sys.argv[2])), indent=1))
