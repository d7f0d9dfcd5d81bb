"""MBPP scoring: code extraction, pass@1 over a mix of outcomes, and the dataset's own reference solutions."""

from __future__ import annotations

import pytest

from adaspec.data.mbpp import load_mbpp
from adaspec.data.tasks import Example
from adaspec.evaluation.mbpp_score import KNOWN_BROKEN_MBPP_TEST_IDS, METRIC, extract_code, pass_at_1
from tests.tasks.conftest import task_cfg

ADD_TESTS = "assert add(1, 2) == 3\n"


@pytest.mark.parametrize(
    ("generated", "code"),
    [
        ("def f():\n    return 1\n[DONE]", "def f():\n    return 1"),
        ("[BEGIN]\ndef f():\n    return 1\n[DONE]\nmore text [DONE]", "def f():\n    return 1"),
        ("def f():\n\treturn 1", "def f():\n\treturn 1"),  # no [DONE]: everything
        ("\n\ndef f():\n    return 1\n\n[DONE]", "def f():\n    return 1"),
        ("[DONE]", ""),
    ],
)
def test_extract_code(generated, code):
    assert extract_code(generated) == code


def test_pass_at_1_keeps_going_after_every_kind_of_failure():
    examples = [Example("p", "t", ADD_TESTS, {"task_id": i}) for i in range(5)]
    generated = [
        "def add(a, b):\n    return a + b\n[DONE]",
        "def add(a, b):\n    return a - b\n[DONE]",
        "def add(a, b):\n    while True:\n        pass\n[DONE]",
        "def add(a, b:\n[DONE]",
        "import os\nos._exit(0)\n[DONE]",
    ]
    score = pass_at_1(list(zip(generated, examples, strict=True)), timeout_s=1.0)
    assert [r.task_id for r in score.per_task] == [0, 1, 2, 3, 4]
    assert [r.status for r in score.per_task] == ["passed", "failed", "timeout", "failed", "exited_early"]
    assert score.metrics == {METRIC: pytest.approx(0.2)} and METRIC == "mbpp/pass@1"
    assert pass_at_1([]).mean == 0.0


def reference_samples(mbpp_dir, every: int = 1) -> list[tuple[str, Example]]:
    test_split = load_mbpp(task_cfg("mbpp", mbpp_dir))["test"]
    return [(example.target, example) for example in test_split[::every]]


def failing_ids(samples, timeout_s: float = 10.0) -> dict[int, str]:
    score = pass_at_1(samples, timeout_s=timeout_s)
    return {r.task_id: f"{r.status}: {r.stderr_tail[-300:]}" for r in score.per_task if not r.passed}


def test_reference_solutions_pass_on_a_sample_of_the_test_split(mbpp_dir):
    samples = [
        s
        for s in reference_samples(mbpp_dir, every=12)
        if s[1].record["task_id"] not in KNOWN_BROKEN_MBPP_TEST_IDS
    ]
    assert len(samples) >= 40
    assert failing_ids(samples) == {}


@pytest.mark.slow
def test_reference_solutions_pass_on_the_whole_test_split(mbpp_dir):
    samples = reference_samples(mbpp_dir)
    assert len(samples) == 500
    unexpected = {i: why for i, why in failing_ids(samples).items() if i not in KNOWN_BROKEN_MBPP_TEST_IDS}
    assert unexpected == {}


@pytest.mark.slow
def test_known_slow_reference_passes_with_more_time(mbpp_dir):
    samples = [s for s in reference_samples(mbpp_dir) if s[1].record["task_id"] == 123]
    assert failing_ids(samples, timeout_s=60.0) == {}
