"""Acceptance for any gamma without running the target again: replaying greedy speculative decoding.

With greedy verification the emitted text is the target's greedy output ``y`` whatever the draft does,
and a block starting at position t accepts the draft's proposals while they equal ``y[t:]``. What the
draft proposes there depends on the draft only (`Draft.greedy_blocks`: for a model draft, one
teacher-forced forward over ``prompt + y`` gives its greedy token after every prefix of ``y``), and
`replay` walks the blocks with the loop's own block semantics (`adaspec.decoding.blocks.run_blocks`:
same gamma cap, same EOS handling, same `BlockRecord`s).

Exact up to floating point: the real loop's draft runs one token at a time on a KV cache, whose
logits may differ in the last bits from the single teacher-forced forward, which can flip an argmax
tie. Sampling (temperature > 0) has no such shortcut: acceptance is random and the text depends on it.
"""

from __future__ import annotations

from adaspec.decoding import GenerationResult, Policy
from adaspec.decoding.blocks import run_blocks
from adaspec.drafts.base import GreedyBlocks

AFTER_EOS = -1  # the target's token after an accepted EOS: never emitted, so its value does not matter


def replay(
    tokens: list[int],
    greedy_blocks: GreedyBlocks,
    *,
    policy: Policy,
    prompt_len: int,
    max_new_tokens: int,
    eos_token_id: int | None,
) -> GenerationResult:
    """The blocks greedy speculative decoding with `policy` goes through to emit `tokens`.

    `tokens` is the target's greedy output for the same `max_new_tokens` and `eos_token_id` (it ends
    with EOS or has exactly `max_new_tokens` tokens); `greedy_blocks` is the draft's (`Draft.greedy_blocks`).
    The result has the real run's `blocks`, `gamma_trace`, `target_calls` and `draft_calls`; its
    `wall_time_s` is 0.
    """

    def block(gamma: int, emitted: int) -> tuple[int, int, list[int]]:
        if emitted >= len(tokens):
            raise ValueError(f"{len(tokens)} tokens end before EOS and before max_new_tokens={max_new_tokens}")
        proposed, n = greedy_blocks(emitted, gamma)
        n = min(n, len(tokens) - emitted)
        following = tokens[emitted + n : emitted + n + 1] or [AFTER_EOS]
        return proposed, n, tokens[emitted : emitted + n] + following

    log = run_blocks(block, policy=policy, prompt_len=prompt_len, max_new_tokens=max_new_tokens,
                     eos_token_id=eos_token_id)
    return GenerationResult(tokens=list(tokens), target_calls=len(log.blocks), draft_calls=log.draft_calls,
                            blocks=log.blocks, gamma_trace=log.gamma_trace)
