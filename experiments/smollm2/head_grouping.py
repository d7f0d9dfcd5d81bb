"""Issue 46: `make demo-real`'s stage 2 (the reference head) with and without stage.group_by_length, back to back
in one process tree, alone on the cores: wall time, tokens/s, peak memory, and what the head learnt (val/kl, the
acceptance monitor's greedy alpha).

    .venv/bin/python experiments/smollm2/head_grouping.py [--group 4] [--collect-only]

Runs demo-real's own stage 2 (`make -n demo-real`) as it is, then the same with `stage.group_by_length=N
stage.tag=grouped`; each skips itself when finished (`resume=true`), so --collect-only (or a rerun) reads what
is there. Needs demo-real's earlier steps (target, answers, teacher cache). Writes
bench/results/head-grouping-ref.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
from pathlib import Path

from adaspec.machine import describe_machine
from adaspec.toolkit import write_json_atomically

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "outputs" / "gsm8k" / "smollm2" / "seed0"
OUT = ROOT / "bench" / "results" / "head-grouping-ref.json"


def stage2_command() -> list[str]:
    steps = subprocess.run(["make", "-n", "--no-print-directory", "demo-real"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    return shlex.split(next(s for s in steps if "commands.train stage=ref " in s))


def summary(folder: Path) -> dict:
    """What the run measured: its metrics.json, the last logged tokens/s and the last monitor reading."""
    metrics = json.loads((folder / "final" / "metrics.json").read_text())
    with open(folder / "logs" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    speeds = [float(r["train/tokens_per_s"]) for r in rows if r.get("train/tokens_per_s")]
    alphas = [(int(r["step"]), float(r["monitor/alpha"])) for r in rows if r.get("monitor/alpha")]
    return {"train_seconds": metrics["train_seconds"], "steps": metrics["steps"],
            "tokens_per_s_last": speeds[-1], "tokens_per_s_median": sorted(speeds)[len(speeds) // 2],
            "peak_memory_mb": metrics["peak_memory_mb"], "val/kl": metrics["val/kl"],
            "monitor_alpha_last": alphas[-1][1] if alphas else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", type=int, default=4, help="stage.group_by_length of the grouped run")
    parser.add_argument("--collect-only", action="store_true")
    args = parser.parse_args()
    command = stage2_command()
    runs = {"plain": (command, SEED / "ref-eagle3-target-answers"),
            "grouped": (command + [f"stage.group_by_length={args.group}", "stage.tag=grouped"],
                        SEED / "ref-eagle3-grouped-target-answers")}
    if not args.collect_only:
        for argv, _ in runs.values():
            subprocess.run(argv, cwd=ROOT, check=True)
    results = {name: summary(folder) | {"command": " ".join(argv)} for name, (argv, folder) in runs.items()}
    plain, grouped = results["plain"], results["grouped"]
    payload = {"machine": describe_machine(), "runs": results,
               "speedup_train_seconds": plain["train_seconds"] / grouped["train_seconds"],
               "speedup_tokens_per_s_median": grouped["tokens_per_s_median"] / plain["tokens_per_s_median"]}
    write_json_atomically(OUT, payload)
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
