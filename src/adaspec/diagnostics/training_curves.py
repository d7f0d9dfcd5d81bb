"""Learning curves of trained stages: the validation KL and the acceptance monitor's greedy alpha against
optimiser steps, read from each stage folder's `logs/metrics.csv`, drawn as panels sharing the step axis (the
alpha panel only where a run ran the monitor).

`settled_step` says where a curve stops paying: the first logged step whose value is within `share` of the
best the run reached (lowest KL, highest alpha), the figure a step budget is chosen from.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from adaspec.artefacts import paths
from adaspec.diagnostics.measure import logged
from adaspec.evaluation.curves import save_png

# column -> (axis label, whether higher is better)
CURVES = {"val/kl": ("validation KL(target || draft)", False),
          "monitor/alpha": ("greedy alpha (acceptance monitor)", True)}


def read_curves(folder: Path, finished: bool) -> dict[str, list[list[float]]]:
    """{column: [[optimiser steps done, value], ...] in step order} of every column of CURVES the run logged.

    Validations during training log at the step count less one, the monitor at the step count; a finished run's
    last validation is the saved weights' (after early stopping the best ones, not the last), so it is left out.
    """
    with open(folder / "logs" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    validations = [[int(float(r["step"])) + 1, float(r["val/kl"])] for r in rows if r.get("val/kl")]
    readings = {int(float(r["step"])): float(r["monitor/alpha"]) for r in rows if r.get("monitor/alpha")}
    return {"val/kl": validations[:-1] if finished else validations,
            "monitor/alpha": [[step, value] for step, value in sorted(readings.items())]}


def settled_step(points: list[list[float]], higher_is_better: bool, share: float = 0.02) -> int | None:
    """The first step whose value is within `share` (relative) of the run's best; None for an empty curve."""
    if not points:
        return None
    best = max(v for _, v in points) if higher_is_better else min(v for _, v in points)
    for step, value in points:
        if abs(value - best) <= share * abs(best):
            return int(step)
    return None  # unreachable: the best point itself is within


def run_summary(folder: Path) -> dict[str, Any]:
    """The curves of one stage folder with what its metrics.json says about the run."""
    metrics_file = paths.final(folder) / "metrics.json"
    curves = read_curves(folder, finished=metrics_file.is_file())
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    speeds = sorted(logged(folder, "train/tokens_per_s"))
    return {
        "folder": str(folder),
        "finished": metrics_file.is_file(),
        "steps": metrics.get("steps"),
        "train_seconds": metrics.get("train_seconds"),
        "tokens_per_s_median": speeds[len(speeds) // 2] if speeds else None,
        "curves": curves,
        "settled_step": {c: settled_step(curves[c], higher) for c, (_, higher) in CURVES.items()},
    }


def drawn_curves(runs: dict[str, dict[str, Any]]) -> list[str]:
    """The columns of CURVES that some run logged (runs without the acceptance monitor get no alpha panel), or
    the validation KL's alone when none did."""
    return [column for column in CURVES if any(run["curves"][column] for run in runs.values())] or ["val/kl"]


def plot_training_curves(runs: dict[str, dict[str, Any]], title: str, path: Path) -> Path:
    """One panel per column of `drawn_curves`, one line per run (label -> run_summary)."""
    columns = drawn_curves(runs)
    fig = Figure(figsize=(7, 3 * len(columns)))
    axes = fig.subplots(len(columns), 1, sharex=True, squeeze=False)[:, 0]
    for ax, column in zip(axes, columns, strict=True):
        label = CURVES[column][0]
        for name, run in runs.items():
            points = run["curves"][column]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_title(title)
    axes[0].legend()
    axes[-1].set_xlabel("optimiser step")
    return save_png(fig, path)
