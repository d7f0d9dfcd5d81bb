"""Log the collected comparison to Weights & Biases (`make paper ARGS="logger=wandb"`): the sweep plots,
the per-draft table and every paired difference, in one run per collection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from adaspec.paper.aggregate import METRICS
from adaspec.toolkit import wandb_enabled


def log_paper(logger: DictConfig, root: Path, summary: dict[str, Any], images: list[Path]) -> str | None:
    """One W&B run under `root` (paths.root); returns its directory, or None when W&B is off
    (logger.wandb.enabled=false)."""
    if not wandb_enabled(logger):
        return None
    wb = logger.wandb
    import wandb  # slow to import, and only needed when W&B is on

    root.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=wb.project,
        entity=wb.entity,
        name="paper",
        job_type="paper",
        dir=str(root),
        mode=wb.mode,
        config={"tasks": list(summary)},
    )
    try:
        table = wandb.Table(
            columns=["task", "draft", *(f"{m}/{s}" for m in METRICS for s in ("mean", "std"))]
        )
        for task, s in summary.items():
            for row, d in s["drafts"].items():
                table.add_data(task, row, *(d[m][s_] for m in METRICS for s_ in ("mean", "std")))
        logged: dict[str, Any] = {"paper/drafts": table}
        logged.update({f"paper/{path.stem}": wandb.Image(str(path)) for path in images})
        run.log(logged)
        for task, s in summary.items():
            for c in s["comparisons"]:
                run.summary.update({f"{task}/{c['name']}/{m}": c["difference"][m]["mean"] for m in METRICS})
        return str(Path(run.dir).parent)
    finally:
        run.finish()
