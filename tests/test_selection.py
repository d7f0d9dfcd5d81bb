"""Token selection: exact fractions, ties, k = 1, per-sequence and global thresholds."""

from __future__ import annotations

import math

import pytest
import torch

from adaspec.distill.selection import n_selected, select_top_k, threshold_for_fraction


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


def test_k_one_selects_everything_in_every_mode():
    delta = torch.randn(20)
    for mode in ("batch", "sequence", "global"):
        assert select_top_k(delta, 1.0, mode, torch.zeros(20, dtype=torch.long), threshold=99.0).all()


def test_sequence_mode_selects_within_each_sequence():
    delta = torch.tensor([10.0, 9.0, 8.0, 7.0, 0.1, 0.2, 0.3, 0.4])
    seq = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert select_top_k(delta, 0.5, "sequence", seq).tolist() == [True, True, False, False, False, False, True, True]
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
