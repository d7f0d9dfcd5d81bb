"""Issue 48 (3): sampling without a host sync. The exponential race (adaspec.decoding.sampling) draws each
token in proportion to its weight, like torch.multinomial; on the CPU `sample` is torch.multinomial itself,
draw for draw, so results sampled here before the race existed are reproduced."""

from __future__ import annotations

import pytest
import torch

from adaspec.decoding.sampling import greedy, sample
from tests.decoding.test_speculative import P_THRESHOLD, chi2_pvalue

WEIGHTS = torch.tensor([5.0, 3.0, 1.5, 0.5, 2.0])  # unnormalised
DRAWS = 20_000


def draws(pick) -> torch.Tensor:
    return pick(WEIGHTS.expand(DRAWS, -1), torch.Generator().manual_seed(0))[:, 0]


def test_the_race_draws_in_proportion_to_the_weights_and_never_an_impossible_token():
    drawn = draws(lambda w, g: sample(w, g, race=True))
    assert chi2_pvalue(drawn.numpy(), WEIGHTS.numpy()) > P_THRESHOLD
    impossible = torch.tensor([1e-3, 0.0, 1e-3]).expand(DRAWS, -1)
    assert not (sample(impossible, torch.Generator().manual_seed(1), race=True) == 1).any()


@pytest.mark.parametrize("wrong", ["argmax", "uniform race"])
def test_the_fit_check_fails_a_wrong_sampler(wrong):
    def pick(weights, generator):
        if wrong == "argmax":
            return weights.argmax(-1, keepdim=True)
        exponentials = torch.empty_like(weights).exponential_(1, generator=generator)
        return ((weights > 0).float() / exponentials).argmax(-1, keepdim=True)  # the weights forgotten

    assert chi2_pvalue(draws(pick).numpy(), WEIGHTS.numpy()) < P_THRESHOLD


def test_on_the_cpu_it_is_multinomial_draw_for_draw_in_any_shape():
    weights = torch.rand(3, 4, 50)
    expected = torch.multinomial(weights.reshape(-1, 50), 1, generator=torch.Generator().manual_seed(3))
    assert torch.equal(sample(weights, torch.Generator().manual_seed(3)), expected.reshape(3, 4, 1))
    one = torch.rand(50)
    assert torch.equal(sample(one, torch.Generator().manual_seed(4)),
                       torch.multinomial(one, 1, generator=torch.Generator().manual_seed(4)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_greedy_is_the_argmax_ties_included(dtype):
    """`greedy` takes a bfloat16 argmax through float32 for speed; it must pick the same index, the first of tied
    maxima included (a half-precision vocabulary is full of ties)."""
    logits = torch.randn(13, 4_096, generator=torch.Generator().manual_seed(0)).to(dtype)
    logits[:, 7] = logits[:, 3] = logits.max() + 1  # a tie at the top in every row: the first wins
    assert greedy(logits).tolist() == [3] * 13
    assert torch.equal(greedy(logits), logits.argmax(-1))
    assert torch.equal(greedy(logits[0], keepdim=True), logits[0].argmax(-1, keepdim=True))
    # the negative control: an argmax that does not keep the first of tied maxima is told apart
    assert greedy(logits.flip(-1)).tolist() != [3] * 13
