"""Per-draft metrics from the benchmark's generations: acceptance, speed-ups, greedy agreement."""

from __future__ import annotations

import math

from adaspec.decoding import GenerationResult, aggregate


def _wall(results: list[GenerationResult]) -> float:
    return sum(r.wall_time_s for r in results)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def mismatches(results: list[GenerationResult], reference: list[GenerationResult]) -> int:
    """Prompts whose generated tokens differ from the reference's (target-only) tokens."""
    return sum(r.tokens != ref.tokens for r, ref in zip(results, reference, strict=True))


def max_gamma(results: list[GenerationResult], gamma: int) -> int:
    """Longest block the rejection curve needs: the configured gamma or more (adaptive / hf policies)."""
    return max([gamma, *(g for r in results for g in r.gamma_trace)])


def target_summary(target: list[GenerationResult]) -> dict[str, float]:
    new_tokens = sum(len(r.tokens) for r in target)
    return {
        "new_tokens": new_tokens,
        "target_calls": sum(r.target_calls for r in target),
        "wall_time_s": _wall(target),
        "tokens_per_s": _ratio(new_tokens, _wall(target)),
    }


def draft_summary(
    speculative: list[GenerationResult],
    target: list[GenerationResult],
    hf_assisted: list[GenerationResult] | None,
    *,
    gamma: int,
    greedy: bool,
) -> dict[str, float | int | None]:
    """Every metric of `decoding.aggregate` for our speculative runs, plus

    * `speedup_vs_target`: target-only wall time / ours, over the same prompts;
    * `speedup_vs_hf_assisted`: HF assisted generation's wall time with this draft / ours (None if not run);
    * `greedy_mismatches`: prompts where our output differs from target-only greedy decoding (None
      when sampling); `hf_assisted/greedy_mismatches` the same for HF;
    * `hf_assisted/wall_time_s`, `hf_assisted/tokens_per_s`.
    """
    out: dict[str, float | int | None] = dict(aggregate(speculative, max_gamma(speculative, gamma)))
    ours = _wall(speculative)
    out["speedup_vs_target"] = _ratio(_wall(target), ours)
    out["speedup_vs_hf_assisted"] = _ratio(_wall(hf_assisted), ours) if hf_assisted else None
    out["greedy_mismatches"] = mismatches(speculative, target) if greedy else None
    if hf_assisted:
        hf_tokens = sum(len(r.tokens) for r in hf_assisted)
        out["hf_assisted/wall_time_s"] = _wall(hf_assisted)
        out["hf_assisted/tokens_per_s"] = _ratio(hf_tokens, _wall(hf_assisted))
        out["hf_assisted/greedy_mismatches"] = mismatches(hf_assisted, target) if greedy else None
    return out


def acceptance_summary(results: list[GenerationResult], gamma: int) -> dict[str, float]:
    """alpha, accept_rate and tau of one gamma of the acceptance-against-gamma sweep."""
    stats = aggregate(results, gamma)
    return {name: stats[name] for name in ("alpha", "accept_rate", "tau")}
