"""The draft/target cost ratio c, measured so that two drafts of one architecture get the same answer.

One timed call is one cached single-token forward of the target, or one proposal of a draft
(`adaspec.drafts.Draft`), after a held-out prompt: what a decoding step costs. For each prompt every
model prefills once; then each round times the target and every draft back to back (in a rotating order)
and crops their caches back, so every call sees the same context.
A draft's sample is its time over the target's time in the same round, and c is the median of these
paired ratios over all rounds of all prompts (the same prompts for every draft), after warm-up rounds.

On CPU the clock is the calling thread's CPU time, with torch pinned to one thread: wall time on a
shared machine mostly measures the other processes (two drafts of one architecture got c = 0.651 and
0.313 from single wall-clock medians timed apart). On GPU it is wall time after synchronising.

Reported: the median, the interquartile range of the per-call ratios (their spread) and a
distribution-free 95 % confidence interval of the median. The rule: c is too noisy to advise on
gamma when that interval is wider than MAX_RELATIVE_CI of the median (i.e. more than about +-10 %).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass

import torch

from adaspec.decoding.serving import as_served
from adaspec.drafts import Draft

CALLS_PER_PROMPT = 16  # timed calls of each model per prompt (64 over the 4 prompts diagnose uses)
WARMUP_CALLS = 4  # untimed rounds per prompt first (allocator, caches, lazy init)
MAX_RELATIVE_CI = 0.2  # too noisy when the median's 95 % interval is wider than this share of it


@dataclass(frozen=True)
class CostRatio:
    median: float
    q1: float
    q3: float
    ci_low: float  # 95 % confidence interval of the median
    ci_high: float
    calls: int  # timed calls of each model
    threads: int
    clock: str  # "thread CPU time" or "wall time"

    @property
    def relative_ci(self) -> float:
        return (self.ci_high - self.ci_low) / self.median if self.median > 0 else math.inf

    @property
    def too_noisy(self) -> bool:
        return self.relative_ci > MAX_RELATIVE_CI

    def describe(self) -> str:
        return (
            f"c {self.median:.3f} (95% CI {self.ci_low:.3f}-{self.ci_high:.3f}, IQR {self.q1:.3f}-{self.q3:.3f}; "
            f"{self.calls} calls per model, {self.clock}, {self.threads} thread{'s' * (self.threads != 1)})"
        )

    def as_dict(self) -> dict[str, float | int | str | bool]:
        return {**asdict(self), "relative_ci": self.relative_ci, "too_noisy": self.too_noisy}


def median_interval(values: list[float]) -> tuple[float, float]:
    """Distribution-free 95 % confidence interval of the median: order statistics n/2 -+ 0.98 sqrt(n)."""
    ordered, n = sorted(values), len(values)
    low = max(0, math.floor(n / 2 - 0.98 * math.sqrt(n)) - 1)
    high = min(n - 1, math.ceil(n / 2 + 1 + 0.98 * math.sqrt(n)) - 1)
    return ordered[low], ordered[high]


def summarise(ratios: list[float], threads: int, clock: str) -> CostRatio:
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    low, high = median_interval(ratios)
    return CostRatio(median, q1, q3, low, high, len(ratios), threads, clock)


@torch.inference_mode()
def measure_cost_ratios(
    target,
    drafts: dict[str, Draft],
    prompts: list[torch.Tensor],
    calls_per_prompt: int = CALLS_PER_PROMPT,
    warmup_calls: int = WARMUP_CALLS,
) -> dict[str, CostRatio]:
    """{draft name: CostRatio} from paired timings of each draft and the target on the same prompts."""
    if not drafts:
        return {}
    on_gpu = prompts[0].is_cuda
    clock = "wall time" if on_gpu else "thread CPU time"
    saved_threads = torch.get_num_threads()
    threads = saved_threads if on_gpu else 1
    torch.set_num_threads(threads)
    ratios: list[list[float]] = [[] for _ in drafts]
    try:
        for prompt in prompts:
            steps, rollbacks = prefilled_calls(target, list(drafts.values()), prompt)
            for call in range(warmup_calls + calls_per_prompt):
                seconds = [0.0] * len(steps)
                for i in [(call + j) % len(steps) for j in range(len(steps))]:
                    seconds[i] = timed(steps[i], on_gpu)
                    rollbacks[i]()
                if call >= warmup_calls:
                    for d, draft_seconds in enumerate(seconds[1:]):
                        ratios[d].append(draft_seconds / max(seconds[0], 1e-9))
    finally:
        torch.set_num_threads(saved_threads)
    return {name: summarise(r, threads, clock) for name, r in zip(drafts, ratios, strict=True)}


def prefilled_calls(target, drafts: list[Draft], prompt: torch.Tensor) -> tuple[list, list]:
    """For the target and each draft, prefilled on all of `prompt` but its last token: a call that makes one
    step on that last token, and one that undoes it."""
    context = prompt.shape[1] - 1
    served = as_served(target)  # `Served` in the evaluation's serving configuration, or a model as it is
    served.warm_up([1])
    cache = served.new_cache(prompt.shape[1])
    served.prefill(prompt[:, :-1], cache)
    steps = [lambda: served.step(prompt[:, -1:], cache)]
    rollbacks = [lambda: served.crop(cache, context)]
    for draft in drafts:
        session = draft.start(prompt, draft.verify_width(target.config.vocab_size))
        steps.append(lambda s=session: s.propose(prompt[0], 1, 0.0, None))
        rollbacks.append(lambda s=session: s.rollback(context))
    return steps, rollbacks


def timed(call, on_gpu: bool) -> float:
    """Seconds of `call()` (CPU time of this thread on CPU)."""
    if on_gpu:
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        return time.perf_counter() - start
    start = time.thread_time()
    call()
    return time.thread_time() - start
