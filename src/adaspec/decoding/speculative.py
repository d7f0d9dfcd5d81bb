"""Speculative decoding (Leviathan et al., 2023) for batch size 1, in the style of gpt-fast's generate.py.

One block: the draft proposes gamma tokens autoregressively (one forward each, on its KV cache); the
target scores ``[last context token, d_1, ..., d_gamma]`` in ONE forward; the verifier keeps the
accepted prefix ``d_1..d_n`` and adds one token from the target (a correction when ``n < gamma``, the
bonus token when all were accepted). Both caches are then cropped back to the kept context, so the
prompt is never re-encoded.

Cache invariant at the start of every block: each model's KV cache holds the context except the
tokens it has not seen yet. The target has not seen the last context token; the draft has not seen 1
token, or 2 after a fully accepted block (it never feeds its own last proposal through itself), and
feeds them with its first forward of the block.

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
from adaspec.models.draft_vocab import DraftVocab, is_reduced


@functools.cache
def _cache_kwarg(model_cls: type) -> str:
    # transformers 5.x renamed the forward kwarg `past_key_values` to `cache` (the old name warns).
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def _forward(model: PreTrainedModel, ids: Tensor, cache: DynamicCache, logits_to_keep: int = 0) -> Tensor:
    """Run ``ids [1, T]`` through ``model`` on top of ``cache`` (which grows by T); logits ``[T', V]``."""
    kwargs = {_cache_kwarg(type(model)): cache}
    return model(input_ids=ids, use_cache=True, logits_to_keep=logits_to_keep, **kwargs).logits[0]


def _crop_cache(cache: DynamicCache, length: int) -> None:
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


def _draft_proposals(
    draft: PreTrainedModel,
    cache: DynamicCache,
    unseen: Tensor,
    gamma: int,
    vocab: int,
    temperature: float,
    generator: torch.Generator | None,
    vocab_map: DraftVocab | None,
) -> tuple[Tensor, Tensor | None]:
    """Propose ``gamma`` tokens with the draft, one forward each; the first forward also feeds ``unseen``.

    Returns the proposals ``[gamma]`` and, when sampling, the draft's distributions ``[gamma, vocab]``
    they were drawn from (``None`` when greedy). Tokens are target ids throughout: a reduced-vocabulary
    draft (``vocab_map``) reads and writes draft ids, and its distributions are scattered over the
    target's vocabulary with probability 0 for the tokens it cannot propose.
    """
    draft_vocab = vocab if vocab_map is None else vocab_map.size
    proposals, draft_probs = [], []
    x = unseen
    for _ in range(gamma):
        draft_ids = x if vocab_map is None else vocab_map.to_draft(x)
        logits = _forward(draft, draft_ids, cache, logits_to_keep=1)[-1, :draft_vocab]
        if temperature == 0:
            token = logits.argmax(-1, keepdim=True)
        else:
            draft_probs.append(_probs(logits, temperature))
            token = torch.multinomial(draft_probs[-1], 1, generator=generator)
        if vocab_map is not None:
            token = vocab_map.to_target(token)
        proposals.append(token)
        x = token.view(1, 1)
    if temperature == 0:
        return torch.cat(proposals) if proposals else unseen.new_empty(0), None
    if not proposals:
        return unseen.new_empty(0), torch.zeros(0, vocab, device=unseen.device)
    q = torch.stack(draft_probs)
    return torch.cat(proposals), q if vocab_map is None else vocab_map.scatter(q)


def _verify_width(target: PreTrainedModel, draft: PreTrainedModel, vocab_map: DraftVocab | None) -> int:
    """How many logits of the target take part in verification (vocabularies may be padded)."""
    if vocab_map is None:
        if is_reduced(draft.config):
            raise ValueError(
                "the draft has a reduced vocabulary: pass vocab_map=load_draft_vocab(<draft folder>)"
            )
        return min(target.config.vocab_size, draft.config.vocab_size)
    if draft.config.vocab_size < vocab_map.size or target.config.vocab_size < vocab_map.target_size:
        raise ValueError(
            f"vocab_map ({vocab_map.size} draft ids over {vocab_map.target_size} target ids) does not fit the "
            f"draft ({draft.config.vocab_size} rows) and the target ({target.config.vocab_size} rows)"
        )
    return vocab_map.target_size


class _BlockLog:
    """Bookkeeping of one generation: the emitted tokens, one `BlockRecord` per block, gamma and draft calls."""

    def __init__(self, max_new_tokens: int, eos_token_id: int | None) -> None:
        self.max_new_tokens, self.eos_token_id = max_new_tokens, eos_token_id
        self.tokens: list[int] = []
        self.blocks: list[BlockRecord] = []
        self.gamma_trace: list[int] = []
        self.draft_calls = 0

    @property
    def room(self) -> int:
        return self.max_new_tokens - len(self.tokens)

    @property
    def finished(self) -> bool:
        return self.room <= 0 or (bool(self.tokens) and self.tokens[-1] == self.eos_token_id)

    def add(self, gamma: int, n_accepted: int, block_tokens: list[int]) -> BlockRecord:
        """Emit ``block_tokens`` (accepted proposals + the target's token), never past EOS or the limit."""
        keep = min(len(block_tokens), self.room)
        if self.eos_token_id in block_tokens[:keep]:
            keep = block_tokens.index(self.eos_token_id) + 1
        if keep < len(block_tokens):  # cut inside the accepted prefix: any later rejection did not matter
            record = BlockRecord(keep, keep, None, truncated=True)
        else:
            record = BlockRecord(gamma, n_accepted, n_accepted + 1 if n_accepted < gamma else None)
        self.tokens += block_tokens[:keep]
        self.blocks.append(record)
        self.gamma_trace.append(gamma)
        self.draft_calls += gamma
        return record

    def result(self, wall_time_s: float) -> GenerationResult:
        return GenerationResult(
            tokens=self.tokens,
            target_calls=len(self.blocks),
            draft_calls=self.draft_calls,
            wall_time_s=wall_time_s,
            blocks=self.blocks,
            gamma_trace=self.gamma_trace,
        )


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
    vocab_map: DraftVocab | None = None,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` after ``input_ids [1, T]`` with speculative decoding.

    Stops after EOS (emitted, nothing after it) or exactly ``max_new_tokens`` tokens. gamma comes
    from ``gamma_policy`` (reset at the start), capped so a block emits at most the remaining
    tokens. ``generator`` (on the models' device) drives sampling when ``temperature > 0``.
    ``vocab_map`` is required for a draft with a reduced vocabulary (`adaspec.models.draft_vocab`);
    the output stays exact: the target verifies every token.
    """
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must have shape [1, T], got {tuple(input_ids.shape)}")
    start = time.perf_counter()
    vocab = _verify_width(target, draft, vocab_map)
    if vocab_map is not None:
        vocab_map = vocab_map.to(input_ids.device)
    target_cache, draft_cache = DynamicCache(config=target.config), DynamicCache(config=draft.config)
    prompt_len = input_ids.shape[1]
    if prompt_len > 1:  # prefill all but the last prompt token; it is fed with the first block
        _forward(target, input_ids[:, :-1], target_cache, logits_to_keep=1)
        draft_prompt = input_ids[:, :-1] if vocab_map is None else vocab_map.to_draft(input_ids[:, :-1])
        _forward(draft, draft_prompt, draft_cache, logits_to_keep=1)
    target_unseen = draft_unseen = input_ids[:, -1:]  # context tokens not yet in each model's cache
    gamma_policy.reset()
    log = _BlockLog(max_new_tokens, eos_token_id)

    while not log.finished:
        context_len = prompt_len + len(log.tokens)
        gamma = min(gamma_policy.next_gamma(context_len), log.room - 1)

        # 1. The draft proposes gamma tokens.
        proposals, draft_probs = _draft_proposals(
            draft, draft_cache, draft_unseen, gamma, vocab, temperature, generator, vocab_map
        )

        # 2. The target scores every proposal in one forward over [last context token, d_1..d_gamma].
        target_ids = torch.cat([target_unseen[0], proposals]).view(1, -1)
        target_logits = _forward(target, target_ids, target_cache)[:, :vocab]

        # 3. Accept a prefix of the proposals and take the target's correction or bonus token after it.
        if temperature == 0:
            n_accepted, next_token = verify_greedy(target_logits, proposals)
        else:
            target_probs = _probs(target_logits, temperature)
            n_accepted, next_token = verify_block(target_probs, draft_probs, proposals, generator)
        n, next_id, *proposed = torch.cat([n_accepted.view(1), next_token.view(1), proposals]).tolist()
        record = log.add(gamma, n, proposed[:n] + [next_id])
        gamma_policy.update(record.proposed, record.accepted)

        # 4. Crop both caches to the context plus the accepted proposals; what is left to feed is unseen.
        kept = context_len + n
        _crop_cache(target_cache, kept)
        _crop_cache(draft_cache, kept)
        target_unseen = next_token.view(1, 1)
        context_tail = torch.cat([draft_unseen[0], proposals[:n], next_token.view(1)])
        draft_unseen = context_tail[-(kept + 1 - draft_cache.get_seq_length()) :].view(1, -1)

    return log.result(time.perf_counter() - start)


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
