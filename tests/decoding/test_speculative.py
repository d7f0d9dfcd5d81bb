"""Speculative decoding: greedy equivalence with the target, exactness of speculative sampling, stopping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from adaspec.decoding import (
    AdaptiveGamma,
    FixedGamma,
    HFHeuristicGamma,
    aggregate,
    quantize_draft_int8,
    speculative_generate,
    target_generate,
    verify_block,
)
from adaspec.decoding import speculative as spec_mod
from adaspec.drafts import ModelDraft
from tests.decoding.conftest import noisy_copy, tiny_model

VOCAB = 64
N_PROMPTS = 50


def max_new(i: int) -> int:
    return 4 + i % 8


@pytest.fixture(scope="module")
def target():
    return tiny_model(0, vocab=VOCAB)


@pytest.fixture(scope="module")
def drafts(target):
    return {
        "disagreeing": ModelDraft(tiny_model(1, vocab=VOCAB, hidden=32, layers=1)),  # a different random model
        "identical": ModelDraft(target),
        "moderate": ModelDraft(noisy_copy(target, scale=0.2, seed=1)),  # alpha ~ 0.45
    }


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(1234)
    return [torch.randint(0, VOCAB, (1, 1 + i % 12), generator=gen) for i in range(N_PROMPTS)]


@pytest.fixture(scope="module")
def greedy_refs(target, prompts):
    return [
        target_generate(target, x, max_new_tokens=max_new(i), eos_token_id=None).tokens
        for i, x in enumerate(prompts)
    ]


def test_the_greedy_reference_is_transformers_own_greedy_generation(target, prompts):
    """target_generate, every greedy test's reference, against a second method: transformers' `generate`, which
    stops at the stop token as target_generate does (token 2 here, met by some of the prompts)."""
    stop, stopped = 2, 0
    for i, x in enumerate(prompts):
        ours = target_generate(target, x, max_new_tokens=max_new(i) + 8, eos_token_id=stop).tokens
        with torch.no_grad():
            theirs = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new(i) + 8,
                                     do_sample=False, eos_token_id=stop, pad_token_id=stop)[0, x.shape[1]:].tolist()
        assert ours == theirs, i
        stopped += ours[-1] == stop
    assert 0 < stopped < len(prompts)  # both endings: the stop token and the length limit


def check_bookkeeping(r, max_new_tokens: int) -> None:
    assert len(r.tokens) <= max_new_tokens
    assert r.target_calls == len(r.blocks) == len(r.gamma_trace)
    assert r.draft_calls == sum(r.gamma_trace)
    emitted = sum(b.accepted + (not b.truncated) for b in r.blocks)
    assert emitted == len(r.tokens)
    for b, g in zip(r.blocks, r.gamma_trace, strict=True):
        assert 0 <= b.accepted <= b.proposed <= g
        assert b.first_reject in (None, b.accepted + 1)
        assert (b.first_reject is None) == (b.truncated or b.accepted == g)


POLICIES = {
    "gamma1": lambda: FixedGamma(1),
    "gamma3": lambda: FixedGamma(3),
    "gamma5": lambda: FixedGamma(5),
    "adaptive": lambda: AdaptiveGamma(base=5, window=4),
}


@pytest.mark.parametrize("policy_name", list(POLICIES))
@pytest.mark.parametrize("draft_name", ["disagreeing", "identical", "moderate"])
def test_greedy_matches_target(target, drafts, prompts, greedy_refs, draft_name, policy_name):
    draft, policy = drafts[draft_name], POLICIES[policy_name]()
    results, policy_after = [], []
    for i, x in enumerate(prompts):
        r = speculative_generate(
            target, draft, x, gamma_policy=policy, max_new_tokens=max_new(i), eos_token_id=None
        )
        assert r.tokens == greedy_refs[i], f"prompt {i}"
        check_bookkeeping(r, max_new(i))
        results.append(r)
        policy_after.append(policy.next_gamma(0))  # the policy's choice given this generation's blocks
    stats = aggregate(results, max_gamma=8)
    if draft_name == "identical":
        assert stats["alpha"] == 1.0 and stats["accept_rate"] == 1.0
        for r in results:  # every block emits gamma + 1 tokens; only the last block's gamma is capped
            assert all(b.accepted == g for b, g in zip(r.blocks, r.gamma_trace, strict=True))
            if policy_name.startswith("gamma"):
                gamma = int(policy_name.removeprefix("gamma"))
                assert r.gamma_trace[:-1] == [gamma] * (len(r.blocks) - 1)
                assert r.target_calls == math.ceil(len(r.tokens) / (gamma + 1))
        if policy_name == "adaptive":  # no rejections: base + 2
            assert set(policy_after) == {7}
    elif draft_name == "disagreeing":
        assert stats["alpha"] < 0.2
        if policy_name == "adaptive":  # rejection rate > 0.4: base - 1
            assert np.mean([g == 4 for g in policy_after]) > 0.8
    else:
        assert 0.25 < stats["alpha"] < 0.75


def test_long_context_reduction_in_the_loop(target, drafts, prompts, greedy_refs):
    policy = FixedGamma(3, long_context_threshold=6, long_context_reduction=2)
    for i in range(12):
        r = speculative_generate(
            target,
            drafts["moderate"],
            prompts[i],
            gamma_policy=policy,
            max_new_tokens=max_new(i),
            eos_token_id=None,
        )
        assert r.tokens == greedy_refs[i]
        done = 0
        for g, b in zip(r.gamma_trace, r.blocks, strict=True):
            context = prompts[i].shape[1] + done
            assert g == min(3 if context <= 6 else 1, max_new(i) - done - 1)
            done += b.accepted + 1


def test_hf_heuristic_policy_greedy(target, drafts, prompts, greedy_refs):
    for i in range(10):
        r = speculative_generate(
            target,
            drafts["moderate"],
            prompts[i],
            gamma_policy=HFHeuristicGamma(3),
            max_new_tokens=max_new(i),
            eos_token_id=None,
        )
        assert r.tokens == greedy_refs[i]


# ---------------------------------------------------------------- stopping


def test_stops_at_eos(target, drafts, prompts):
    for draft in drafts.values():
        for i, x in enumerate(prompts[:8]):
            full = target_generate(target, x, max_new_tokens=16, eos_token_id=None).tokens
            eos = full[2 + i % 6]  # an EOS somewhere inside the continuation
            expected = full[: full.index(eos) + 1]
            assert target_generate(target, x, max_new_tokens=16, eos_token_id=eos).tokens == expected
            r = speculative_generate(
                target, draft, x, gamma_policy=FixedGamma(5), max_new_tokens=16, eos_token_id=eos
            )
            assert r.tokens == expected
            check_bookkeeping(r, 16)
            if draft.model is target:  # EOS inside an accepted block: cut, not a rejection
                assert aggregate([r], 8)["alpha"] == 1.0


def test_eos_cut_inside_accepted_block_is_not_a_rejection(target, prompts):
    full = target_generate(target, prompts[0], max_new_tokens=12, eos_token_id=None).tokens
    eos = full[1]  # second token: inside the first gamma=5 block
    r = speculative_generate(
        target, ModelDraft(target), prompts[0], gamma_policy=FixedGamma(5), max_new_tokens=12, eos_token_id=eos
    )
    k = full.index(eos) + 1
    assert r.tokens == full[:k]
    assert len(r.blocks) == 1 and r.blocks[0].truncated
    assert (r.blocks[0].proposed, r.blocks[0].accepted, r.blocks[0].first_reject) == (k, k, None)


@pytest.mark.parametrize("max_new_tokens", range(0, 14))
def test_exactly_max_new_tokens(target, prompts, max_new_tokens):
    ref = target_generate(target, prompts[3], max_new_tokens=max_new_tokens, eos_token_id=None)
    assert len(ref.tokens) == ref.target_calls == max_new_tokens
    r = speculative_generate(
        target,
        ModelDraft(target),
        prompts[3],
        gamma_policy=FixedGamma(5),
        max_new_tokens=max_new_tokens,
        eos_token_id=None,
    )
    assert r.tokens == ref.tokens
    assert not any(b.truncated for b in r.blocks)  # gamma is capped instead: blocks never overshoot
    remaining = max_new_tokens
    for g, b in zip(r.gamma_trace, r.blocks, strict=True):
        assert g == min(5, remaining - 1)
        remaining -= b.accepted + 1


def test_sampling_respects_eos_and_max_new_tokens(target, drafts, prompts):
    gen = torch.Generator().manual_seed(0)
    eos = 7
    hit_eos = 0
    for i, x in enumerate(prompts[:30]):
        r = speculative_generate(
            target,
            drafts["moderate"],
            x,
            gamma_policy=FixedGamma(4),
            max_new_tokens=max_new(i),
            eos_token_id=eos,
            temperature=1.5,
            generator=gen,
        )
        check_bookkeeping(r, max_new(i))
        assert eos not in r.tokens[:-1]
        assert r.tokens[-1] == eos or len(r.tokens) == max_new(i)
        hit_eos += r.tokens[-1] == eos
    assert hit_eos > 0


def test_rejects_batched_input(target):
    with pytest.raises(ValueError, match=r"\[1, T\]"):
        speculative_generate(
            target,
            ModelDraft(target),
            torch.zeros(2, 3, dtype=torch.long),
            gamma_policy=FixedGamma(2),
            max_new_tokens=4,
            eos_token_id=None,
        )


# ---------------------------------------------------------------- int8 draft


def test_int8_draft_keeps_greedy_output(target, prompts, greedy_refs):
    draft_fp32 = noisy_copy(target, scale=0.05, seed=2).float()
    draft = quantize_draft_int8(draft_fp32)
    assert isinstance(draft.lm_head, DynamicQuantizedLinear)  # the class is named `Linear`
    assert isinstance(draft.gpt_neox.layers[0].attention.query_key_value, DynamicQuantizedLinear)
    assert isinstance(draft.gpt_neox.layers[0].mlp.dense_4h_to_h, DynamicQuantizedLinear)
    assert type(draft_fp32.lm_head) is torch.nn.Linear  # the input model is untouched
    results = []
    for i, x in enumerate(prompts[:15]):
        r = speculative_generate(
            target, ModelDraft(draft), x, gamma_policy=FixedGamma(4), max_new_tokens=max_new(i), eos_token_id=None
        )
        assert r.tokens == greedy_refs[i]
        results.append(r)
    assert aggregate(results, 4)["alpha"] > 0.5  # quantisation keeps the draft useful


# ---------------------------------------------------------------- speculative sampling is exact

SAMPLING_V = 6
P_THRESHOLD = 1e-3


def chi2_pvalue(samples: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square goodness of fit; categories with expected count < 5 are pooled into one."""
    counts = np.bincount(samples, minlength=len(probs)).astype(float)
    probs = np.asarray(probs, dtype=np.float64)
    expected = probs / probs.sum() * len(samples)
    small = expected < 5
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    return float(chisquare(counts, expected * counts.sum() / expected.sum()).pvalue)


