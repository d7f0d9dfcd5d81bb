"""Stage 1 on the real target (SmolLM2-135M-Instruct fine-tuned on GSM8K, the capacity experiment's
fine-tuned target) in float32 and in bfloat16 autocast: seconds per optimiser step, interleaved runs of
--steps steps each in a scratch root, read from each run's metrics.json (train_seconds: trainer.fit, so
the model's loading and saving are left out). Decides the precision and the step budget of
experiments/paper/smollm2_gsm8k_capacity_ft_target.yaml (issue 31, item 1). Run it alone on the machine.

    .venv/bin/python experiments/smollm2/finetune_precision.py [--steps 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from adaspec.toolkit import write_json_atomically

CONFIG = "paper=smollm2_gsm8k_capacity_ft_target"
PRECISIONS = ("32-true", "bf16-mixed")


def one_run(precision: str, steps: int, root: Path) -> dict:
    command = [sys.executable, "-m", "adaspec.commands.train", CONFIG, "stage=target", f"stage.max_steps={steps}",
               f"trainer.precision={precision}", f"paths.root={root}", "logger=csv"]
    subprocess.run(command, check=True)
    metrics = json.loads(next(root.glob("**/target/final/metrics.json")).read_text())
    return {"precision": precision, "steps": metrics["steps"], "train_seconds": metrics["train_seconds"],
            "seconds_per_step": round(metrics["train_seconds"] / metrics["steps"], 2),
            "train_loss": metrics.get("train/loss"), "val_ce": metrics.get("val/ce"),
            "tokens_per_s": metrics.get("train/tokens_per_s"),
            "peak_memory_mb": metrics.get("peak_memory_mb")}


def summary(runs: list[dict], steps: int, repeats: int) -> dict:
    per_step = {p: statistics.median(r["seconds_per_step"] for r in runs if r["precision"] == p)
                for p in PRECISIONS if any(r["precision"] == p for r in runs)}
    return {
        "what": "stage 1 seconds per optimiser step (16 sequences, task.max_length 256), fine-tuning "
                "SmolLM2-135M-Instruct on GSM8K",
        "config": CONFIG, "runs": runs, "median_seconds_per_step": per_step,
        "bf16_speedup": round(per_step["32-true"] / per_step["bf16-mixed"], 2) if len(per_step) == 2 else None,
        "complete": len(runs) == repeats * len(PRECISIONS),
        "machine": platform.platform(),
        "command": f"python experiments/smollm2/finetune_precision.py --steps {steps} --repeats {repeats}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/smollm2/finetune-precision.json"))
    args = parser.parse_args()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ft-precision-") as scratch:
        for repeat in range(args.repeats):
            for precision in PRECISIONS:  # interleaved, so a drift of the machine hits both alike
                runs.append(one_run(precision, args.steps, Path(scratch) / f"{precision}-{repeat}"))
                print(f"[finetune_precision] {runs[-1]}", flush=True)
                result = summary(runs, args.steps, args.repeats)
                write_json_atomically(args.out, result)  # after each run: kept if cut short
    print(f"[finetune_precision] median s/step {result['median_seconds_per_step']}; bf16 {result['bf16_speedup']}x; "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
