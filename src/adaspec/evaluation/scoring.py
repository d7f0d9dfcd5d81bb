"""The task's own score of generated texts: GSM8K exact match for math tasks, MBPP pass@1 for code."""

from __future__ import annotations

from adaspec.data.example import Example
from adaspec.evaluation import gsm8k_score, mbpp_score


def task_metric(kind: str) -> str:
    """The metric name of a task kind: `gsm8k/exact_match` (math; arith too) or `mbpp/pass@1` (code)."""
    return {"math": gsm8k_score.METRIC, "code": mbpp_score.METRIC}[kind]


def task_score(kind: str, texts: list[str], examples: list[Example]) -> float:
    """Mean score of `texts[i]` generated for `examples[i]`; code runs in the sandbox."""
    samples = list(zip(texts, examples, strict=True))
    if kind == "math":
        return gsm8k_score.exact_match_score(samples).mean
    if kind == "code":
        return mbpp_score.pass_at_1(samples).mean
    raise ValueError(f"unknown task kind {kind!r}")