def toy_block(gamma: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Context-independent target rows p [gamma+1, V] and draft rows q [gamma, V], q with zeros."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(gamma + 1, SAMPLING_V, generator=gen) * 1.5, -1)
    q = torch.softmax(torch.randn(gamma, SAMPLING_V, generator=gen) * 1.5, -1)
    q[:, 0] = 0.0  # token 0 is never proposed: it can only come from the residual
    return p, q / q.sum(-1, keepdim=True)


def sample_blocks(verifier, p, q, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Run n independent blocks through ``verifier``; returns emitted tokens [n, gamma+1] and n_accepted."""
    gen = torch.Generator().manual_seed(seed)
    gamma = q.shape[0]
    proposals = torch.stack(
        [torch.multinomial(q[i], n, replacement=True, generator=gen) for i in range(gamma)], -1
    )
    n_acc, nxt = verifier(p.expand(n, -1, -1), q.expand(n, -1, -1), proposals, gen)
    emitted = torch.cat([proposals, torch.zeros(n, 1, dtype=torch.long)], -1)
    emitted.scatter_(1, n_acc.unsqueeze(-1), nxt.unsqueeze(-1))  # token n is the correction / bonus
    return emitted.numpy(), n_acc.numpy()


def always_accept(p, q, proposals, gen):
    n = torch.full(proposals.shape[:-1], proposals.shape[-1])
    return n, torch.multinomial(p[..., -1, :], 1, generator=gen).squeeze(-1)


def resample_from_p(p, q, proposals, gen):
    """Correct acceptance test, but resampling from p (not max(0, p - q)) after a rejection."""
    n, _ = verify_block(p, q, proposals, gen)
    rows = p.gather(-2, n[..., None, None].expand(*n.shape, 1, p.shape[-1])).squeeze(-2)
    return n, torch.multinomial(rows, 1, generator=gen).squeeze(-1)


@pytest.mark.parametrize("gamma", [1, 3])
def test_verify_block_samples_exactly_from_target(gamma):
    p, q = toy_block(gamma, seed=gamma)
    emitted, n_acc = sample_blocks(verify_block, p, q, n=40_000, seed=0)
    for i in range(gamma + 1):  # position i is emitted iff n_accepted >= i, and is then ~ p_i
        mask = n_acc >= i
        assert chi2_pvalue(emitted[mask, i], p[i].numpy()) > P_THRESHOLD, f"position {i}"
    # acceptance probability of proposal 1 is sum_x min(p, q)
    assert abs((n_acc >= 1).mean() - torch.minimum(p[0], q[0]).sum().item()) < 0.01


@pytest.mark.parametrize("broken", [always_accept, resample_from_p])
def test_broken_verifiers_are_detected(broken):
    p, q = toy_block(3, seed=3)
    emitted, _ = sample_blocks(broken, p, q, n=40_000, seed=0)
    assert chi2_pvalue(emitted[:, 0], p[0].numpy()) < P_THRESHOLD


def test_verify_block_identical_distributions_accepts_everything():
    p, _ = toy_block(3, seed=5)
    _, n_acc = sample_blocks(verify_block, p, p[:3], n=2_000, seed=0)
    assert (n_acc == 3).all()


@pytest.fixture(scope="module")
def sampling_models():
    # Larger init: peaked, clearly different p and q (acceptance ~0.4 at temperature 0.7).
    return (
        tiny_model(10, vocab=SAMPLING_V, init_std=0.2),
        ModelDraft(tiny_model(11, vocab=SAMPLING_V, layers=1, init_std=0.2)),
    )


def exact_two_token_distribution(model, prompt: torch.Tensor, temperature: float) -> np.ndarray:
    """p(y1, y2 | prompt) as a flat [V * V] array (index y1 * V + y2)."""
    with torch.inference_mode():
        first = torch.softmax(model(prompt).logits[0, -1].float() / temperature, -1)
        ext = torch.cat([prompt.expand(SAMPLING_V, -1), torch.arange(SAMPLING_V)[:, None]], 1)
        second = torch.softmax(model(ext).logits[:, -1].float() / temperature, -1)
    return (first[:, None] * second).flatten().double().numpy()


def sample_two_tokens(generate, n: int) -> np.ndarray:
    gen = torch.Generator().manual_seed(0)
    out = np.empty(n, dtype=np.int64)
    for k in range(n):
        tokens = generate(gen)
        out[k] = tokens[0] * SAMPLING_V + tokens[1]
    return out


def test_speculative_sampling_end_to_end(sampling_models, monkeypatch):
    target, draft = sampling_models
    prompt, temperature = torch.tensor([[3]]), 0.7
    exact = exact_two_token_distribution(target, prompt, temperature)

    def spec(gen):
        return speculative_generate(
            target,
            draft,
            prompt,
            gamma_policy=FixedGamma(2),
            max_new_tokens=3,
            eos_token_id=None,
            temperature=temperature,
            generator=gen,
        ).tokens

    def plain(gen):
        return target_generate(
            target, prompt, max_new_tokens=2, eos_token_id=None, temperature=temperature, generator=gen
        ).tokens

    # Few samples (each costs ~4 forwards): verify_block's exactness is tested with 40k samples above.
    assert chi2_pvalue(sample_two_tokens(spec, 1200), exact) > P_THRESHOLD
    assert chi2_pvalue(sample_two_tokens(plain, 400), exact) > P_THRESHOLD
    # The same test on the loop with an always-accepting verifier must fail.
    monkeypatch.setattr(spec_mod, "verify_block", always_accept)
    assert chi2_pvalue(sample_two_tokens(spec, 400), exact) < P_THRESHOLD
