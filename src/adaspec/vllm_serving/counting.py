"""The project's speculative blocks counted as vLLM counts its drafts, and the two compared.

vLLM (v1 metrics `vllm:spec_decode_num_drafts`, `..._num_accepted_tokens`, `..._num_accepted_tokens_per_pos`)
counts every draft of gamma tokens: mean acceptance length = 1 + accepted / drafts, and position i's rate = the
share of drafts whose first i + 1 tokens were accepted. The project's blocks differ in two ways, so only those
that vLLM would count alike are counted: a block cut at EOS or the length limit is recorded as wholly accepted
(`BlockRecord.truncated`), and a block near the limit proposes fewer than gamma (vLLM still drafts gamma); both
are left out. A third difference stays, hence a tolerance: the project drafts the first answer token from the
prompt, vLLM emits it from the prefill and drafts from the second, so the blocks start at other places.
"""

from __future__ import annotations

from adaspec.decoding.stats import GenerationResult

# 20 GSM8K prompts of 128 tokens hold about 1,500 drafts: a rate's standard error is about 0.013
TOLERANCE = {"mean_acceptance_length": 0.1, "per_position": 0.05}


def counted_like_vllm(results: list[GenerationResult], gamma: int) -> dict:
    blocks = [b for r in results for b in r.blocks if not b.truncated and b.proposed == gamma]
    drafts = len(blocks)
    accepted = sum(b.accepted for b in blocks)
    return {"drafts": drafts, "draft_tokens": drafts * gamma, "accepted": accepted,
            "accepted_per_position": [sum(b.accepted > i for b in blocks) for i in range(gamma)]}


def rates(counts: dict) -> dict:
    """Mean acceptance length and per-position acceptance rates of counts in vLLM's form."""
    drafts = max(counts["drafts"], 1)
    return {"mean_acceptance_length": 1 + counts["accepted"] / drafts,
            "per_position": [n / drafts for n in counts["accepted_per_position"]]}


def compare(ours: dict, theirs: dict) -> dict:
    """{mean_acceptance_length: (ours, vLLM's), per_position: [(ours, vLLM's)], within_tolerance: bool}."""
    a, b = rates(ours), rates(theirs)
    pairs = list(zip(a["per_position"], b["per_position"], strict=True))
    within = (abs(a["mean_acceptance_length"] - b["mean_acceptance_length"]) <= TOLERANCE["mean_acceptance_length"]
              and all(abs(x - y) <= TOLERANCE["per_position"] for x, y in pairs))
    return {"mean_acceptance_length": (a["mean_acceptance_length"], b["mean_acceptance_length"]),
            "per_position": pairs, "within_tolerance": within, "tolerance": TOLERANCE}
