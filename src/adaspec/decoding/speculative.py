"""Speculative decoding (Leviathan et al., 2023) for batch size 1, in the style of gpt-fast's generate.py.

One block: the draft proposes gamma tokens autoregressively (one forward each, on its KV cache);
the target scores ``[last, d_1, ..., d_gamma]`` in ONE forward; the verifier keeps the accepted
prefix ``d_1..d_n`` and adds one token from the target (a correction when ``n < gamma``, the bonus
token when all were accepted). Both caches are then cropped back to the kept context, so the prompt
is never re-encoded.

Cache invariant at the start of every block: the target's cache holds the context except its
last token ``last``; the draft's cache holds the context except ``pending`` (1 token, 2 after a
fully accepted block, since the draft never fed its own last proposal through itself).

The models are called directly (``use_cache=True``, ``logits_to_keep``), never ``model.generate``.
With ``temperature == 0`` the output equals the target's greedy decoding (``target_generate``),
up to floating-point ties: the target scores a block in one multi-token forward, whose logits may
differ in the last bits from one-token forwards.
"""

from __future__ import annotations

import functools
import inspect
import time

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from adaspec.decoding.policies import Policy
from adaspec.decoding.stats import BlockRecord, GenerationResult


@functools.cache
def _cache_kwarg(model_cls: type) -> str:
    # transformers 5.x renamed the forward kwarg `past_key_values` to `cache` (the old name warns).
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def _forward(model: PreTrainedModel, ids: Tensor, cache: DynamicCache, logits_to_keep: int = 0) -> Tensor:
    """Run ``ids [1, T]`` through ``model`` on top of ``cache`` (which grows by T); logits ``[T', V]``."""
    kwargs = {_cache_kwarg(type(model)): cache}
    return model(input_ids=ids, use_cache=True, logits_to_keep=logits_to_keep, **kwargs).logits[0]


def _rollback(cache: DynamicCache, length: int) -> None:
    """Crop ``cache`` to its first ``length`` positions.

    ``DynamicCache.crop`` takes a NEGATIVE count of positions to drop (transformers >= 5.x raises on
    a positive, absolute length; ``crop(0)`` meant "crop to empty" in older releases), so only call
    it with a strictly negative number.
    """
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


