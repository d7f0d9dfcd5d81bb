"""Learning-rate schedule: linear warmup, cosine decay to a floor, then the floor.

With the defaults (warmup_frac 0.1, min_lr_ratio 0.1, decay_end_frac 0.9) the rate rises over the
first 10 % of steps, follows a cosine down to 0.1x the peak at 90 % of steps, and stays at 0.1x over
the last 10 %.
"""

from __future__ import annotations

import math


def lr_multiplier(
    step: int, total_steps: int, warmup_frac: float, min_lr_ratio: float, decay_end_frac: float
) -> float:
    """Factor applied to the peak learning rate at optimiser step `step` (0-based)."""
    warmup = round(warmup_frac * total_steps)
    decay_end = max(warmup + 1, round(decay_end_frac * total_steps))
    if step < warmup:
        return (step + 1) / warmup
    if step >= decay_end:
        return min_lr_ratio
    progress = (step - warmup) / (decay_end - warmup)
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
