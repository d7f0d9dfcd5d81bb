"""The sweeps' PNGs: acceptance against k, and tau and speed-up against gamma (fixed and adaptive)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from adaspec.evaluation.curves import save_png


def plot_k_sweep(task: str, results: dict[str, Any], path: Path) -> Path:
    """alpha and accept_rate of each draft of a k-sweep evaluation against its k."""
    rows = sorted(results["drafts"].values(), key=lambda r: r["k"])
    ks = [r["k"] for r in rows]
    fig = Figure(figsize=(5.5, 3.6))
    ax = fig.add_subplot()
    for metric, marker in (("alpha", "o"), ("accept_rate", "s")):
        ax.plot(ks, [r[metric] for r in rows], marker=marker, label=metric)
    ax.set_xlabel("k (fraction of tokens trained on; 1.0 = DistillSpec)")
    ax.set_ylabel("acceptance")
    ax.set_title(
        f"{task}: acceptance against k (gamma {results['decode']['gamma']}, seed {results['config']['seed']})"
    )
    ax.grid(alpha=0.3)
    ax.legend()
    return save_png(fig, path)


def plot_gamma_sweep(
    task: str, fixed: dict[int, dict[str, Any]], adaptive: dict[str, Any] | None, path: Path
) -> Path:
    """tau and wall-clock speed-up against gamma for each draft; the adaptive policy as a dashed line."""
    gammas = sorted(fixed)
    names = list(fixed[gammas[0]]["drafts"])
    fig = Figure(figsize=(10, 3.6))
    for i, metric in enumerate(("tau", "speedup_vs_target")):
        ax = fig.add_subplot(1, 2, i + 1)
        for name in names:
            label = fixed[gammas[0]]["drafts"][name]["label"]
            line = ax.plot(
                gammas, [fixed[g]["drafts"][name][metric] for g in gammas], marker="o", label=label
            )[0]
            if adaptive is not None and name in adaptive["drafts"]:
                ax.axhline(
                    adaptive["drafts"][name][metric],
                    color=line.get_color(),
                    ls="--",
                    label=f"{label}, adaptive",
                )
        ax.set_xlabel("gamma (draft tokens per block)")
        ax.set_ylabel(
            {"tau": "tau (tokens per target call)", "speedup_vs_target": "speed-up vs target-only"}[metric]
        )
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    fig.suptitle(f"{task}: tau and speed-up against gamma")
    return save_png(fig, path)
