"""Log the evaluation to Weights & Biases (when `logger.wandb.enabled`): a table, line plots, the PNGs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from adaspec.artefacts.paths import Layout
from adaspec.evaluation.curves import alpha_curve, rejection_curve
from adaspec.evaluation.report import TABLE_COLUMNS
from adaspec.toolkit import wandb_enabled

SUMMARY_KEYS = ("alpha", "accept_rate", "tau", "speedup_vs_target", "speedup_vs_hf_assisted", "tokens_per_s")


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _line_series(wandb, curves: dict[str, tuple[list[int], list[float]]], title: str, xname: str):
    xs = sorted({x for xs_, _ in curves.values() for x in xs_})
    ys = [[dict(zip(cx, cy, strict=True)).get(x, math.nan) for x in xs] for cx, cy in curves.values()]
    return wandb.plot.line_series(xs=xs, ys=ys, keys=list(curves), title=title, xname=xname)


def log_to_wandb(logger: DictConfig, layout: Layout, results: dict[str, Any], folder: Path,
                 images: dict[str, Path]) -> str | None:
    """One W&B run per evaluation (offline unless `logger.wandb.mode=online`), named after `layout`'s task, model
    and seed; returns its directory."""
    if not wandb_enabled(logger):
        return None
    wb = logger.wandb
    import wandb  # slow to import, and only needed when W&B is on

    metric = results["metric"]
    run = wandb.init(
        project=wb.project,
        entity=wb.entity,
        name=f"{layout.task}/{layout.model}/seed{layout.seed}/eval/{results['setting']}",
        group=f"{layout.task}/{layout.model}",
        job_type="evaluate",
        dir=str(folder),
        mode=wb.mode,
        config=results["config"],
    )
    try:
        rows = list(results["drafts"].items())
        columns = ["draft", "k", "draft_quant", *(key for key, _ in TABLE_COLUMNS), metric, "greedy_mismatches"]
        table = wandb.Table(columns=columns)
        for name, row in rows:
            table.add_data(name, row["k"], row["draft_quant"], *(_plain(row.get(c)) for c in columns[3:]))
        labels = {row["label"]: row for _, row in rows}
        logged = {"eval/results": table, **{f"eval/{name}_png": wandb.Image(str(path)) for name, path in images.items()}}
        for key, curve, title, xname in [
            ("eval/reject_rate_curve", rejection_curve, "reject_rate_at/i by draft position", "draft position i"),
            ("eval/alpha_vs_gamma", alpha_curve, "alpha against gamma", "gamma"),
        ]:
            curves = {label: curve(row) for label, row in labels.items()}
            if any(xs for xs, _ in curves.values()):  # no sweep with eval.gamma_sweep_prompts=0 when sampling
                logged[key] = _line_series(wandb, curves, title, xname)
        run.log(logged)
        for name, row in rows:
            run.summary.update({f"{name}/{key}": _plain(row.get(key)) for key in (*SUMMARY_KEYS, metric)})
        run.summary.update({f"target/{metric}": _plain(results["target"].get(metric))})
        return str(Path(run.dir).parent)
    finally:
        run.finish()
