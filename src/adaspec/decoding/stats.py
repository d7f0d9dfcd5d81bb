"""Per-generation records of speculative decoding and their aggregation over a prompt set.

Vocabulary (one *block* = one target verification forward pass):

* ``proposed``: draft tokens whose verdict was used. Normally the block's gamma; for a block cut
  short by EOS or ``max_new_tokens`` only the proposals up to the cut (all of them accepted).
* ``accepted``: proposals accepted by the verifier *and emitted*.
* ``first_reject``: 1-based draft position of the first (and only judged) rejected proposal, or
  ``None`` when every proposal was accepted or the block was cut short before its rejection mattered.
  Verification stops at the first rejection, so a block has at most one rejection.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BlockRecord:
    proposed: int
    accepted: int
    first_reject: int | None
    truncated: bool = False  # cut short by EOS / max_new_tokens: never counted as a rejection


@dataclass
class GenerationResult:
    """Outcome of one generation (batch size 1).

    ``target_calls`` counts target forward passes that produce tokens: one per block for speculative
    decoding, one per token for ``target_generate``. A prompt prefill that yields no token
    (speculative decoding prefills ``prompt[:-1]``) is not counted. ``draft_calls`` counts draft
    forward passes, excluding that prefill likewise. ``gamma_trace[i]`` is the gamma actually
    drafted in block i (after the long-context reduction and the cap on remaining tokens).
    """

    tokens: list[int]
    target_calls: int
    draft_calls: int = 0
    wall_time_s: float = 0.0
    blocks: list[BlockRecord] = field(default_factory=list)
    gamma_trace: list[int] = field(default_factory=list)


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def aggregate(results: Iterable[GenerationResult], max_gamma: int) -> dict[str, float]:
    """Pool the blocks and counters of ``results`` (micro-averages, not a mean of per-prompt ratios).

    * ``alpha = accepted / (accepted + rejected)``, where ``rejected`` is the number of blocks with a
      rejection (AdaSPEC's acceptance rate: the share of judged draft tokens that were accepted).
    * ``accept_rate = accepted / proposed`` (proposals after a rejection count as not accepted).
    * ``tau = new_tokens / target_calls``: mean tokens emitted per target forward pass.
    * ``reject_rate_at/i`` (i = 1..max_gamma): share of blocks with at least one proposal whose first
      rejection is at draft position i; ``1 - sum_i reject_rate_at/i`` is the share without rejection.
    * ``acceptance_length``: accepted proposals per block; ``accept_at_depth/i``: of the blocks whose proposals
      (a chain of gamma, or a tree that deep) reach depth i and that accepted depth i - 1, the share accepting
      depth i (a tree's block records its depth as ``proposed``).
    * ``target_calls``, ``draft_calls``, ``blocks``, ``new_tokens``, ``wall_time_s`` (sums) and
      ``tokens_per_s = new_tokens / wall_time_s``.

    Truncated blocks contribute their accepted tokens but never a rejection. Ratios with a zero
    denominator (e.g. ``alpha`` of target-only results, which have no blocks) are NaN.
    """
    results = list(results)
    blocks = [b for r in results for b in r.blocks]
    accepted = sum(b.accepted for b in blocks)
    proposed = sum(b.proposed for b in blocks)
    rejected = sum(b.first_reject is not None for b in blocks)
    drafted_blocks = sum(b.proposed > 0 for b in blocks)
    new_tokens = sum(len(r.tokens) for r in results)
    target_calls = sum(r.target_calls for r in results)
    wall = sum(r.wall_time_s for r in results)
    out: dict[str, float] = {
        "alpha": _ratio(accepted, accepted + rejected),
        "accept_rate": _ratio(accepted, proposed),
        "tau": _ratio(new_tokens, target_calls),
    }
    for i in range(1, max_gamma + 1):
        out[f"reject_rate_at/{i}"] = _ratio(sum(b.first_reject == i for b in blocks), drafted_blocks)
    out["acceptance_length"] = _ratio(accepted, len(blocks))
    for i in range(1, max_gamma + 1):  # trees and chains alike: the share of blocks reaching depth i that accept it
        out[f"accept_at_depth/{i}"] = _ratio(sum(b.accepted >= i for b in blocks),
                                             sum(b.proposed >= i and b.accepted >= i - 1 for b in blocks))
    out |= {
        "target_calls": target_calls,
        "draft_calls": sum(r.draft_calls for r in results),
        "blocks": len(blocks),
        "new_tokens": new_tokens,
        "wall_time_s": wall,
        "tokens_per_s": _ratio(new_tokens, wall),
    }
    return out
