"""Acceptance for any gamma from one draft forward pass: replaying greedy speculative decoding.

With greedy verification the emitted text is the target's greedy output ``y`` whatever the draft
does, and a block starting at position t accepts proposal j exactly when the draft's greedy
prediction after ``prompt + y[:t+j-1]`` is ``y[t+j-1]`` (every earlier proposal of the block was
accepted, so the draft saw ``y`` itself). One teacher-forced draft forward over ``prompt + y`` thus
gives ``matches[m] = argmax q(. | prompt, y[:m]) == y[m]`` for every m, and `replay` walks the
blocks of `speculative_generate` for any gamma policy (same cap on the remaining tokens, same EOS
handling, same `BlockRecord`s), without running the target again.

Exact up to floating point: the real loop's draft runs one token at a time on a KV cache, whose
logits may differ in the last bits from the single teacher-forced forward, which can flip an argmax
tie. Sampling (temperature > 0) has no such shortcut: acceptance is random and the text depends on it.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import PreTrainedModel

from adaspec.decoding import BlockRecord, GenerationResult, Policy
from adaspec.models.draft_vocab import DraftVocab


@torch.inference_mode()
def draft_matches(
    draft: PreTrainedModel,
    input_ids: Tensor,
    tokens: list[int],
    vocab: int,
    vocab_map: DraftVocab | None = None,
) -> list[bool]:
    """``matches[m]``: the draft's greedy token after ``input_ids [1, T] + tokens[:m]`` is ``tokens[m]``.

    Argmax over the first `vocab` logits, as `speculative_generate` does when vocabularies are padded. A
    draft with a reduced vocabulary (``vocab_map``) reads the ids mapped to draft ids, and its argmax is
    mapped back to a target id (`vocab` is then ignored: all its logits count).
    """
    if not tokens:
        return []
    target_ids = torch.tensor(tokens, device=input_ids.device)
    seq = torch.cat([input_ids[0], target_ids[:-1]]).view(1, -1)
    if vocab_map is None:
        logits = draft(input_ids=seq, logits_to_keep=len(tokens)).logits[0, :, :vocab]
        return (logits.argmax(-1) == target_ids).tolist()
    vocab_map = vocab_map.to(seq.device)
    logits = draft(input_ids=vocab_map.to_draft(seq), logits_to_keep=len(tokens)).logits[0, :, : vocab_map.size]
    return (vocab_map.to_target(logits.argmax(-1)) == target_ids).tolist()


def replay(
    tokens: list[int],
    matches: list[bool],
    *,
    policy: Policy,
    prompt_len: int,
    max_new_tokens: int,
    eos_token_id: int | None,
) -> GenerationResult:
    """The blocks greedy speculative decoding with `policy` goes through to emit `tokens`.

    `tokens` is the target's greedy output for the same `max_new_tokens` and `eos_token_id` (it ends
    with EOS or has exactly `max_new_tokens` tokens); `matches` comes from `draft_matches`.
    The result has the real run's `blocks`, `gamma_trace`, `target_calls` and `draft_calls`; its
    `wall_time_s` is 0.
    """
    if len(matches) != len(tokens):
        raise ValueError(f"{len(matches)} matches for {len(tokens)} tokens")
    n_tokens = len(tokens)
    policy.reset()
    blocks: list[BlockRecord] = []
    gamma_trace: list[int] = []
    draft_calls = pos = 0
    while pos < min(n_tokens, max_new_tokens):
        gamma = min(policy.next_gamma(prompt_len + pos), max_new_tokens - pos - 1)
        n = 0
        while n < gamma and pos + n < n_tokens and matches[pos + n]:
            n += 1
        draft_calls += gamma
        gamma_trace.append(gamma)
        if pos + n == n_tokens:  # the draft proposed the final EOS too: the block is cut there
            blocks.append(BlockRecord(n, n, None, truncated=True))
            policy.update(n, n)
            break
        blocks.append(BlockRecord(gamma, n, n + 1 if n < gamma else None))
        policy.update(gamma, n)
        pos += n + 1  # accepted proposals, then the target's correction or bonus token
        if tokens[pos - 1] == eos_token_id:
            break
    return GenerationResult(tokens=list(tokens), target_calls=len(blocks), draft_calls=draft_calls, blocks=blocks,
                            gamma_trace=gamma_trace)
