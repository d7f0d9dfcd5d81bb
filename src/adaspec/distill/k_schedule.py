"""`distill.k_schedule`: the selection ratio k as a function of the optimiser step.

constant: k throughout. linear: 1.0 at step 0 (every answer token, as DistillSpec), falling linearly to k
at step `ramp_steps(total, frac)` = round(frac * total) (at least 1), then k. Starting from full
distillation lets the draft learn the easy tokens before selection drops them.
"""

from __future__ import annotations

from adaspec.config.schema import KSchedule


def ramp_steps(total_steps: int, frac: float) -> int:
    """The first step at which a linear schedule reaches its final k."""
    return max(1, round(frac * total_steps))


def k_at_step(k: float, step: int, total_steps: int, schedule: str | KSchedule, frac: float) -> float:
    if str(schedule) == KSchedule.constant.value or k >= 1.0:
        return k
    if str(schedule) != KSchedule.linear.value:
        raise ValueError(f"unknown k schedule {schedule!r}; allowed: {[s.value for s in KSchedule]}")
    ramp = ramp_steps(total_steps, frac)
    if step >= ramp:
        return k
    return 1.0 - (1.0 - k) * step / ramp
