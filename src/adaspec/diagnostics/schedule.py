"""The learning-rate schedule a stage artefact was trained with, rebuilt for every step from its config.

Judging the schedule from the logged values misleads when they are sparse: the demo logs every 10
steps and its 9-step warmup ends before the first logged value, so the peak seems to sit at step 0.
The artefact's `config.yaml` (stage.lr, warmup_frac, min_lr_ratio, decay_end_frac) and the step
count in its `metrics.json` give the exact value of every step instead; the logged values are only
compared with it, to catch a log that does not match the config the artefact claims.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from adaspec.stages.schedule import lr_multiplier

LOGGED_REL_TOLERANCE = 1e-3  # logged rates are float32


@dataclass(frozen=True)
class ConfiguredSchedule:
    steps: int
    lr: float
    warmup_frac: float
    min_lr_ratio: float
    decay_end_frac: float

    def multiplier(self, step: int) -> float:
        return lr_multiplier(step, self.steps, self.warmup_frac, self.min_lr_ratio, self.decay_end_frac)

    def multipliers(self) -> list[float]:
        """The factor on stage.lr at every optimiser step, 0 .. steps-1."""
        return [self.multiplier(step) for step in range(self.steps)]

    def warmup_steps(self) -> int:
        """Steps spent rising to the peak (0 when the first step already runs at the peak)."""
        values = self.multipliers()
        peak_at = values.index(max(values))
        return peak_at + 1 if peak_at > 0 else 0


def configured_schedule(final_folder: Path) -> ConfiguredSchedule | None:
    """The schedule recorded in an artefact's config.yaml and metrics.json; None if either is missing."""
    config_path, metrics_path = final_folder / "config.yaml", final_folder / "metrics.json"
    if not config_path.is_file() or not metrics_path.is_file():
        return None
    steps = json.loads(metrics_path.read_text()).get("steps")
    if not steps:
        return None
    stage = OmegaConf.load(config_path).stage
    return ConfiguredSchedule(
        steps=int(steps),
        lr=float(stage.lr),
        warmup_frac=float(stage.warmup_frac),
        min_lr_ratio=float(stage.min_lr_ratio),
        decay_end_frac=float(stage.decay_end_frac),
    )


def first_logged_mismatch(
    schedule: ConfiguredSchedule, logged: dict[int, float]
) -> tuple[int, float, float] | None:
    """(step, logged lr, configured lr) of the first logged value the configured schedule does not give."""
    for step in sorted(logged):
        if not 0 <= step < schedule.steps:
            continue
        expected = schedule.lr * schedule.multiplier(step)
        if not math.isclose(logged[step], expected, rel_tol=LOGGED_REL_TOLERANCE):
            return step, logged[step], expected
    return None
