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


def target_summary(target: list[GenerationResult], timed: int | None = None) -> dict[str, float]:
    """Token and call sums over every prompt; wall time and tokens/s over the first `timed` (the timed ones)."""
    timed_runs = target[:timed]  # every run when timed is None
    return {
        "new_tokens": sum(len(r.tokens) for r in target),
        "target_calls": sum(r.target_calls for r in target),
        "wall_time_s": _wall(timed_runs),
        "tokens_per_s": _ratio(sum(len(r.tokens) for r in timed_runs), _wall(timed_runs)),
    }


def draft_summary(
    speculative: list[GenerationResult],
    target: list[GenerationResult],
    hf_assisted: list[GenerationResult] | None,
    *,
    gamma: int,
    greedy: bool,
    timed: int | None = None,
    fastest_target: list[GenerationResult] | None = None,
) -> dict[str, float | int | None]:
    """Every metric of `decoding.aggregate` for our speculative runs, plus

    * `speedup_vs_target`: the fastest target-only configuration's wall time (`fastest_target`, when target-only
      decoding ran in several serving configurations) / ours, over the same prompts;
    * `speedup_vs_same_serving`: target-only wall time in our serving configuration (`target`) / ours;
    * `speedup_vs_hf_assisted`: HF assisted generation's wall time with this draft / ours (None if not run);
    * `greedy_mismatches`: prompts where our output differs from target-only greedy decoding (None
      when sampling); `hf_assisted/greedy_mismatches` the same for HF;
    * `hf_assisted/wall_time_s`, `hf_assisted/tokens_per_s`.

    `timed`: only the first `timed` prompts were run and timed (the others replayed, eval.timed_prompts):
    acceptance pools every prompt, wall times, speed-ups and mismatches come from the timed ones.
    """
    n = len(speculative) if timed is None else timed
    curve = max_gamma(speculative, gamma)
    out: dict[str, float | int | None] = dict(aggregate(speculative, curve))
    if n < len(speculative):
        timed_stats = aggregate(speculative[:n], curve)
        out |= {"wall_time_s": timed_stats["wall_time_s"], "tokens_per_s": timed_stats["tokens_per_s"]}
    out["timed_prompts"] = n
    speculative, target = speculative[:n], target[:n]
    ours = _wall(speculative)
    out["speedup_vs_target"] = _ratio(_wall((fastest_target or target)[:n]), ours)
    out["speedup_vs_same_serving"] = _ratio(_wall(target), ours)
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
