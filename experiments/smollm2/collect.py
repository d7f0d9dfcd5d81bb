"""Copy what a real-target run measured into the repository: per stage its metrics, resolved config and
training log, the last acceptance-monitor reading, and the evaluation's results folder.

    python experiments/smollm2/collect.py --root OUTPUTS --arm target-answers [--suffix -target-answers]

OUTPUTS is the run's paths.root; the artefacts themselves (weights, caches) stay there. Writes
experiments/results/smollm2/<arm>/ and prints one line per stage.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from pathlib import Path

from adaspec.toolkit import write_json_atomically


def last_monitor(log: Path) -> dict[str, float]:
    """The last row of the training log that carries the acceptance monitor's readings."""
    found: dict[str, float] = {}
    with open(log) as fh:
        for row in csv.DictReader(fh):
            if row.get("monitor/alpha"):
                found = {k: float(v) for k, v in row.items() if k.startswith("monitor/") and v} | {"step": int(row["step"])}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="the run's paths.root")
    parser.add_argument("--arm", required=True, help="results folder name")
    parser.add_argument("--suffix", default="", help="stage folder suffix, e.g. -target-answers")
    parser.add_argument("--task", default="gsm8k")
    parser.add_argument("--out", type=Path, default=Path("experiments/results/smollm2"))
    args = parser.parse_args()
    seed = args.root / args.task / "smollm2" / "seed0"
    out = args.out / args.arm
    summary = {"root": str(args.root), "stages": {}}
    for stage in [f"ref{args.suffix}", f"draft-k0.4{args.suffix}", f"draft-k1{args.suffix}"]:
        folder = seed / stage
        if not (folder / "final" / "metrics.json").is_file():
            continue
        (out / stage).mkdir(parents=True, exist_ok=True)
        for name in ("metrics.json", "config.yaml", "meta.json"):
            shutil.copy(folder / "final" / name, out / stage / name)
        shutil.copy(folder / "logs" / "metrics.csv", out / stage / "metrics.csv")
        metrics = json.loads((folder / "final" / "metrics.json").read_text())
        summary["stages"][stage] = {"train_seconds": metrics["train_seconds"], "steps": metrics["steps"],
                                    "val/kl": metrics.get("val/kl"), "monitor": last_monitor(folder / "logs" / "metrics.csv")}
        print(stage, summary["stages"][stage])
    evals = seed / f"eval{args.suffix}"
    if evals.is_dir():
        for setting in sorted(p for p in evals.iterdir() if p.is_dir()):
            shutil.copytree(setting, out / "eval" / setting.name, dirs_exist_ok=True)
            summary.setdefault("eval", []).append(setting.name)
    write_json_atomically(out / "summary.json", summary, sort_keys=True)


if __name__ == "__main__":
    main()
