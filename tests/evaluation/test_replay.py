"""The greedy replay gives the real decoding loop's blocks for any gamma policy, from one draft forward."""

from __future__ import annotations

import pytest
import torch

from adaspec.decoding import (
    AdaptiveGamma,
    FixedGamma,
    HFHeuristicGamma,
    speculative_generate,
    target_generate,
)
from adaspec.drafts import ModelDraft
from adaspec.evaluation.replay import replay
from tests.decoding.conftest import noisy_copy, tiny_model

POLICIES = [
    lambda: FixedGamma(1),
    lambda: FixedGamma(3),
    lambda: FixedGamma(8),
    lambda: AdaptiveGamma(base=4, window=3),
    lambda: HFHeuristicGamma(2),
    lambda: FixedGamma(5, long_context_threshold=12, long_context_reduction=2),
]


@pytest.fixture(scope="module")
def target():
    return tiny_model(seed=0)


def prompt(seed: int) -> torch.Tensor:
    return torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(seed))


def late_eos(target, ids, first: int) -> int | None:
    """A token the target first emits at index >= `first`: used as EOS, generation stops there."""
    tokens = target_generate(target, ids, max_new_tokens=20, eos_token_id=None).tokens
    return next((t for i, t in enumerate(tokens) if i >= first and t not in tokens[:i]), None)


def check_replay(target, draft, ids, make_policy, eos, max_new_tokens=20):
    ref = target_generate(target, ids, max_new_tokens=max_new_tokens, eos_token_id=eos)
    real = speculative_generate(target, draft, ids, gamma_policy=make_policy(), max_new_tokens=max_new_tokens,
                                eos_token_id=eos)
    assert real.tokens == ref.tokens
    blocks = draft.greedy_blocks(ids, ref.tokens, draft.verify_width(target.config.vocab_size))
    got = replay(ref.tokens, blocks, policy=make_policy(), prompt_len=ids.shape[1], max_new_tokens=max_new_tokens,
                 eos_token_id=eos)
    assert got.blocks == real.blocks
    assert got.gamma_trace == real.gamma_trace
    assert (got.target_calls, got.draft_calls, got.tokens) == (real.target_calls, real.draft_calls, real.tokens)
    return got


@pytest.mark.parametrize("make_policy", POLICIES)
@pytest.mark.parametrize("with_eos", [False, True])
def test_replay_equals_the_real_loop(target, make_policy, with_eos):
    draft = ModelDraft(noisy_copy(target, scale=0.1, seed=1))  # accepts some blocks fully, rejects at various positions
    for seed in (1, 2):
        ids = prompt(seed)
        check_replay(target, draft, ids, make_policy, late_eos(target, ids, 8) if with_eos else None)


def test_replay_cuts_a_block_at_an_accepted_eos(target):
    """A perfect draft proposes the EOS itself: the real loop records a truncated block, and so does the replay."""
    truncated = 0
    for seed in range(4):
        ids = prompt(seed)
        eos = late_eos(target, ids, 3)
        for gamma in (2, 3, 5):
            got = check_replay(target, ModelDraft(target), ids, lambda g=gamma: FixedGamma(g), eos)
            assert all(b.first_reject is None for b in got.blocks)
            truncated += got.blocks[-1].truncated
    assert truncated > 0


def test_replay_of_a_perfect_draft_accepts_everything(target):
    ids = torch.tensor([[1, 2, 3]])
    ref = target_generate(target, ids, max_new_tokens=10, eos_token_id=None)
    draft = ModelDraft(target)
    got = replay(ref.tokens, draft.greedy_blocks(ids, ref.tokens, draft.verify_width(target.config.vocab_size)),
                 policy=FixedGamma(3), prompt_len=3, max_new_tokens=10, eos_token_id=None)
    assert [b.accepted for b in got.blocks] == [3, 3, 1]  # the last block is capped to the remaining tokens
    assert all(b.first_reject is None for b in got.blocks)
