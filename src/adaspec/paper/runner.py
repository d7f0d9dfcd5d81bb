"""Execute a plan's steps in one process, skipping every step whose result already exists.

Stages skip themselves when their finished artefact has the same config (`adaspec.training.pipeline.run_stage`);
a stage interrupted mid-training is resumed from its last checkpoint; the teacher cache checks its
identity; an evaluation is skipped when its results folder holds the same evaluation (and refused when
it holds another, `adaspec.evaluation.identity`). So rerunning `make paper` after a crash continues
where it stopped. Every step's wall time goes to `<paths.root>/paper_log.jsonl`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import DictConfig

from adaspec.artefacts import paths
from adaspec.errors import UserError
from adaspec.paper.plan import Step
from adaspec.toolkit import checked_config
from adaspec.training.stage_specs import stage_dir

LOG = "paper_log.jsonl"


def compose_step(step: Step, extra: list[str]) -> DictConfig:
    """The step's config, validated: the steps run in this process, not through the entry points."""
    return checked_config(*step.overrides, *extra)


def _interrupted(folder: Path) -> bool:
    """A stage `folder` with a checkpoint and no finished artefact: a run was cut off there."""
    return paths.last_checkpoint(folder).exists() and not (paths.final(folder) / "meta.json").is_file()


def execute(step: Step, cfg: DictConfig) -> bool:
    """Run one step; False when its result already existed."""
    # training, the cache and evaluation are imported by the kind of step that needs them (--dry-run and
    # --collect-only load none of them)
    layout = paths.of(cfg)
    if step.kind in ("train", "pretrain"):
        from adaspec.training.pipeline import run_stage

        folder = stage_dir(layout)
        if _interrupted(folder):
            cfg.resume = True
        elif (paths.final(folder) / "meta.json").is_file():
            run_stage(cfg)  # checks the fingerprint: skips when up to date, refuses another config
            return False
        run_stage(cfg)
        return True
    if step.kind == "cache":
        from adaspec.distill.cache_build import build_cache  # see above

        existed = layout.teacher_cache_dir().exists()
        build_cache(cfg)  # checks the cache's identity when it exists
        return not existed
    if step.kind == "eval":
        # see above
        from adaspec.evaluation.report import RESULTS_JSON
        from adaspec.evaluation.run import results_dir, run_evaluation

        existed = (results_dir(layout, cfg.decode, cfg.eval.name) / RESULTS_JSON).is_file()
        run_evaluation(cfg, progress=False)  # skips the same evaluation, refuses another in its folder
        return not existed or bool(cfg.overwrite)
    raise ValueError(f"unknown step kind {step.kind!r}")


def _stage0_switched_off(step: Step, extra: list[str]) -> bool:
    """A stage-0 step whose run has no stage 0 (e.g. `pretrain=none` among `extra`), read from the config
    the next stage composes (a stage-0 config without a corpus does not validate)."""
    if step.kind != "pretrain":
        return False
    reader = tuple("stage=ref" if o.startswith("stage=") else o for o in step.overrides)
    return compose_step(Step("train", reader), extra).pretrain.corpus == "none"


def without_stage0(steps: list[Step], extra: list[str]) -> list[Step]:
    """The plan less its stage-0 steps when the run has no stage 0 (the comparison without it)."""
    kept = [s for s in steps if not _stage0_switched_off(s, extra)]
    if len(kept) < len(steps):
        print(f"[paper] no stage 0 (pretrain=none): {len(steps) - len(kept)} stage-0 steps skipped", flush=True)
    return kept


def run_plan(steps: list[Step], extra: list[str]) -> None:
    steps = without_stage0(steps, extra)
    started = time.perf_counter()
    for i, step in enumerate(steps, 1):
        cfg = compose_step(step, extra)
        label = f"[paper] step {i}/{len(steps)} ({time.perf_counter() - started:.0f}s): {step.command()}"
        print(label, flush=True)
        t0 = time.perf_counter()
        try:
            ran = execute(step, cfg)
        except UserError as err:
            raise UserError(
                f"{err}\n  in {label}\n  rerun it alone with: {step.command()} {' '.join(extra)}"
            ) from err
        seconds = time.perf_counter() - t0
        root = Path(cfg.paths.root)
        root.mkdir(parents=True, exist_ok=True)
        with open(root / LOG, "a") as log:
            entry = {
                "step": step.command(),
                "extra": extra,
                "ran": ran,
                "seconds": round(seconds, 1),
                "time": time.time(),
            }
            log.write(json.dumps(entry) + "\n")
        print(f"[paper] {'done' if ran else 'up to date'} in {seconds:.0f}s", flush=True)
