"""Speculative decoding (Leviathan et al., 2023) for batch size 1, in the style of gpt-fast's generate.py.

One block: the draft proposes up to gamma tokens on top of what it has read (`adaspec.drafts.Draft`); the
target scores ``[last context token, d_1, ..., d_n]`` in ONE forward; the verifier keeps the accepted
prefix ``d_1..d_a`` and adds one token from the target (a correction when ``a < n``, the bonus token when
all were accepted). The target's cache and the draft's state are then cropped back to the kept context,
so the prompt is never re-encoded. `adaspec.decoding.blocks.run_blocks` decides gamma and what a block
emits; this module only proposes and verifies. With `tree` a block proposes a tree instead (`tree_block`:
one target forward over the tree with a tree mask, the longest accepted path kept; `adaspec.decoding.tree`).

The target is called directly, through `adaspec.decoding.serving.Served` (its precision, eager or compiled
steps, its KV cache), never ``model.generate``. With ``temperature == 0`` the output equals the target's
greedy decoding (``target_generate``) in the same serving configuration, up to floating-point ties: the
target scores a block in one multi-token forward, whose logits may differ in the last bits from one-token
forwards (in bfloat16, often enough to be counted: `adaspec.decoding.exactness`). The verification forward
is the reference: every emitted token is the target's argmax (or sample) given the emitted context, as
that forward computed it.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor
from transformers import PreTrainedModel

from adaspec.decoding.blocks import run_blocks
from adaspec.decoding.policies import Policy
from adaspec.decoding.sampling import greedy, sample
from adaspec.decoding.serving import Served, as_served
from adaspec.decoding.stats import GenerationResult
from adaspec.decoding.tree import MAX_NODES, TreeShape, accept_greedy, accept_sampled
from adaspec.drafts import hybrid
from adaspec.drafts.base import Draft

MAX_BLOCK = MAX_NODES + 1  # the longest verification: gamma <= 32 proposals (or tree nodes) and the token before


def _probs(logits: Tensor, temperature: float) -> Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def _pick(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    """Next token ``[1]`` from logits ``[V]``: argmax if ``temperature == 0``, else a sample."""
    if temperature == 0:
        return greedy(logits, keepdim=True)
    return sample(_probs(logits, temperature), generator)


def verify_greedy(target_logits: Tensor, proposals: Tensor) -> tuple[Tensor, Tensor]:
    """Greedy verification. ``target_logits [..., gamma+1, V]``, ``proposals [..., gamma]``.

    Returns ``(n_accepted, next_token)``: the longest prefix of proposals equal to the target's
    argmax, and the target's argmax after it (correction, or bonus when all match). No host sync.
    """
    pred = greedy(target_logits)
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
    next_token = sample(dist, generator)[..., 0]
    return n, next_token


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel | Served,
    draft: Draft,
    input_ids: Tensor,
    *,
    gamma_policy: Policy,
    max_new_tokens: int,
    eos_token_id: int | None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    tree: TreeShape | None = None,
    draft_temperature: float | None = None,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` after ``input_ids [1, T]`` with speculative decoding.

    Stops after EOS (emitted, nothing after it) or exactly ``max_new_tokens`` tokens; gamma comes from
    ``gamma_policy`` (`run_blocks`). ``generator`` (on the models' device) drives sampling when
    ``temperature > 0``. The output stays exact whatever the draft: the target verifies every token.
    ``tree``: the draft proposes a tree of this shape (`tree_block`; gamma caps its depth) instead of a chain.
    ``draft_temperature`` (``temperature > 0`` only; None: ``temperature``): the temperature the draft proposes
    at. Any proposal distribution keeps the output exact (a proposal is accepted with min(1, p/q) of the q it
    was drawn from); one closer to the target's distribution accepts more.
    """
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must have shape [1, T], got {tuple(input_ids.shape)}")
    if tree is not None and not draft.proposes_trees:
        raise ValueError(f"decode.tree: a {draft.kind} draft cannot rank alternatives; use decode.tree=off")
    if tree is not None:
        draft = hybrid.for_shape(draft, tree)
    proposal_temperature = temperature if temperature == 0 or draft_temperature is None else draft_temperature
    start = time.perf_counter()
    target = as_served(target)
    width = draft.verify_width(target.config.vocab_size)
    layers = draft.target_layers  # the target's hidden states the draft reads, if any
    target_cache = target.new_cache(input_ids.shape[1] + max_new_tokens + MAX_BLOCK)
    session = draft.start(input_ids, width)
    if input_ids.shape[1] > 1:  # prefill all but the last prompt token; it is fed with the first block
        if layers:
            session.read_target(target.prefill_with_features(input_ids[:, :-1], target_cache, layers)[1])
        else:
            target.prefill(input_ids[:, :-1], target_cache)
    context = input_ids[0]  # the prompt and every emitted token (target ids)

    def block(gamma: int, emitted: int) -> tuple[int, int, list[int]]:
        nonlocal context
        # 1. The draft proposes up to gamma tokens.
        proposals, draft_probs = session.propose(context, gamma, proposal_temperature, generator)

        # 2. The target scores every proposal in one forward over [last context token, d_1..d_n].
        target_ids = torch.cat([context[-1:], proposals]).view(1, -1)
        if layers:
            target_logits, features = target.step_with_features(target_ids, target_cache, layers)
        else:
            target_logits, features = target.step(target_ids, target_cache), None
        target_logits = target_logits[:, :width]

        # 3. Accept a prefix of the proposals and take the target's correction or bonus token after it.
        if temperature == 0:
            n_accepted, next_token = verify_greedy(target_logits, proposals)
        else:
            target_probs = _probs(target_logits, temperature)
            n_accepted, next_token = verify_block(target_probs, draft_probs, proposals, generator)
        n, next_id, *proposed = torch.cat([n_accepted.view(1), next_token.view(1), proposals]).tolist()

        # 4. Crop the target's cache and the draft's state to the context plus the accepted proposals.
        kept = context.shape[0] + n
        target.crop(target_cache, kept, current=context.shape[0] + len(proposed))  # read nothing from the device
        session.rollback(kept)
        if features is not None:  # the positions kept: the last context token's and the accepted proposals'
            session.read_target(features[: n + 1])
        context = torch.cat([context, proposals[:n], next_token.view(1)])
        return len(proposed), n, proposed[:n] + [next_id]

    def tree_block(gamma: int, emitted: int) -> tuple[int, int, list[int]]:
        nonlocal context
        # 1. The draft proposes a tree no deeper than gamma.
        proposal = session.propose_tree(context, tree.capped(gamma), proposal_temperature, generator)

        # 2. The target scores every node in one forward over [last context token, nodes], a tree mask.
        target_logits, features = target.verify_tree(context[-1:], proposal, target_cache, layers)
        target_logits = target_logits[:, :width]

        # 3. The longest accepted root-to-leaf path, and the target's token after it.
        if temperature == 0:
            path, next_id = accept_greedy(target_logits, proposal)
        else:
            path, next_id = accept_sampled(_probs(target_logits, temperature), proposal, generator)
        accepted = [proposal.tokens[node] for node in path]

        # 4. Keep the path's rows in the target's cache and the draft's state; the head reads the path's features.
        target.keep_path(target_cache, context.shape[0] - 1, path)
        session.keep_path(path)
        session.rollback(context.shape[0] + len(path))
        if features is not None:
            session.read_target(features[[0] + [node + 1 for node in path]])
        context = torch.cat([context, torch.tensor(accepted + [next_id], dtype=context.dtype, device=context.device)])
        return proposal.depth, len(path), accepted + [next_id]

    log = run_blocks(block if tree is None else tree_block, policy=gamma_policy, prompt_len=input_ids.shape[1],
                     max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    return log.result(time.perf_counter() - start)


@torch.inference_mode()
def target_generate(
    target: PreTrainedModel | Served,
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
    target = as_served(target)
    cache = target.new_cache(input_ids.shape[1] + max_new_tokens)
    generated: list[Tensor] = []
    logits = target.prefill(input_ids, cache) if max_new_tokens > 0 else None
    for _ in range(max_new_tokens):
        tok = _pick(logits, temperature, generator)
        generated.append(tok)
        if eos_token_id is not None and tok.item() == eos_token_id or len(generated) == max_new_tokens:
            break
        logits = target.step(tok.view(1, 1), cache)[-1]
    tokens = torch.cat(generated).tolist() if generated else []
    return GenerationResult(tokens=tokens, target_calls=len(tokens), wall_time_s=time.perf_counter() - start)
