"""The task score the evaluation reports: GSM8K exact match for math tasks, MBPP pass@1 (sandbox) for code."""

from __future__ import annotations

from adaspec.data.example import Example
from adaspec.evaluation.scoring import task_metric, task_score


def test_math_and_code_scores():
    assert task_metric("math") == "gsm8k/exact_match" and task_metric("code") == "mbpp/pass@1"
    math = [Example("q", "a", "12"), Example("q", "a", "7")]
    assert task_score("math", ["so 3*4=12\nThe final answer is: 12", "#### 8"], math) == 0.5
    code = [Example("p", "t", "assert add(2, 3) == 5", {"task_id": 1})]
    assert task_score("code", ["def add(a, b):\n    return a + b\n[DONE]"], code) == 1.0
    assert task_score("code", ["def add(a, b):\n    return a - b\n[DONE]"], code) == 0.0
