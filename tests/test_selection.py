"""Token selection: exact fractions, ties, k = 1, per-sequence and global thresholds, the official quantile
rule, soft weights."""

from __future__ import annotations

import math

import pytest
import torch

from adaspec.distill import selection
from adaspec.distill.selection import (
    RULES,
    SelectionState,
    fraction_band,
    global_cut,
    n_selected,
    select,
    soft_selection_weights,
    threshold_for_fraction,
)


@pytest.mark.parametrize("n", [1, 7, 10, 33, 100])
@pytest.mark.parametrize("k", [0.1, 0.33, 0.4, 0.5, 0.99])
def test_batch_selection_keeps_exactly_ceil_k_n_largest(n, k):
    delta = torch.randn(n, generator=torch.Generator().manual_seed(n))
    mask = select_top_k(delta, k, "batch")
    assert int(mask.sum()) == max(1, math.ceil(k * n - 1e-9))
    if mask.any() and (~mask).any():
        assert delta[mask].min() >= delta[~mask].max()


def test_ties_do_not_change_the_count_and_go_to_earlier_tokens():
    delta = torch.zeros(10)
    mask = select_top_k(delta, 0.4, "batch")
    assert mask.tolist() == [True] * 4 + [False] * 6
    delta = torch.tensor([3.0, 1.0, 1.0, 1.0, 0.0])
    assert select_top_k(delta, 0.4, "batch").tolist() == [True, True, False, False, False]


def select_top_k(delta, k, mode="batch", mask=None, threshold=None):
    return select(mode, delta, k, mask, SelectionState(threshold=threshold)).selected


def test_k_one_selects_everything_in_every_rule():
    delta = torch.randn(20)
    assert set(RULES) == {"batch", "sequence", "global", "quantile", "soft"}
    for mode in RULES:
        record = select(mode, delta, 1.0, torch.ones(1, 20, dtype=torch.bool), SelectionState(threshold=99.0))
        assert record.selected.all() and record.threshold == float(delta.min())


def test_an_unknown_rule_names_the_registered_ones():
    with pytest.raises(ValueError, match="allowed: \\['batch', 'global'"):
        select("glob", torch.randn(4), 0.5)


def test_sequence_mode_selects_within_each_sequence():
    delta = torch.tensor([10.0, 9.0, 8.0, 7.0, 0.1, 0.2, 0.3, 0.4])
    mask = torch.tensor([[True] * 4 + [False], [False] + [True] * 4])  # two sequences of four answer tokens
    assert select_top_k(delta, 0.5, "sequence", mask).tolist() == [True, True, False, False, False, False, True, True]
    assert select_top_k(delta, 0.5, "batch").tolist() == [True] * 4 + [False] * 4


def test_global_mode_uses_the_threshold():
    delta = torch.arange(10, dtype=torch.float)
    threshold = threshold_for_fraction(delta, 0.3)
    assert threshold == 7.0
    assert select_top_k(delta, 0.3, "global", threshold=threshold).tolist() == [False] * 7 + [True] * 3
    with pytest.raises(ValueError, match="threshold"):
        select_top_k(delta, 0.3, "global")


def test_n_selected_bounds():
    assert n_selected(0, 0.4) == 0 and n_selected(5, 0.01) == 1 and n_selected(10, 0.4) == 4


# ---------------------------------------------------------------- selection=quantile: the official rule


def official_mask(delta: torch.Tensor, k: float) -> torch.Tensor:
    """The official compute_loss, transcribed: threshold at the (1 - k) quantile, keep dL >= threshold."""
    return delta >= torch.quantile(delta, 1 - k)


@pytest.mark.parametrize("n", list(range(1, 41)) + [101, 256, 1001])
@pytest.mark.parametrize("k", [0.4, 0.3, 0.33])
def test_quantile_mode_is_the_official_rule(n, k):
    delta = torch.randn(n, generator=torch.Generator().manual_seed(1000 + n))
    mask = select_top_k(delta, k, "quantile")
    assert torch.equal(mask, official_mask(delta, k))
    if mask.any() and (~mask).any():
        assert delta[mask].min() > delta[~mask].max()
    if k == 0.4 and n % 5 != 1:  # k = 0.4: floor(0.4 n + 0.6) tokens, not ceil(0.4 n), up to float32 ranks
        assert int(mask.sum()) == math.floor(0.4 * n + 0.6)


