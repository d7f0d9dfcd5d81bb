"""Issue 46: one of `make demo-real`'s head stages as it is and with a variant's overrides, back to back, alone on
the cores: wall time, tokens/s, peak memory, and what the head learnt (val/kl, the acceptance monitor's alpha).

    .venv/bin/python experiments/smollm2/head_variants.py --stage ref --name grouping --tag grouped stage.group_by_length=4
    .venv/bin/python experiments/smollm2/head_variants.py --stage draft --name refcache --tag refcache distill.cache_ref_kl=true

Runs demo-real's own stage (`make -n demo-real`: stage 2, or stage 3 at k=0.4) as it is, then the same with the
overrides and `stage.tag=<tag>`; each skips itself when finished (`resume=true`), so --collect-only (or a rerun)
reads what is there. Needs demo-real's earlier steps (target, answers, teacher cache; stage 3 the reference head).
Writes bench/results/head-<name>-<stage>.json.
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
FOLDERS = {"ref": "ref-eagle3{tag}-target-answers", "draft": "draft-k0.4-eagle3{tag}-target-answers"}


def stage_command(stage: str) -> list[str]:
    steps = subprocess.run(["make", "-n", "--no-print-directory", "demo-real"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    head = {"ref": "commands.train stage=ref ", "draft": "commands.train stage=draft k=0.4 "}[stage]
    return shlex.split(next(s for s in steps if head in s))


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
    parser.add_argument("--stage", choices=sorted(FOLDERS), required=True)
    parser.add_argument("--name", required=True, help="bench/results/head-<name>-<stage>.json")
    parser.add_argument("--tag", required=True, help="the variant's stage.tag (its folder)")
    parser.add_argument("--collect-only", action="store_true")
    parser.add_argument("overrides", nargs="+", help="the variant's overrides")
    args = parser.parse_args()
    command = stage_command(args.stage)
    folder = SEED / FOLDERS[args.stage]
    runs = {"plain": (command, Path(str(folder).format(tag=""))),
            args.tag: (command + [*args.overrides, f"stage.tag={args.tag}"], Path(str(folder).format(tag=f"-{args.tag}")))}
    if not args.collect_only:
        for argv, _ in runs.values():
            subprocess.run(argv, cwd=ROOT, check=True)
    results = {name: summary(folder) | {"command": " ".join(argv)} for name, (argv, folder) in runs.items()}
    plain, variant = results["plain"], results[args.tag]
    payload = {"machine": describe_machine(), "runs": results,
               "speedup_train_seconds": plain["train_seconds"] / variant["train_seconds"],
               "speedup_tokens_per_s_median": variant["tokens_per_s_median"] / plain["tokens_per_s_median"]}
    write_json_atomically(ROOT / "bench" / "results" / f"head-{args.name}-{args.stage}.json", payload)
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
