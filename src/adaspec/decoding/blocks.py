"""The semantics of a block, written once: how gamma is chosen, what a block emits, when generation ends.

`run_blocks` drives both the real speculative loop (`speculative.speculative_generate`, where a block
proposes, verifies and crops caches) and the greedy replay (`adaspec.evaluation.replay`, where a block is
read off the draft's greedy predictions): each passes a `block(gamma, emitted)` function and gets the same
gamma cap, EOS and `max_new_tokens` handling, `BlockRecord`s and policy updates.
"""

from __future__ import annotations

from collections.abc import Callable

from adaspec.decoding.policies import Policy
from adaspec.decoding.stats import BlockRecord, GenerationResult

# block(gamma, emitted so far) -> (tokens proposed, tokens accepted, the block's tokens: accepted + target's)
Block = Callable[[int, int], tuple[int, int, list[int]]]


class BlockLog:
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

    def add(self, proposed: int, n_accepted: int, block_tokens: list[int]) -> BlockRecord:
        """Emit ``block_tokens`` (accepted proposals + the target's token), never past EOS or the limit."""
        keep = min(len(block_tokens), self.room)
        if self.eos_token_id in block_tokens[:keep]:
            keep = block_tokens.index(self.eos_token_id) + 1
        if keep < len(block_tokens):  # cut inside the accepted prefix: any later rejection did not matter
            record = BlockRecord(keep, keep, None, truncated=True)
        else:
            record = BlockRecord(proposed, n_accepted, n_accepted + 1 if n_accepted < proposed else None)
        self.tokens += block_tokens[:keep]
        self.blocks.append(record)
        self.gamma_trace.append(proposed)
        self.draft_calls += proposed
        return record

    def result(self, wall_time_s: float = 0.0) -> GenerationResult:
        return GenerationResult(
            tokens=self.tokens,
            target_calls=len(self.blocks),
            draft_calls=self.draft_calls,
            wall_time_s=wall_time_s,
            blocks=self.blocks,
            gamma_trace=self.gamma_trace,
        )


def run_blocks(
    block: Block, *, policy: Policy, prompt_len: int, max_new_tokens: int, eos_token_id: int | None
) -> BlockLog:
    """Blocks until EOS is emitted or `max_new_tokens` tokens are. gamma comes from `policy` (reset first),
    capped so that a block emits at most the remaining tokens; a draft may propose fewer."""
    policy.reset()
    log = BlockLog(max_new_tokens, eos_token_id)
    while not log.finished:
        gamma = min(policy.next_gamma(prompt_len + len(log.tokens)), log.room - 1)
        proposed, n_accepted, block_tokens = block(gamma, len(log.tokens))
        record = log.add(proposed, n_accepted, block_tokens)
        policy.update(record.proposed, record.accepted)
    return log
