"""Speculative decoding with a reduced-vocabulary draft stays exact: greedy output equals the target's,
and sampled output is distributed as the target's."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from adaspec.decoding import FixedGamma, aggregate, speculative_generate, target_generate
from adaspec.drafts import ModelDraft
from adaspec.models.draft_vocab import DraftVocab, most_frequent_vocab, shrink_to_draft_vocab, token_counts
from tests.decoding.conftest import noisy_copy, tiny_model
from tests.decoding.test_speculative import (
    P_THRESHOLD,
    SAMPLING_V,
    chi2_pvalue,
    exact_two_token_distribution,
    max_new,
    sample_two_tokens,
)

VOCAB = 64


@pytest.fixture(scope="module")
def target():
    return tiny_model(0, vocab=VOCAB)


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(99)
    return [torch.randint(0, VOCAB, (1, 1 + i % 12), generator=gen) for i in range(30)]


@pytest.fixture(scope="module")
def greedy_refs(target, prompts):
    return [
        target_generate(target, x, max_new_tokens=max_new(i), eos_token_id=None).tokens
        for i, x in enumerate(prompts)
    ]


@pytest.fixture(scope="module")
def reduced(target, greedy_refs):
    """A draft close to the target, cut to the 24 tokens the target emits most (of 64), and its map."""
    vocab = most_frequent_vocab(token_counts(greedy_refs, VOCAB), size=24, keep_ids=[0], fallback_target_id=0)
    return shrink_to_draft_vocab(noisy_copy(target, scale=0.1, seed=3), vocab), vocab


def test_greedy_output_equals_the_targets(target, prompts, greedy_refs, reduced):
    draft, vocab = reduced
    results = []
    for i, x in enumerate(prompts):
        r = speculative_generate(
            target, ModelDraft(draft, vocab), x, gamma_policy=FixedGamma(4), max_new_tokens=max_new(i),
            eos_token_id=None,
        )  # fmt: skip
        assert r.tokens == greedy_refs[i], f"prompt {i}"
        results.append(r)
    emitted = torch.tensor([t for r in results for t in r.tokens])
    assert not vocab.contains(emitted).all()  # the target's corrections include tokens the draft lacks
    assert not vocab.contains(torch.cat([x[0] for x in prompts])).all()  # and so do the prompts
    # the mapped proposals are the right tokens: 0.28 here, 0.06 if draft ids were taken for target ids
    assert aggregate(results, 4)["alpha"] > 0.2


def test_a_map_of_every_token_changes_nothing(target, prompts):
    full_draft = noisy_copy(target, scale=0.1, seed=3)
    vocab = DraftVocab(torch.arange(VOCAB), target_size=VOCAB, fallback_target_id=0)
    draft = shrink_to_draft_vocab(noisy_copy(target, scale=0.1, seed=3), vocab)
    for i, x in enumerate(prompts[:10]):
        kwargs = dict(gamma_policy=FixedGamma(3), max_new_tokens=max_new(i), eos_token_id=None)
        expected = speculative_generate(target, ModelDraft(full_draft), x, **kwargs)
        got = speculative_generate(target, ModelDraft(draft, vocab), x, **kwargs)
        assert (got.tokens, got.blocks) == (expected.tokens, expected.blocks)


def test_moving_a_draft_moves_its_map_once(reduced):
    """`Draft.to` carries the id map with the weights, so drafting maps tokens where they are instead of copying
    the map to their device at every token (the meta device stands in for an accelerator)."""
    draft, vocab = reduced
    moved = ModelDraft(copy.deepcopy(draft), vocab).to("meta")
    assert moved.vocab.draft_to_target.device.type == next(moved.model.parameters()).device.type == "meta"
    assert vocab.draft_to_target.device.type == "cpu"  # the caller's map is not moved under it
    assert moved.vocab.to("meta") is moved.vocab  # what each drafted token's mapping asks: no copy


def test_reduced_draft_needs_its_map(target, prompts, reduced):
    with pytest.raises(ValueError, match="give ModelDraft its DraftVocab"):
        speculative_generate(
            target, ModelDraft(reduced[0]), prompts[0], gamma_policy=FixedGamma(2), max_new_tokens=4,
            eos_token_id=None,
        )  # fmt: skip


@pytest.fixture(scope="module")
def sampling_pair():
    """Target over 6 tokens; a different draft cut to tokens {1, 3, 4}: the target's mass on 0, 2, 5 can
    only be emitted as corrections, from the residual max(p - q, 0) with q = 0 there."""
    target = tiny_model(10, vocab=SAMPLING_V, init_std=0.2)
    vocab = DraftVocab(torch.tensor([1, 3, 4]), target_size=SAMPLING_V, fallback_target_id=1)
    draft = shrink_to_draft_vocab(tiny_model(11, vocab=SAMPLING_V, layers=1, init_std=0.2), vocab)
    return target, draft, vocab


def wrong_scatter(self, draft_values, fill=0.0):
    """Places the draft's N probabilities on target ids 0..N-1 instead of the mapped ids."""
    out = draft_values.new_full((*draft_values.shape[:-1], self.target_size), fill)
    out[..., : self.size] = draft_values
    return out


def test_sampling_is_distributed_as_the_target(sampling_pair, monkeypatch):
    target, draft, vocab = sampling_pair
    prompt, temperature = torch.tensor([[3]]), 0.7
    exact = exact_two_token_distribution(target, prompt, temperature)
    excluded_mass = exact.reshape(SAMPLING_V, SAMPLING_V)[[0, 2, 5]].sum()
    assert excluded_mass > 0.2  # the test needs the target to want tokens the draft cannot propose

    def spec(gen):
        return speculative_generate(
            target, ModelDraft(draft, vocab), prompt, gamma_policy=FixedGamma(2), max_new_tokens=3,
            eos_token_id=None, temperature=temperature, generator=gen,
        ).tokens  # fmt: skip

    samples = sample_two_tokens(spec, 800)
    assert chi2_pvalue(samples, exact) > P_THRESHOLD
    assert np.isin(samples // SAMPLING_V, [0, 2, 5]).any()
    # The same test fails when the draft's probabilities are scattered onto the wrong target ids.
    monkeypatch.setattr(DraftVocab, "scatter", wrong_scatter)
    assert chi2_pvalue(sample_two_tokens(spec, 200), exact) < P_THRESHOLD
