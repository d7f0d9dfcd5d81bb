"""MBPP scoring: cut the code out of a generation, run it in the sandbox, judge the task's asserts outside it."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adaspec.data.prompts import CODE_BEGIN, CODE_DONE
from adaspec.sandbox.checked_asserts import top_level_names
from adaspec.sandbox.isolation import SandboxResult, run_program

if TYPE_CHECKING:
    from adaspec.data.example import Example

METRIC = "mbpp/pass@1"
# Test-split tasks whose own reference solution does not pass in the sandbox (10 s, 512 MB).
KNOWN_BROKEN_MBPP_TEST_IDS: dict[int, str] = {
    123: "correct but too slow: O(n^2) divisor sums up to 9999 take ~10 s of CPU, at the 10 s timeout",
}


FENCED = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(generated_text: str) -> str:
    """The code a generation holds: the first markdown code block where there is one (how instruct models
    answer in chat format), else the text before "[DONE]", without a leading "[BEGIN]"."""
    fenced = FENCED.search(generated_text)
    if fenced:
        return fenced.group(1).strip("\n")
    code = generated_text.split(CODE_DONE, 1)[0].lstrip()
    if code.startswith(CODE_BEGIN.strip()):
        code = code[len(CODE_BEGIN.strip()) :]
    return code.strip("\n")


@dataclass(frozen=True)
class TaskResult:
    task_id: int | None
    passed: bool
    status: str
    stderr_tail: str
    duration_s: float


@dataclass(frozen=True)
class PassAtOneScore:
    per_task: list[TaskResult]
    mean: float

    @property
    def metrics(self) -> dict[str, float]:
        return {METRIC: self.mean}


def run_sample(generated_text: str, example: Example, timeout_s: float, memory_mb: int) -> TaskResult:
    # The names the reference solution defines are the program's even where they shadow a builtin the
    # judge knows (task 126 asks for `sum`); taken from the task, never from the generated code.
    task_names = top_level_names(example.record.get("code", ""))
    try:
        code = extract_code(generated_text)
        result = run_program(code, example.reference, timeout_s, memory_mb, program_names=task_names)
    except Exception as e:  # one broken sample must not stop the evaluation
        result = SandboxResult(False, "error", f"sandbox error: {e!r}", 0.0)
    task_id = example.record.get("task_id")
    return TaskResult(task_id, result.passed, result.status, result.stderr_tail, result.duration_s)


def pass_at_1(
    samples: list[tuple[str, Example]], timeout_s: float = 10.0, memory_mb: int = 512, workers: int = 2
) -> PassAtOneScore:
    """Run one generation per task (text from the model, "[DONE]" and all) against its tests.

    Each sample is (generated text, example); results keep the order of `samples`.
    """

    def score(sample: tuple[str, Example]) -> TaskResult:
        return run_sample(*sample, timeout_s=timeout_s, memory_mb=memory_mb)

    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(score, samples))
    else:
        results = [score(sample) for sample in samples]
    return PassAtOneScore(results, sum(r.passed for r in results) / len(results) if results else 0.0)
