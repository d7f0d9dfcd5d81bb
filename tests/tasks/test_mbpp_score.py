"""MBPP scoring: code extraction, pass@1 over mixed outcomes, forged passes, the dataset's own solutions."""

from __future__ import annotations

import pytest

from adaspec.data.example import Example
from adaspec.data.mbpp import checking_program, load_mbpp
from adaspec.data.sources import read_jsonl
from adaspec.evaluation.mbpp_score import (
    KNOWN_BROKEN_MBPP_TEST_IDS,
    METRIC,
    extract_code,
    pass_at_1,
    run_sample,
)
from adaspec.sandbox.checked_asserts import plan_tests, top_level_names
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
        # chat-format answers of instruct models: the first markdown code block, whatever surrounds it
        ("```python\ndef f():\n    return 1\n```\n\nThis returns 1.", "def f():\n    return 1"),
        ("Here it is:\n```\ndef f():\n    return 1\n", "def f():\n    return 1"),  # unclosed block
        ("```py\ndef f():\n    return 1\n```\n```python\nprint(2)\n```", "def f():\n    return 1"),
    ],
)
def test_extract_code(generated, code):
    assert extract_code(generated) == code


@pytest.mark.chaos("scorer")
def test_pass_at_1_keeps_going_after_every_kind_of_failure():
    examples = [Example("p", "t", ADD_TESTS, {"task_id": i}) for i in range(5)]
    generated = [
        "def add(a, b):\n    return a + b\n[DONE]",
        "def add(a, b):\n    return a - b\n[DONE]",
        "def add(a, b):\n    while True:\n        pass\n[DONE]",
        "def add(a, b:\n[DONE]",
        "import os\nos._exit(0)\n[DONE]",
    ]
    # the loop never ends; the timeout leaves the other programs (a fraction of a second each) a wide margin
    score = pass_at_1(list(zip(generated, examples, strict=True)), timeout_s=5.0)
    assert [r.task_id for r in score.per_task] == [0, 1, 2, 3, 4]
    assert [r.status for r in score.per_task] == ["passed", "failed", "timeout", "failed", "exited_early"]
    assert score.metrics == {METRIC: pytest.approx(0.2)} and METRIC == "mbpp/pass@1"
    assert pass_at_1([]).mean == 0.0


def mbpp_example(mbpp_dir, task_id: int) -> Example:
    splits = load_mbpp(task_cfg("mbpp", mbpp_dir))
    return next(e for split in splits.values() for e in split if e.record["task_id"] == task_id)


def test_every_mbpp_assert_is_judged_outside_the_sandbox(mbpp_dir):
    # All 974 tasks: each assert sends exactly one expression to the sandbox, a call of a function the
    # task's reference solution defines; the comparison and the expected value stay with the judge.
    records = [
        record for _, record in read_jsonl(mbpp_dir / "mbpp.jsonl", ("code", "test_list", "test_setup_code"))
    ]
    assert len(records) == 974
    for record in records:
        names = top_level_names(record["code"])
        plan = plan_tests(checking_program(record), names)
        assert len(plan.probes) == len(plan.checks) == len(record["test_list"]), record["task_id"]
        assert all(probe.split("(")[0] in names for probe in plan.probes), (record["task_id"], plan.probes)


FORGERIES = {
    "equal to everything": (
        "class Anything(str):\n    def __eq__(self, other):\n        return True\n"
        "def remove_Occ(s, ch):\n    return Anything()\n"
    ),
    "report forged from the sandbox's frames": (
        "import os, sys\n"
        "def remove_Occ(s, ch):\n"
        "    frame = sys._getframe()\n"
        "    while 'report_fd' not in frame.f_locals:\n"
        "        frame = frame.f_back\n"
        "    os.write(frame.f_locals['report_fd'], b'[true, true, true]')\n"
        "    os._exit(0)\n"
    ),
}


@pytest.mark.chaos("scorer")
@pytest.mark.parametrize("trick", FORGERIES)
def test_forged_passes_fail_on_a_real_task(mbpp_dir, trick):
    example = mbpp_example(mbpp_dir, 11)  # assert remove_Occ("hello","l") == "heo", ...
    assert run_sample(example.target, example, timeout_s=10, memory_mb=512).passed
    result = run_sample(FORGERIES[trick] + "[DONE]", example, timeout_s=10, memory_mb=512)
    assert not result.passed and result.status == "failed", result.stderr_tail


def test_a_task_function_named_like_a_builtin_is_the_programs(mbpp_dir):
    example = mbpp_example(mbpp_dir, 126)  # "assert sum(10,15) == 6": the sum of common divisors
    assert run_sample(example.target, example, timeout_s=10, memory_mb=512).passed
    wrong = "def sum(a, b):\n    return a + b\n[DONE]"
    assert run_sample(wrong, example, timeout_s=10, memory_mb=512).status == "failed"


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
