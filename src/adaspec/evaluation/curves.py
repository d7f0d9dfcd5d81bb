"""PNG plots of the evaluation: the per-position rejection curve and acceptance against gamma.

Figures are made with `matplotlib.figure.Figure` and rendered by the Agg canvas, so no GUI backend
and no pyplot global state is involved; files are written atomically.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from adaspec.toolkit import write_bytes_atomically

REJECTION_PNG = "reject_rate_curve.png"
ALPHA_VS_GAMMA_PNG = "alpha_vs_gamma.png"


def rejection_curve(row: dict[str, Any]) -> tuple[list[int], list[float]]:
    """(positions i, reject_rate_at/i) of one draft's results, positions 1.. in order."""
    positions = sorted(int(key.rsplit("/", 1)[1]) for key in row if key.startswith("reject_rate_at/"))
    return positions, [_num(row[f"reject_rate_at/{i}"]) for i in positions]


def alpha_curve(row: dict[str, Any]) -> tuple[list[int], list[float]]:
    """(gammas, alpha) of one draft's acceptance-against-gamma sweep."""
    sweep = row.get("acceptance_vs_gamma", {}).get("by_gamma", {})
    gammas = sorted(int(g) for g in sweep)
    return gammas, [_num(sweep[str(g)]["alpha"]) for g in gammas]


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def save_png(fig: Figure, path: Path) -> Path:
    """Render `fig` with the Agg canvas and write it to `path` atomically."""
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    write_bytes_atomically(path, buffer.getvalue())
    return path


def _line_plot(curves: dict[str, tuple[list[int], list[float]]], title: str, xlabel: str, ylabel: str) -> Figure:
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for label, (xs, ys) in curves.items():  # quantised drafts dashed: they often overlap their original
        ax.plot(xs, ys, marker="o", label=label, linestyle="--" if label.endswith("int8") else "-")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.set_ylim(0, 1.02)  # both plots show shares
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def plot_rejection_curves(results: dict[str, Any], path: Path) -> Path:
    """reject_rate_at/i against draft position i, one line per draft."""
    curves = {row["label"]: rejection_curve(row) for row in results["drafts"].values()}
    title = f"Where blocks are rejected ({results['task']}, {results['setting']})"
    return save_png(_line_plot(curves, title, "draft position i", "share of blocks first rejected at i"), path)


def plot_alpha_vs_gamma(results: dict[str, Any], path: Path) -> Path:
    """alpha against a fixed gamma, one line per draft."""
    curves = {row["label"]: alpha_curve(row) for row in results["drafts"].values()}
    title = f"Acceptance against gamma ({results['task']}, temperature {results['decode']['temperature']:g})"
    return save_png(_line_plot(curves, title, "gamma (draft tokens per block)", "alpha"), path)
