"""The practice note's troubleshooting guide as checks: measured numbers in, verdicts out.

Each check is a pure function of numbers already measured, so its rule can be read (and tested)
without any model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

REF_KL_MAX = 0.2  # the note: the reference's per-token KL to the target should be below 0.2
DRAFT_AGREEMENT_MIN = 0.7  # the note: below ~70 % draft accuracy rejections climb steeply
WARMUP_FRAC = 0.1
LR_FLOOR_MAX = 0.15  # the last learning rate should be at most this share of the peak
STILL_FALLING = 0.02  # relative loss drop over the last 10 % of steps that means "not converged"
LONG_CONTEXT = 2048


@dataclass(frozen=True)
class Verdict:
    check: str
    status: str  # ok | warn | fail | skip
    value: str
    threshold: str
    action: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def reference_kl(mean_kl: float | None, n_tokens: int) -> Verdict:
    name = "reference KL to target (held-out answers)"
    if mean_kl is None:
        return Verdict(name, "skip", "n/a", f"< {REF_KL_MAX}", "train the reference: make stage2")
    ok = mean_kl < REF_KL_MAX
    return Verdict(
        name, "ok" if ok else "fail", f"{mean_kl:.3f} over {n_tokens} tokens", f"< {REF_KL_MAX}",
        "" if ok else "the reference has not converged: train stage 2 longer (stage.max_epochs) or with a larger "
        "learning rate; AdaSPEC's selection is only as good as the reference",
    )


def warmup_and_decay(stage: str, lrs: list[float]) -> Verdict:
    name = f"{stage}: learning-rate warmup and decay"
    if len(lrs) < 3:
        return Verdict(name, "skip", f"{len(lrs)} logged values", "", "log more often (trainer.log_every_n_steps)")
    peak = max(lrs)
    peak_at = lrs.index(peak) / (len(lrs) - 1)
    floor = lrs[-1] / peak
    ok = abs(peak_at - WARMUP_FRAC) <= 0.06 and floor <= LR_FLOOR_MAX
    return Verdict(
        name, "ok" if ok else "warn", f"peak at {peak_at:.0%} of steps, last lr {floor:.2f}x peak",
        f"peak near {WARMUP_FRAC:.0%}, last <= {LR_FLOOR_MAX}x", "" if ok else
        "set stage.warmup_frac=0.1 and let the cosine decay finish (stage.decay_end_frac=0.9, stage.min_lr_ratio=0.1)",
    )


def loss_still_falling(stage: str, losses: list[float]) -> Verdict:
    name = f"{stage}: training loss at the end"
    if len(losses) < 10:
        return Verdict(name, "skip", f"{len(losses)} logged values", "", "log more often (trainer.log_every_n_steps)")
    tenth = max(1, len(losses) // 10)
    before = sum(losses[-2 * tenth : -tenth]) / tenth
    last = sum(losses[-tenth:]) / tenth
    drop = (before - last) / max(abs(before), 1e-12)
    falling = drop > STILL_FALLING
    return Verdict(
        name, "warn" if falling else "ok", f"{drop:+.1%} over the last 10 % of steps", f"<= {STILL_FALLING:.0%} drop",
        "still falling: train longer (stage.max_epochs)" if falling else "",
    )


def draft_agreement(stage: str, agreement: float | None, n_tokens: int) -> Verdict:
    name = f"{stage}: greedy top-1 agreement with the target"
    if agreement is None:
        return Verdict(name, "skip", "n/a", f">= {DRAFT_AGREEMENT_MIN}", "train the draft first")
    ok = agreement >= DRAFT_AGREEMENT_MIN
    return Verdict(
        name, "ok" if ok else "warn", f"{agreement:.3f} over {n_tokens} tokens", f">= {DRAFT_AGREEMENT_MIN}",
        "" if ok else "below ~70 % agreement rejections climb steeply: train longer, use a larger draft, or lower gamma",
    )


def speedup(stage: str, alpha: float | None, measured: float | None) -> Verdict:
    name = f"{stage}: measured speed-up over the target alone"
    if measured is None:
        return Verdict(name, "skip", "not evaluated", "> 1", "run make eval")
    ok = measured > 1
    return Verdict(
        name, "ok" if ok else "fail", f"{measured:.2f}x (alpha {alpha:.3f})", "> 1",
        "" if ok else "speculation costs more than it saves: raise alpha (better draft) or lower gamma",
    )


def expected_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al.: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))."""
    if alpha >= 1:
        return (gamma + 1) / (gamma * c + 1)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))


def best_gamma(alpha: float, c: float, max_gamma: int = 16) -> int:
    return max(range(1, max_gamma + 1), key=lambda g: expected_speedup(alpha, g, c))


def gamma_choice(stage: str, alpha: float | None, c: float, gamma: int, context_len: int) -> Verdict:
    name = f"{stage}: configured gamma"
    if alpha is None:
        return Verdict(name, "skip", f"gamma={gamma}", "", "run make eval")
    best = best_gamma(alpha, c)
    if context_len > LONG_CONTEXT:
        best = max(1, best - 1)
    gain = expected_speedup(alpha, best, c) / expected_speedup(alpha, gamma, c)
    ok = gain < 1.05
    return Verdict(
        name, "ok" if ok else "warn", f"gamma={gamma}; optimal {best} for alpha {alpha:.3f}, c {c:.3f}",
        "within 5 % of the optimal expected speed-up", "" if ok else
        f"use gamma={best} (expected {gain:.2f}x faster); the note suggests 5-8, 1-2 lower beyond {LONG_CONTEXT} tokens",
    )


def alpha_needed(alpha: float, gamma: int, c: float, cost_factor: float) -> float | None:
    """The alpha a draft `cost_factor` times as expensive must reach to beat the current expected speed-up."""
    goal = expected_speedup(alpha, gamma, c)
    for step in range(1001):
        a = step / 1000
        if expected_speedup(a, gamma, c * cost_factor) > goal:
            return a
    return None


def larger_draft(stage: str, alpha: float | None, c: float, gamma: int) -> Verdict:
    name = f"{stage}: would a larger draft pay"
    if alpha is None:
        return Verdict(name, "skip", "", "", "run make eval")
    needed = alpha_needed(alpha, gamma, c, 2.0)
    value = f"cost ratio c {c:.3f}, alpha {alpha:.3f}"
    if needed is None:
        return Verdict(name, "ok", value, "", "a 2x larger draft cannot beat this one at this gamma")
    return Verdict(
        name, "ok", value, f"a 2x costlier draft needs alpha >= {needed:.3f}",
        "try a larger draft" if needed - alpha < 0.05 else "",
    )


def memory(peak_mb: float | None, total_mb: float) -> Verdict:
    name = "stage 3: peak memory"
    if peak_mb is None:
        return Verdict(name, "skip", "not recorded", "", "retrain stage 3 to record it")
    share = peak_mb / total_mb
    ok = share < 0.8
    return Verdict(
        name, "ok" if ok else "warn", f"{peak_mb:.0f} MiB of {total_mb:.0f} MiB ({share:.0%})", "< 80 %",
        "" if ok else "lower it with model.gradient_checkpointing=true, a smaller distill.chunk_size, "
        "distill.teacher=cache (no target in memory), or a smaller stage.batch_size",
    )
