"""Is the preset draft data- or capacity-limited (issue 30)? Its DistillSpec alpha against the share of
stage 0's default data it distilled first, from the tasks of `GROUPS["smollm2_gsm8k_stage0_tokens"]`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from adaspec.evaluation.curves import save_png
from adaspec.paper.stats import interval, mean_and_spread
from adaspec.toolkit import markdown_table

DEFAULT_DATA = "400k characters of code + 2,000 training prompts"  # conf/pretrain/distill.yaml


def stage0_share(task_name: str) -> float:
    """The share of the default stage-0 data a task of the group distils: ..._none 0, ..._x0.25 0.25, the
    capacity experiment's preset-size task (its stage 0 as configured) 1."""
    suffix = task_name.rsplit("_", 1)[-1]
    if suffix == "none":
        return 0.0
    return float(suffix[1:]) if suffix.startswith("x") else 1.0


def stage0_rows(summary: dict[str, dict[str, Any]], task_names: list[str]) -> list[dict[str, Any]]:
    rows = [
        {"task": name, "stage0_share": stage0_share(name), "seeds": summary[name]["seeds"],
         "alpha": summary[name]["drafts"]["k1"]["alpha"], "tau": summary[name]["drafts"]["k1"]["tau"]}
        for name in task_names if name in summary and "k1" in summary[name]["drafts"]
    ]
    return sorted(rows, key=lambda r: r["stage0_share"])


def stage0_markdown(rows: list[dict[str, Any]]) -> str:
    header = [f"stage-0 data (x {DEFAULT_DATA})", "seeds", "DistillSpec alpha [95 %]", "tau"]
    body = [[f"{r['stage0_share']:g}", len(r["seeds"]), f"{mean_and_spread(r['alpha'])}{interval(r['alpha'])}",
             mean_and_spread(r["tau"])] for r in rows]
    return markdown_table(header, body)


def plot_stage0(rows: list[dict[str, Any]], path: Path) -> Path:
    fig = Figure(figsize=(5.5, 3.6))
    ax = fig.add_subplot()
    x = [r["stage0_share"] for r in rows]
    means = [r["alpha"]["mean"] for r in rows]
    low = [m - r["alpha"]["ci95"][0] if r["alpha"]["ci95"] else 0.0 for m, r in zip(means, rows, strict=True)]
    high = [r["alpha"]["ci95"][1] - m if r["alpha"]["ci95"] else 0.0 for m, r in zip(means, rows, strict=True)]
    ax.errorbar(x, means, yerr=[low, high], marker="o", capsize=3)
    ax.set_xlabel(f"stage-0 data (x {DEFAULT_DATA})", fontsize=8)
    ax.set_ylabel("DistillSpec alpha (greedy)")
    ax.set_title("Preset draft (Llama 128x4, 1.9M): alpha against stage-0 data", fontsize=9)
    ax.grid(alpha=0.3)
    return save_png(fig, path)