def _probs(logits: Tensor, temperature: float) -> Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def _pick(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    """Next token ``[1]`` from logits ``[V]``: argmax if ``temperature == 0``, else a sample."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    return torch.multinomial(_probs(logits, temperature), 1, generator=generator)


def verify_greedy(target_logits: Tensor, proposals: Tensor) -> tuple[Tensor, Tensor]:
    """Greedy verification. ``target_logits [..., gamma+1, V]``, ``proposals [..., gamma]``.

    Returns ``(n_accepted, next_token)``: the longest prefix of proposals equal to the target's
    argmax, and the target's argmax after it (correction, or bonus when all match). No host sync.
    """
    pred = target_logits.argmax(-1)
    n = (pred[..., :-1] == proposals).cumprod(-1).sum(-1)
    return n, pred.gather(-1, n.unsqueeze(-1)).squeeze(-1)


def verify_block(
    p_probs: Tensor, q_probs: Tensor, proposals: Tensor, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """Speculative-sampling verification (Leviathan et al., 2023, Algorithm 1) of one block.

    ``p_probs [..., gamma+1, V]`` target and ``q_probs [..., gamma, V]`` draft distributions at each
    position, ``proposals [..., gamma]`` sampled from ``q``; leading dims are independent blocks.
    Proposal i is accepted with probability ``min(1, p_i(x)/q_i(x))``; at the first rejection n the
    next token is drawn from ``norm(max(0, p_n - q_n))``, and when all are accepted from ``p_gamma``
    (bonus). Returns ``(n_accepted, next_token)`` as tensors, without a host sync; the emitted
    tokens ``proposals[:n] + [next_token]`` are then distributed exactly as samples from ``p``.
    """
    gamma, vocab = proposals.shape[-1], p_probs.shape[-1]
    idx = proposals.unsqueeze(-1)
    p_x = p_probs[..., :gamma, :].gather(-1, idx).squeeze(-1)
    q_x = q_probs.gather(-1, idx).squeeze(-1)
    u = torch.rand(proposals.shape, generator=generator, device=p_x.device, dtype=p_x.dtype)
    n = (u * q_x < p_x).cumprod(-1).sum(-1)  # u < p/q, up to the first rejection
    # Row i < gamma: residual distribution after a rejection at i; row gamma: p (bonus token).
    dists = torch.cat([(p_probs[..., :gamma, :] - q_probs).clamp_min(0), p_probs[..., gamma:, :]], dim=-2)
    row = n[..., None, None].expand(*n.shape, 1, vocab)
    dist = dists.gather(-2, row).squeeze(-2)
    # p == q (up to rounding) leaves an all-zero residual; a rejection is then (almost) impossible, use p.
    dist = torch.where(dist.sum(-1, keepdim=True) > 0, dist, p_probs.gather(-2, row).squeeze(-2))
    next_token = torch.multinomial(dist.reshape(-1, vocab), 1, generator=generator).reshape(n.shape)
    return n, next_token


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    input_ids: Tensor,
    *,
    gamma_policy: Policy,
    max_new_tokens: int,
    eos_token_id: int | None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` after ``input_ids [1, T]`` with speculative decoding.

    Stops after EOS (emitted, nothing after it) or exactly ``max_new_tokens`` tokens. gamma comes
    from ``gamma_policy`` (reset at the start), capped so a block emits at most the remaining
    tokens. ``generator`` (on the models' device) drives sampling when ``temperature > 0``.
    """
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must have shape [1, T], got {tuple(input_ids.shape)}")
    start = time.perf_counter()
    greedy = temperature == 0
    vocab = min(target.config.vocab_size, draft.config.vocab_size)  # padded vocabularies may differ
    target_cache, draft_cache = DynamicCache(config=target.config), DynamicCache(config=draft.config)
    prompt_len = input_ids.shape[1]
    if prompt_len > 1:  # prefill all but the last prompt token; it is fed with the first block
        _forward(target, input_ids[:, :-1], target_cache, logits_to_keep=1)
        _forward(draft, input_ids[:, :-1], draft_cache, logits_to_keep=1)
    last = pending = input_ids[:, -1:]  # context tokens not yet in the target's / draft's cache
    gamma_policy.reset()
    tokens: list[int] = []
    blocks: list[BlockRecord] = []
    gamma_trace: list[int] = []
    draft_calls = 0

    while len(tokens) < max_new_tokens:
        ctx = prompt_len + len(tokens)
        gamma = min(gamma_policy.next_gamma(ctx), max_new_tokens - len(tokens) - 1)

        # 1. Draft gamma tokens, one forward each.
        drafted, q_rows, x = [], [], pending
        for _ in range(gamma):
            logits = _forward(draft, x, draft_cache, logits_to_keep=1)[-1, :vocab]
            if greedy:
                tok = logits.argmax(-1, keepdim=True)
            else:
                q_rows.append(_probs(logits, temperature))
                tok = torch.multinomial(q_rows[-1], 1, generator=generator)
            drafted.append(tok)
            x = tok.view(1, 1)
        draft_calls += gamma
        proposals = torch.cat(drafted) if drafted else input_ids.new_empty(0)

        # 2. Verify all proposals with one target forward over [last, d_1..d_gamma].
        logits = _forward(target, torch.cat([last[0], proposals]).view(1, -1), target_cache)[:, :vocab]
        if greedy:
            n, nxt = verify_greedy(logits, proposals)
        else:
            q = torch.stack(q_rows) if q_rows else logits.new_zeros(0, vocab, dtype=torch.float)
            n, nxt = verify_block(_probs(logits, temperature), q, proposals, generator)
        n_acc, next_id, *props = torch.cat([n.view(1), nxt.view(1), proposals]).tolist()  # one sync
        new = props[:n_acc] + [next_id]

        # 3. Emit, never past EOS or max_new_tokens.
        keep = min(len(new), max_new_tokens - len(tokens))
        if eos_token_id in new[:keep]:
            keep = new.index(eos_token_id) + 1
        if keep < len(new):  # cut inside the accepted prefix: any later rejection did not matter
            blocks.append(BlockRecord(keep, keep, None, truncated=True))
        else:
            blocks.append(BlockRecord(gamma, n_acc, n_acc + 1 if n_acc < gamma else None))
        tokens += new[:keep]
        gamma_trace.append(gamma)
        gamma_policy.update(blocks[-1].proposed, blocks[-1].accepted)
        if keep < len(new) or next_id == eos_token_id:
            break

        # 4. Roll both caches back to context + accepted proposals; `next` is fed next block.
        _rollback(target_cache, ctx + n_acc)
        _rollback(draft_cache, ctx + n_acc)
        unseen = ctx + n_acc + 1 - draft_cache.get_seq_length()
        pending = torch.cat([pending[0], proposals[:n_acc], nxt.view(1)])[-unseen:].view(1, -1)
        last = nxt.view(1, 1)

    return GenerationResult(
        tokens=tokens,
        target_calls=len(blocks),
        draft_calls=draft_calls,
        wall_time_s=time.perf_counter() - start,
        blocks=blocks,
        gamma_trace=gamma_trace,
    )


@torch.inference_mode()
def target_generate(
    target: PreTrainedModel,
    input_ids: Tensor,
    *,
    max_new_tokens: int,
    eos_token_id: int | None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> GenerationResult:
    """Plain autoregressive decoding of ``target`` with a KV cache: the baseline (one forward per token)."""
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must have shape [1, T], got {tuple(input_ids.shape)}")
    start = time.perf_counter()
    cache = DynamicCache(config=target.config)
    generated: list[Tensor] = []
    x = input_ids
    for _ in range(max_new_tokens):
        tok = _pick(_forward(target, x, cache, logits_to_keep=1)[-1], temperature, generator)
        generated.append(tok)
        if eos_token_id is not None and tok.item() == eos_token_id:
            break
        x = tok.view(1, 1)
    tokens = torch.cat(generated).tolist() if generated else []
    return GenerationResult(tokens=tokens, target_calls=len(tokens), wall_time_s=time.perf_counter() - start)
