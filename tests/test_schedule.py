"""Learning-rate schedule: warmup, cosine to 0.1x, flat over the last 10 % of steps."""

from __future__ import annotations

import pytest

from adaspec.stages.schedule import lr_multiplier


def curve(total=200):
    return [lr_multiplier(s, total, warmup_frac=0.1, min_lr_ratio=0.1, decay_end_frac=0.9) for s in range(total)]


def test_warmup_rises_to_the_peak():
    lr = curve()
    assert lr[0] == pytest.approx(1 / 20)
    assert all(a < b for a, b in zip(lr[:20], lr[1:20], strict=False))
    assert lr[19] == pytest.approx(1.0)


def test_cosine_decays_to_a_tenth_and_stays_over_the_last_ten_percent():
    lr = curve()
    decay = lr[20:180]
    assert all(a >= b for a, b in zip(decay, decay[1:], strict=False))
    assert lr[100] == pytest.approx(0.55, abs=0.01)
    assert all(x == pytest.approx(0.1) for x in lr[180:])


def test_short_runs_are_well_defined():
    for total in (1, 2, 3):
        lr = curve(total)
        assert all(0.1 - 1e-9 <= x <= 1.0 for x in lr)
