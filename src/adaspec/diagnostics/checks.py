"""The practice note's troubleshooting guide as checks: measured numbers in, verdicts out.

Each check is a pure function of numbers already measured, so its rule can be read (and tested)
without any model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from adaspec.diagnostics.cost_ratio import MAX_RELATIVE_CI, CostRatio

if TYPE_CHECKING:  # the schedule module imports the stages (Lightning); the checks need only its numbers
    from adaspec.diagnostics.schedule import ConfiguredSchedule

REF_KL_MAX = 0.2  # the note: the reference's per-token KL to the target should be below 0.2
DRAFT_AGREEMENT_MIN = 0.7  # the note: below ~70 % draft accuracy rejections climb steeply
WARMUP_FRAC = 0.1  # the note: warm up over about 10 % of the steps ...
WARMUP_TOLERANCE = 0.06  # ... give or take this share of the steps
MIN_LR_RATIO = 0.1  # the note: decay to 1/10 of the peak ...
DECAY_END_FRAC = 0.9  # ... reached at 90 % of the steps
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


def lr_schedule(stage: str, schedule: ConfiguredSchedule | None, logged_mismatch=None) -> Verdict:
    """The configured schedule, rebuilt for every step: warmup near 10 % of the steps, a low final rate.

    `logged_mismatch`: (step, logged, configured) where the logged rate is not the configured one.
    """
    name = f"{stage}: learning-rate warmup and decay"
    if schedule is None:
        return Verdict(name, "skip", "no config.yaml or step count", "", "retrain the stage to record them")
    values = schedule.multipliers()
    warmup = schedule.warmup_steps()
    share = warmup / schedule.steps
    floor = values[-1] / max(values)
    value = (
        f"warmup {warmup} of {schedule.steps} steps ({share:.0%}), last lr {floor:.2f}x peak "
        f"(from config.yaml: warmup_frac {schedule.warmup_frac:g}, min_lr_ratio {schedule.min_lr_ratio:g}, "
        f"decay_end_frac {schedule.decay_end_frac:g})"
    )
    threshold = f"warmup {WARMUP_FRAC:.0%} +- {WARMUP_TOLERANCE:.0%} of steps, last <= {LR_FLOOR_MAX}x peak"
    advice = []
    if abs(share - WARMUP_FRAC) > WARMUP_TOLERANCE:
        if abs(schedule.warmup_frac - WARMUP_FRAC) > WARMUP_TOLERANCE:
            advice.append(f"set stage.warmup_frac={WARMUP_FRAC:g}")
        else:  # the configured fraction is right but rounds to too few (or no) steps
            advice.append(f"{schedule.steps} steps are too few for a {WARMUP_FRAC:.0%} warmup: train longer "
                          "(stage.max_epochs or stage.max_steps)")
    if floor > LR_FLOOR_MAX:
        if schedule.min_lr_ratio > LR_FLOOR_MAX:
            advice.append(f"decay further: stage.min_lr_ratio={MIN_LR_RATIO:g}")
        else:  # the floor is right but the cosine has not reached it by the last step
            advice.append(f"end the decay before the last step: stage.decay_end_frac={DECAY_END_FRAC:g}")
    if logged_mismatch is not None:
        step, logged_lr, expected = logged_mismatch
        value += f"; logged lr {logged_lr:.3g} at step {step}, the config gives {expected:.3g}"
        advice.append("the artefact was not trained with the config it records: retrain it (overwrite=true)")
    return Verdict(name, "warn" if advice else "ok", value, threshold, "; ".join(advice))


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
        name, "ok" if ok else "fail", f"{measured:.2f}x" + (f" (alpha {alpha:.3f})" if alpha is not None else ""), "> 1",
        "" if ok else "speculation costs more than it saves: raise alpha (better draft) or lower gamma",
    )


def expected_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al.: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))."""
    if alpha >= 1:
        return (gamma + 1) / (gamma * c + 1)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))


def best_gamma(alpha: float, c: float, max_gamma: int = 16) -> int:
    return max(range(1, max_gamma + 1), key=lambda g: expected_speedup(alpha, g, c))


def gamma_choice(stage: str, alpha: float | None, c: CostRatio | None, gamma: int, context_len: int) -> Verdict:
    """Expected speed-ups against target-only decoding at the configured and the best gamma.

    Advises only when c is measured precisely enough: the 95 % interval of its median at most
    MAX_RELATIVE_CI of the median wide.
    """
    name = f"{stage}: configured gamma"
    if alpha is None:
        return Verdict(name, "skip", f"gamma={gamma}", "", "run make eval")
    if c is None:
        return Verdict(name, "skip", f"gamma={gamma}", "", "cost ratio not measured")
    noise = f"c's 95% CI <= {MAX_RELATIVE_CI:.0%} of its median wide"
    if c.too_noisy:
        return Verdict(
            name, "skip", f"gamma={gamma}, alpha {alpha:.3f}, {c.describe()}", noise,
            "the timing behind c is too noisy to advise on gamma: rerun make diagnose on an idle machine",
        )
    best = best_gamma(alpha, c.median)
    if context_len > LONG_CONTEXT:
        best = max(1, best - 1)
    now, then = expected_speedup(alpha, gamma, c.median), expected_speedup(alpha, best, c.median)
    ok = then / now < 1.05
    value = (
        f"gamma={gamma}: expected {now:.2f}x target-only speed; best gamma {best}: {then:.2f}x "
        f"(alpha {alpha:.3f}, {c.describe()})"
    )
    if ok:
        return Verdict(name, "ok", value, f"within 5 % of the best expected speed-up; {noise}", "")
    action = f"use gamma={best}: expected {then:.2f}x target-only speed instead of {now:.2f}x"
    if then < 1:
        action += "; no gamma beats target-only decoding at this alpha and c: the draft needs a higher alpha"
    action += f"; the note suggests 5-8, 1-2 lower beyond {LONG_CONTEXT} tokens"
    return Verdict(name, "warn", value, f"within 5 % of the best expected speed-up; {noise}", action)


def alpha_needed(alpha: float, gamma: int, c: float, cost_factor: float) -> float | None:
    """The alpha a draft `cost_factor` times as expensive must reach to beat the current expected speed-up."""
    goal = expected_speedup(alpha, gamma, c)
    for step in range(1001):
        a = step / 1000
        if expected_speedup(a, gamma, c * cost_factor) > goal:
            return a
    return None


def larger_draft(stage: str, alpha: float | None, c: CostRatio | None, gamma: int) -> Verdict:
    name = f"{stage}: would a larger draft pay"
    if alpha is None:
        return Verdict(name, "skip", "", "", "run make eval")
    if c is None or c.too_noisy:
        value = c.describe() if c else "cost ratio not measured"
        return Verdict(name, "skip", value, f"c's 95% CI <= {MAX_RELATIVE_CI:.0%} of its median wide",
                       "the timing behind c is too noisy to judge: rerun make diagnose on an idle machine")
    needed = alpha_needed(alpha, gamma, c.median, 2.0)
    value = f"{c.describe()}, alpha {alpha:.3f}"
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
