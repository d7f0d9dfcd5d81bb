"""Prompt lookup as a kind of draft: the n-gram rule, exact greedy and sampled decoding through the unchanged
loop, and a replay equal to the real loop although it proposes fewer than gamma tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from adaspec.decoding import AdaptiveGamma, FixedGamma, speculative_generate, target_generate
from adaspec.drafts import PromptLookupDraft
from adaspec.drafts.prompt_lookup import lookup
from adaspec.evaluation.replay import replay
from tests.decoding.conftest import tiny_model

VOCAB = 16  # a small vocabulary: a random target's greedy text repeats itself, which lookup exploits


@pytest.mark.parametrize(
    ("ids", "gamma", "expected"),
    [
        ([4, 1, 2, 8, 3, 1, 2, 9, 4, 1, 2], 2, [8, 3]),  # the longest n-gram wins over a more recent shorter one
        ([1, 2, 5, 1, 2, 6, 1, 2], 3, [6, 1, 2]),  # among equal n-grams, the most recent occurrence
        ([5, 6, 5], 4, [6, 5]),  # the continuation stops at the end of the context
        ([1, 2, 3], 4, []),  # no earlier occurrence of any suffix: no proposal
        ([1, 2, 1], 0, []),
        ([7], 3, []),
    ],
)
def test_lookup_proposes_what_followed_the_longest_most_recent_match(ids, gamma, expected):
    assert lookup(ids, gamma, max_ngram_size=3) == expected


def test_min_ngram_size_ignores_shorter_matches():
    assert lookup([1, 2, 5, 3, 2], 2, max_ngram_size=3, min_ngram_size=1) == [5, 3]
    assert lookup([1, 2, 5, 3, 2], 2, max_ngram_size=3, min_ngram_size=2) == []
    with pytest.raises(ValueError, match="min_ngram_size"):
        PromptLookupDraft(max_ngram_size=2, min_ngram_size=3)


@pytest.fixture(scope="module")
def target():
    return tiny_model(3, vocab=VOCAB, init_std=0.3)


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(7)
    return [torch.randint(0, VOCAB, (1, 2 + i % 9), generator=gen) for i in range(24)]


POLICIES = {"gamma1": lambda: FixedGamma(1), "gamma4": lambda: FixedGamma(4), "adaptive": lambda: AdaptiveGamma(4, 4)}


@pytest.mark.parametrize("policy", POLICIES)
def test_greedy_output_is_the_targets_and_the_replay_walks_the_same_blocks(target, prompts, policy):
    draft = PromptLookupDraft(max_ngram_size=3)
    accepted = short_blocks = 0
    for i, ids in enumerate(prompts):
        eos = 5 if i % 3 == 0 else None
        reference = target_generate(target, ids, max_new_tokens=40, eos_token_id=eos)
        real = speculative_generate(target, draft, ids, gamma_policy=POLICIES[policy](), max_new_tokens=40,
                                    eos_token_id=eos)
        assert real.tokens == reference.tokens
        width = draft.verify_width(target.config.vocab_size)
        replayed = replay(reference.tokens, draft.greedy_blocks(ids, reference.tokens, width),
                          policy=POLICIES[policy](), prompt_len=ids.shape[1], max_new_tokens=40, eos_token_id=eos)
        assert replayed.blocks == real.blocks and replayed.gamma_trace == real.gamma_trace
        assert replayed.draft_calls == real.draft_calls and replayed.target_calls == real.target_calls
        accepted += sum(b.accepted for b in real.blocks)
        short_blocks += sum(p < POLICIES[policy]().next_gamma(0) for p in real.gamma_trace)
    # the repetitive text gets accepted proposals, and some blocks had fewer proposals than gamma (or none)
    assert accepted > 0 and (policy == "adaptive" or short_blocks > 0)


def test_fewer_tokens_per_target_call_without_lookup_matches(target):
    """A prompt whose text never repeats in the first block: lookup proposes nothing and the block is a plain
    target step (one token per call)."""
    draft = PromptLookupDraft()
    session = draft.start(torch.tensor([[1, 2, 3]]), VOCAB)
    proposals, probs = session.propose(torch.tensor([1, 2, 3]), 5, 0.0, None)
    assert proposals.numel() == 0 and probs is None
    proposals, probs = session.propose(torch.tensor([1, 2, 3, 1, 2]), 5, 1.0, None)
    assert proposals.tolist() == [3, 1, 2] and torch.equal(probs, torch.eye(VOCAB)[[3, 1, 2]])


def test_sampled_decoding_draws_from_the_target(target):
    """With a deterministic proposal (q one-hot) verification accepts with p(x) and otherwise draws from p
    without x: the first emitted token is distributed as the target's next-token distribution."""
    prompt = torch.tensor([[3, 4, 3, 4, 3]])  # lookup proposes 4, 3, ... after it
    with torch.inference_mode():
        p = torch.softmax(target(input_ids=prompt).logits[0, -1].double(), -1).numpy()
    draft = PromptLookupDraft()
    gen = torch.Generator().manual_seed(0)
    n = 3000
    first = [speculative_generate(target, draft, prompt, gamma_policy=FixedGamma(2), max_new_tokens=2,
                                  eos_token_id=None, temperature=1.0, generator=gen).tokens[0] for _ in range(n)]
    counts = np.bincount(first, minlength=VOCAB).astype(float)
    expected = p / p.sum() * n
    keep = expected >= 5
    counts = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    assert chisquare(counts, expected).pvalue > 1e-3
    # the test can fail: a verifier that always accepted the proposal (4) would emit it every time
    assert p[4] < 0.5 and 0 < first.count(4) < n


def test_hf_assisted_generation_runs_prompt_lookup_with_the_targets_greedy_output(target, prompts):
    from adaspec.evaluation.hf_assisted import hf_assisted_generate

    draft = PromptLookupDraft(max_ngram_size=2)
    for ids in prompts[:4]:
        reference = target_generate(target, ids, max_new_tokens=20, eos_token_id=None)
        hf = hf_assisted_generate(target, draft, ids, gamma=3, max_new_tokens=20, eos_token_id=None, pad_token_id=0)
        assert hf.tokens == reference.tokens
