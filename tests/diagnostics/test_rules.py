"""The diagnostics' rules on hand-made numbers: the schedule from its config, the advice guard, gamma."""

from __future__ import annotations

import re

import pytest

from adaspec.diagnostics import checks
from adaspec.diagnostics.advice import guarded, settings_named
from adaspec.diagnostics.cost_ratio import CostRatio, median_interval, summarise
from adaspec.diagnostics.schedule import ConfiguredSchedule, first_logged_mismatch


def cost(median: float, ci_low: float, ci_high: float) -> CostRatio:
    return CostRatio(median, ci_low, ci_high, ci_low, ci_high, calls=64, threads=1, clock="thread CPU time")


DEMO = ConfiguredSchedule(steps=90, lr=2e-3, warmup_frac=0.1, min_lr_ratio=0.1, decay_end_frac=0.9)


def logged_every(schedule: ConfiguredSchedule, n: int) -> dict[int, float]:
    """What Lightning logs with trainer.log_every_n_steps=n: the rate at steps n-1, 2n-1, ..."""
    return {s: schedule.lr * schedule.multiplier(s) for s in range(n - 1, schedule.steps, n)}


def test_the_demo_schedule_logged_every_10_steps_is_judged_from_its_config():
    logged = logged_every(DEMO, 10)
    # the warmup ends before the first logged value, so the log peaks at its first value ("peak at 0 %")
    assert max(logged.values()) == logged[min(logged)] == DEMO.lr
    verdict = checks.lr_schedule("ref", DEMO, first_logged_mismatch(DEMO, logged))
    assert verdict.status == "ok" and verdict.action == ""
    assert verdict.value.startswith("warmup 9 of 90 steps (10%), last lr 0.10x peak")


def test_a_schedule_without_warmup_is_told_the_setting_that_fixes_it():
    no_warmup = ConfiguredSchedule(steps=90, lr=2e-3, warmup_frac=0.0, min_lr_ratio=0.1, decay_end_frac=0.9)
    verdict = checks.lr_schedule("ref", no_warmup)
    assert verdict.status == "warn" and "warmup 0 of 90" in verdict.value
    assert "stage.warmup_frac=0.1" in verdict.action


def test_a_run_too_short_for_the_configured_warmup_is_not_told_to_set_it():
    short = ConfiguredSchedule(steps=4, lr=2e-3, warmup_frac=0.1, min_lr_ratio=0.1, decay_end_frac=0.9)
    verdict = checks.lr_schedule("ref", short)
    assert verdict.status == "warn" and "4 steps are too few" in verdict.action
    assert "warmup_frac=" not in verdict.action


def test_a_high_floor_and_a_log_that_contradicts_the_config_are_flagged():
    high = ConfiguredSchedule(steps=90, lr=2e-3, warmup_frac=0.1, min_lr_ratio=0.5, decay_end_frac=0.9)
    assert "stage.min_lr_ratio=0.1" in checks.lr_schedule("ref", high).action
    unfinished = ConfiguredSchedule(steps=90, lr=2e-3, warmup_frac=0.1, min_lr_ratio=0.1, decay_end_frac=1.0)
    assert checks.lr_schedule("ref", unfinished).status == "ok"  # the cosine ends at 0.10x on the last step
    # trained at lr 1e-3 while config.yaml says 2e-3 (a resume with another stage.lr)
    halved = {s: v / 2 for s, v in logged_every(DEMO, 10).items()}
    mismatch = first_logged_mismatch(DEMO, halved)
    assert mismatch is not None and mismatch[0] == 9
    verdict = checks.lr_schedule("ref", DEMO, mismatch)
    assert verdict.status == "warn" and "not trained with the config it records" in verdict.action


def test_the_guard_drops_advice_already_in_force_and_keeps_the_rest():
    cfg = {"gamma": 5, "stage": {"warmup_frac": 0.1, "min_lr_ratio": 0.5, "lr": 0.001}}
    verdict = checks.Verdict(
        "ref", "warn", "", "", "set stage.warmup_frac=0.1; decay further: stage.min_lr_ratio=0.1; try stage.lr=1e-3"
    )
    (guarded_verdict,) = guarded([verdict], cfg)
    assert guarded_verdict.action == (
        "decay further: stage.min_lr_ratio=0.1 (stage.warmup_frac is already 0.1, stage.lr is already 1e-3)"
    )
    assert settings_named(guarded_verdict.action) == [("stage.min_lr_ratio", "0.1")]
    (gamma_verdict,) = guarded([checks.Verdict("d", "warn", "", "", "use gamma=5: expected 1.20x")], cfg)
    assert settings_named(gamma_verdict.action) == [] and "gamma is already 5" in gamma_verdict.action
    command = checks.Verdict("d", "skip", "not trained", "", 'make stage3 ARGS="k=0.4"')
    assert guarded([command], {"k": 0.4}) == [command]  # a command, not a setting


def test_gamma_advice_states_expected_speed_ups_against_target_only_decoding():
    # the case: the old report said "use gamma=1 (expected 2.07x faster)", the ratio of two expectations
    c = cost(0.5, 0.49, 0.51)
    verdict = checks.gamma_choice("d", 0.3, c, 5, 100)
    at_1, at_5 = checks.expected_speedup(0.3, 1, 0.5), checks.expected_speedup(0.3, 5, 0.5)
    assert round(at_1, 2) == 0.87 and round(at_5, 2) == 0.41
    assert verdict.status == "warn"
    assert verdict.action.startswith("use gamma=1: expected 0.87x target-only speed instead of 0.41x")
    assert "no gamma beats target-only decoding" in verdict.action
    assert "gamma=5: expected 0.41x target-only speed; best gamma 1: 0.87x" in verdict.value
    good = checks.gamma_choice("d", 0.9, cost(0.05, 0.049, 0.051), 5, 100)
    numbers = re.findall(r"([\d.]+)x target-only", good.value)
    assert numbers == [f"{checks.expected_speedup(0.9, 5, 0.05):.2f}"]


def test_no_gamma_advice_from_a_noisy_cost_ratio():
    noisy = cost(0.5, 0.3, 0.65)  # the median's 95 % interval is 70 % of it wide
    assert noisy.too_noisy and not cost(0.5, 0.46, 0.55).too_noisy  # the rule: at most 20 % wide
    for verdict in (checks.gamma_choice("d", 0.3, noisy, 5, 100), checks.larger_draft("d", 0.3, noisy, 5)):
        assert verdict.status == "skip" and "too noisy" in verdict.action
        assert settings_named(verdict.action) == []
    assert "c 0.500 (95% CI 0.300-0.650" in checks.gamma_choice("d", 0.3, noisy, 5, 100).value


def test_the_median_interval_narrows_with_more_calls():
    spread = [0.3 + 0.01 * i for i in range(41)]  # 0.30 .. 0.70, median 0.50
    few, many = summarise(spread[::4], 1, "cpu"), summarise(spread, 1, "cpu")
    assert few.median == pytest.approx(0.5) and many.median == pytest.approx(0.5)
    assert few.q1 < few.median < few.q3 and many.ci_low < 0.5 < many.ci_high
    assert many.relative_ci < few.relative_ci and many.calls == 41
    assert median_interval([1.0] * 39 + [5.0]) == (1.0, 1.0)  # one outlier does not move it
