"""Gamma policies: fixed, adaptive thresholds and window, HF heuristic, long-context reduction, config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from adaspec.decoding import (
    AdaptiveGamma,
    DecodeConfig,
    FixedGamma,
    GammaPolicy,
    HFHeuristicGamma,
    build_gamma_policy,
)
from adaspec.toolkit import compose_config


def test_fixed():
    policy = FixedGamma(4)
    policy.update(4, 0)
    assert policy.next_gamma(10) == 4
    with pytest.raises(ValueError):
        FixedGamma(0)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: FixedGamma(5, **kw),
        lambda **kw: HFHeuristicGamma(5, **kw),
        lambda **kw: AdaptiveGamma(base=5, **kw),
    ],
)
def test_long_context_reduction(make):
    policy = make()
    assert policy.next_gamma(2048) == 5  # threshold itself is not "longer than"
    assert policy.next_gamma(2049) == 4
    policy = make(long_context_threshold=100, long_context_reduction=2)
    assert policy.next_gamma(100) == 5
    assert policy.next_gamma(101) == 3
    with pytest.raises(ValueError):
        make(long_context_reduction=3)


def test_long_context_floor_is_one():
    assert FixedGamma(1).next_gamma(10_000) == 1
    assert FixedGamma(2, long_context_reduction=2).next_gamma(10_000) == 1


def test_adaptive_thresholds():
    policy = AdaptiveGamma(base=5, window=8)
    assert policy.next_gamma(0) == 5  # no data yet: base
    policy.update(5, 5)
    assert policy.reject_rate() == 0.0 and policy.next_gamma(0) == 7  # < 0.2: base + 2
    policy.reset()
    policy.update(5, 0)
    assert policy.reject_rate() == 1.0 and policy.next_gamma(0) == 4  # > 0.4: base - 1
    policy.reset()
    policy.update(5, 4)  # 4 accepted, 1 rejected -> 0.2 exactly: base
    assert policy.reject_rate() == pytest.approx(0.2) and policy.next_gamma(0) == 5
    policy.reset()
    policy.update(5, 2)
    policy.update(2, 1)  # 3 accepted, 2 rejected -> 0.4 exactly: base
    assert policy.reject_rate() == pytest.approx(0.4) and policy.next_gamma(0) == 5
    policy.update(5, 5)  # 8 accepted, 2 rejected -> 0.2: base
    assert policy.next_gamma(0) == 5
    policy.update(4, 4)  # 12 accepted, 2 rejected -> 0.14: base + 2
    assert policy.next_gamma(0) == 7
    policy.update(0, 0)  # blocks without proposals are ignored
    assert policy.reject_rate() == pytest.approx(2 / 14)


def test_adaptive_bounds():
    assert _after(AdaptiveGamma(base=7), 5, 5) == 8  # min(base + 2, max_gamma=8)
    assert _after(AdaptiveGamma(base=3), 5, 0) == 3  # max(base - 1, min_gamma=3)
    assert _after(AdaptiveGamma(base=5, max_gamma=6), 5, 5) == 6


def _after(policy, proposed, accepted):
    policy.update(proposed, accepted)
    return policy.next_gamma(0)


def test_adaptive_window_forgets_old_blocks():
    policy = AdaptiveGamma(base=5, window=3)
    for _ in range(3):
        policy.update(5, 0)
    assert policy.next_gamma(0) == 4
    for _ in range(2):
        policy.update(5, 5)  # window: 1 bad + 2 good blocks -> 1 / 11
    assert policy.next_gamma(0) == 7
    policy.update(5, 5)
    assert policy.reject_rate() == 0.0


def test_hf_heuristic():
    policy = HFHeuristicGamma(3)
    assert policy.next_gamma(0) == 3
    assert _after(policy, 3, 3) == 5
    assert _after(policy, 5, 5) == 7
    assert _after(policy, 7, 2) == 6
    for _ in range(10):
        policy.update(3, 0)
    assert policy.next_gamma(0) == 1
    assert policy.next_gamma(5000) == 1
    policy.update(0, 0)  # ignored
    assert policy.next_gamma(0) == 1
    policy.reset()
    assert policy.next_gamma(0) == 3


def test_build_gamma_policy():
    ns = SimpleNamespace(
        policy="adaptive", gamma=6, adaptive_window=4, long_context_threshold=10, long_context_reduction=2
    )
    policy = build_gamma_policy(ns)
    assert isinstance(policy, AdaptiveGamma) and policy.base == 6 and policy._recent.maxlen == 4
    assert policy.next_gamma(11) == 4
    assert isinstance(build_gamma_policy(DecodeConfig(policy=GammaPolicy.hf, gamma=2)), HFHeuristicGamma)
    fixed = build_gamma_policy(DecodeConfig(gamma=3))
    assert isinstance(fixed, FixedGamma) and fixed.next_gamma(0) == 3
    with pytest.raises(ValueError, match="unknown gamma policy"):
        build_gamma_policy(SimpleNamespace(**{**vars(ns), "policy": "nope"}))


@pytest.mark.parametrize(
    ("name", "cls"), [("fixed", FixedGamma), ("adaptive", AdaptiveGamma), ("hf", HFHeuristicGamma)]
)
def test_config_files(name, cls):
    decode = compose_config(f"decode={name}", "gamma=4").decode  # real Hydra: the files' defaults lists apply
    assert decode.policy == GammaPolicy[name] and decode.gamma == 4  # `${gamma}` reads the top-level key
    assert (decode.temperature, decode.max_new_tokens, decode.adaptive_window) == (0.0, 128, 8)
    assert (decode.long_context_threshold, decode.long_context_reduction, decode.draft_quant.value) == (
        2048,
        1,
        "none",
    )
    policy = build_gamma_policy(decode)
    assert isinstance(policy, cls) and policy.next_gamma(0) == 4