def test_quantile_mode_keeps_one_token_fewer_than_batch_mode_when_n_is_3_mod_5():
    for n in (3, 8, 13, 98):
        delta = torch.randn(n, generator=torch.Generator().manual_seed(n))
        assert int(select_top_k(delta, 0.4, "quantile").sum()) == math.ceil(0.4 * n) - 1
        assert int(select_top_k(delta, 0.4, "batch").sum()) == math.ceil(0.4 * n)
    # and, through float32 rank arithmetic, sometimes when n = 1 mod 5: 0.6 * 100 rounds above 60
    delta = torch.randn(101, generator=torch.Generator().manual_seed(0))
    assert int(select_top_k(delta, 0.4, "quantile").sum()) == 40 == int(official_mask(delta, 0.4).sum())


def test_quantile_mode_keeps_every_tied_token():
    assert select_top_k(torch.zeros(10), 0.4, "quantile").all()  # batch mode keeps 4 of them
    delta = torch.tensor([3.0, 1.0, 1.0, 1.0, 0.0])
    assert select_top_k(delta, 0.4, "quantile").tolist() == [True, True, True, True, False]
    assert select_top_k(torch.zeros(0), 0.4, "quantile").numel() == 0


def test_quantile_beyond_torch_quantile_limit_interpolates_the_same_way(monkeypatch):
    delta = torch.randn(5003, generator=torch.Generator().manual_seed(7))
    expected = torch.quantile(delta, 1 - 0.4)
    monkeypatch.setattr(selection, "TORCH_QUANTILE_LIMIT", 100)  # take the kthvalue path
    assert torch.equal(selection.quantile_threshold(delta, 0.4), expected)


# ---------------------------------------------------------------- selection=soft


@pytest.mark.parametrize("n", [1, 7, 10, 33, 100])
def test_soft_weights_tend_to_the_hard_top_k_and_sum_to_its_count(n):
    delta = torch.randn(n, generator=torch.Generator().manual_seed(n))
    delta[: n // 3] = delta[0]  # ties too: ranked like select_top_k, the earlier token first
    hard = select_top_k(delta, 0.4, "batch")
    torch.testing.assert_close(soft_selection_weights(delta, 0.4, 1e-4), hard.float(), atol=1e-6, rtol=0)
    assert torch.equal(soft_selection_weights(delta, 0.4, 1e-6), hard.float())
    warm = soft_selection_weights(delta, 0.4, 0.1)
    torch.testing.assert_close(warm.sum(), torch.tensor(float(n_selected(n, 0.4))))
    assert (warm > 0).all()
    larger = delta[:, None] > delta[None, :]  # monotone in dL: a larger dL never weighs less
    assert (warm[:, None] >= warm[None, :])[larger].all()


def test_soft_weights_flatten_to_the_mean_weight_at_high_temperature():
    delta = torch.randn(50, generator=torch.Generator().manual_seed(3))
    weights = soft_selection_weights(delta, 0.4, 1e4)
    torch.testing.assert_close(weights, torch.full((50,), 0.4), atol=1e-4, rtol=0)
    assert soft_selection_weights(delta, 1.0, 0.05).eq(1).all()


# ---------------------------------------------------------------- selection=global: the band


def test_global_cut_keeps_the_shared_threshold_inside_the_band_and_cuts_the_batch_outside_it():
    delta = torch.arange(100, dtype=torch.float)  # k = 0.3: the band is [0.15, 0.6]
    assert fraction_band(0.3) == (0.15, 0.6) and fraction_band(0.7) == (0.35, 1.0)
    assert global_cut(delta, 0.3, 50.0) == (50.0, False)  # selects 0.5
    assert global_cut(delta, 0.3, 85.0) == (85.0, False)  # selects exactly 0.15
    assert global_cut(delta, 0.3, 95.0) == (70.0, True)  # 0.05: the batch's own top 30 %
    assert global_cut(delta, 0.3, 10.0) == (70.0, True)  # 0.9
