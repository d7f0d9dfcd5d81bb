"""The capacity experiment's answer (issue 31): AdaSPEC - DistillSpec alpha against draft parameters, one
curve per loss, and the table under it, from the tasks of one `GROUPS` entry as `collect` summarised them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from adaspec.evaluation.curves import save_png
from adaspec.paper.stats import interval, mean_and_spread
from adaspec.toolkit import markdown_table

LOSSES = {"": "forward KL", "nla": "nla: -log alpha", "lk": "LK hybrid"}  # the arms' stage.tag -> label
ADASPEC_K = 0.4
HEAD = "head"  # the size name of the EAGLE-3 head's task


def _row(tag: str, k: float) -> str:
    return f"k{k:g}" + (f"-{tag}" if tag else "")


def _difference(summary: dict[str, Any], first: str, second: str) -> dict[str, Any] | None:
    found = [c for c in summary["comparisons"] if (c["first"], c["second"]) == (first, second)]
    return found[0]["difference"]["alpha"] if found else None


def capacity_rows(summary: dict[str, dict[str, Any]], task_names: list[str]) -> list[dict[str, Any]]:
    """One row per (draft size, decoding, loss) summarised: the draft's parameters, DistillSpec's and AdaSPEC's
    alpha, their paired difference and DistillSpec with this loss against DistillSpec with the forward KL;
    greedy from the task's main evaluation, t=1 from its sampled one (`collect`'s "<task> t=1")."""
    rows = []
    for name in task_names:
        for decoding, key in (("greedy", name), ("t=1", f"{name} t=1")):
            if key not in summary:
                continue
            task = summary[key]
            for tag, label in LOSSES.items():
                full, selected = _row(tag, 1.0), _row(tag, ADASPEC_K)
                if full not in task["drafts"] or selected not in task["drafts"]:
                    continue
                rows.append({
                    "task": name,
                    "size": name.rsplit("_", 1)[-1],
                    "parameters": task["drafts"][full].get("parameters"),
                    "decoding": decoding,
                    "loss": label,
                    "seeds": task["seeds"],
                    "distillspec_alpha": task["drafts"][full]["alpha"],
                    "adaspec_alpha": task["drafts"][selected]["alpha"],
                    "adaspec_minus_distillspec": _difference(task, selected, full),
                    "versus_forward_kl": _difference(task, full, "k1") if tag else None,
                })
    return rows


def capacity_markdown(rows: list[dict[str, Any]]) -> str:
    header = ["draft", "parameters", "decoding", "loss", "seeds", "DistillSpec alpha",
              f"AdaSPEC k={ADASPEC_K:g} alpha", "AdaSPEC - DistillSpec [95 %]",
              "DistillSpec: this loss - forward KL [95 %]"]

    def diff(d: dict[str, Any] | None) -> str:
        return f"{mean_and_spread(d, '+')}{interval(d, '+')}" if d else "-"

    body = [
        [r["size"], f"{r['parameters'] / 1e6:.1f}M" if r["parameters"] else "-", r["decoding"], r["loss"],
         len(r["seeds"]),
         mean_and_spread(r["distillspec_alpha"]), mean_and_spread(r["adaspec_alpha"]),
         diff(r["adaspec_minus_distillspec"]), diff(r["versus_forward_kl"])]
        for r in rows
    ]
    return markdown_table(header, body)


def plot_capacity(rows: list[dict[str, Any]], title: str, path: Path) -> Path:
    """Left: AdaSPEC - DistillSpec greedy alpha (95 % interval where there are seeds for one) against
    parameters, one curve of independent drafts per loss and the head as a star; right: each arm's alpha
    (DistillSpec solid, AdaSPEC dashed)."""
    rows = [r for r in rows if r["decoding"] == "greedy"]
    fig = Figure(figsize=(11, 4))
    gap, level = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for label in LOSSES.values():
        mine = sorted((r for r in rows if r["loss"] == label and r["parameters"]), key=lambda r: r["parameters"])
        if not mine:
            continue
        # independent drafts make the curve; a head (another kind of draft) is a point of its own colour's star
        heads = [r for r in mine if r["size"] == HEAD]
        mine = [r for r in mine if r["size"] != HEAD]
        x = [r["parameters"] / 1e6 for r in mine]
        diffs = [r["adaspec_minus_distillspec"] for r in mine]
        means = [d["mean"] if d else float("nan") for d in diffs]
        errors = [[m - d["ci95"][0] if d and d["ci95"] else 0.0 for m, d in zip(means, diffs, strict=True)],
                  [d["ci95"][1] - m if d and d["ci95"] else 0.0 for m, d in zip(means, diffs, strict=True)]]
        line = gap.errorbar(x, means, yerr=errors, marker="o", capsize=3, label=label)[0]
        level.plot(x, [r["distillspec_alpha"]["mean"] for r in mine], marker="o", color=line.get_color(),
                   label=f"DistillSpec, {label}")
        level.plot(x, [r["adaspec_alpha"]["mean"] for r in mine], marker="s", ls="--", color=line.get_color(),
                   label=f"AdaSPEC k={ADASPEC_K:g}, {label}")
        for r, xi, yi in zip(mine, x, means, strict=True):
            gap.annotate(r["size"], (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
        for r in heads:
            d = r["adaspec_minus_distillspec"]
            if d:
                gap.plot([r["parameters"] / 1e6], [d["mean"]], marker="*", ms=11, color=line.get_color())
                gap.annotate("EAGLE-3 head", (r["parameters"] / 1e6, d["mean"]), textcoords="offset points",
                             xytext=(4, -10), fontsize=7)
            level.plot([r["parameters"] / 1e6], [r["distillspec_alpha"]["mean"]], marker="*", ms=11,
                       color=line.get_color())
    gap.axhline(0.0, color="grey", lw=0.8)
    for ax, ylabel in ((gap, "AdaSPEC - DistillSpec alpha"), (level, "alpha (greedy)")):
        ax.set_xscale("log")
        ax.set_xlabel("draft parameters (millions)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    gap.legend(fontsize=7)
    level.legend(fontsize=6)
    fig.suptitle(title)
    return save_png(fig, path)
