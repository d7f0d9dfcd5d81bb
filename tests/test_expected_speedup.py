"""The three expected-speed-up formulas against numbers worked out by hand (Leviathan et al. 2023, eq. 1 and
its generalisation to a measured verification cost), so that the tests that use them may call them.

Hand computation for alpha = 0.5, gamma = 3: expected tokens per block (1 - 0.5^4) / (1 - 0.5) = 1.875.
  draft 0.1 s, verification 1.0 s, one-token target step 1.0 s: 1.875 / (3 * 0.1 + 1.0) = 1.442307...
  the same with a verification of 1.2 s: 1.875 / (0.3 + 1.2) = 1.25 exactly
  alpha = 1: every proposal accepted, 4 tokens per block: 4 / 1.3 = 3.076923...
  alpha = 0: one token per block, 1 / 1.3 = 0.769230...
"""

from __future__ import annotations

import pytest

from adaspec.commands.bench_real import expected_speedup as bench_real_speedup
from adaspec.diagnostics.checks import best_gamma, expected_speedup
from adaspec.evaluation.cost import expected_speedups


def test_the_cost_ratio_formula():
    assert expected_speedup(0.5, 3, 0.1) == pytest.approx(1.4423076923)
    assert expected_speedup(1.0, 3, 0.1) == pytest.approx(3.0769230769)
    assert expected_speedup(0.0, 3, 0.1) == pytest.approx(0.7692307692)


def test_the_measured_verification_cost_formula():
    assert bench_real_speedup(0.5, 3, 0.1, 1.0, 1.0) == pytest.approx(1.4423076923)
    assert bench_real_speedup(0.5, 3, 0.1, 1.2, 1.0) == pytest.approx(1.25)
    assert bench_real_speedup(1.0, 3, 0.1, 1.0, 1.0) == pytest.approx(3.0769230769)
    assert bench_real_speedup(0.5, 3, 0.2, 2.4, 2.0) == pytest.approx(1.25)  # only the ratios to the target step count


def test_the_tau_formula_per_gamma():
    got = expected_speedups({"3": 1.875, "1": 1.5}, draft_1_s=0.1, target_1_s=1.0, verify_s={"3": 1.2, "1": 1.0})
    assert got == {"3": pytest.approx(1.25), "1": pytest.approx(1.5 / 1.1)}


def test_the_best_gamma_maximises_the_formula():
    # alpha 0.6, c 0.1, gamma 1..4: 0.64 / 0.44 = 1.4545, 0.784 / 0.48 = 1.6333, 0.8704 / 0.52 = 1.6738,
    # 0.92224 / 0.56 = 1.6469 (by hand): the best is 3
    assert best_gamma(0.6, 0.1) == 3
    assert expected_speedup(0.6, 3, 0.1) == pytest.approx(0.8704 / 0.52)
