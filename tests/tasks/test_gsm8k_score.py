"""GSM8K scoring: reading the final number from generated text."""

from __future__ import annotations

import pytest

from adaspec.data.example import Example
from adaspec.evaluation.gsm8k_score import METRIC, exact_match, exact_match_score, extract_final_number


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("so 3+4=7.\nThe final answer is: 7", "7"),
        ("The final answer is:  72", "72"),  # the official target keeps the space after "####"
        ("The final answer is: $1,234.00.", "1234"),
        ("The final answer is: 5.50", "5.5"),
        ("The final answer is: -12", "-12"),
        ("The final answer is: 18.", "18"),
        ("He pays 10 then 20.\n#### 30", "30"),
        ("#### 1,000,000", "1000000"),
        ("We get 3 boxes, then 4 more, so 12 in total.", "12"),  # no marker: the last number
        ("It costs $8.0 in the end", "8"),
        ("The final answer is: 42\n\nQuestion: next one... The final answer is: 5", "42"),  # first marker
        ("Step 1 gives 4. The final answer is: unknown", None),  # marker without a number
        ("no numbers at all", None),
        ("", None),
    ],
)
def test_extract_final_number(text, number):
    assert extract_final_number(text) == number


@pytest.mark.parametrize(
    ("prediction", "reference", "match"),
    [
        ("The final answer is: 1,200", "1200", True),
        ("The final answer is: 1200.00", "1,200", True),
        ("The final answer is: $18", "18", True),
        ("The final answer is: 17", "18", False),
        ("The final answer is: 18.5", "18", False),
        ("I do not know", "18", False),
        ("the answer is 18", "18", True),
    ],
)
def test_exact_match(prediction, reference, match):
    assert exact_match(prediction, reference) is match


def test_exact_match_score_aggregates():
    examples = [Example("q", "t", ref) for ref in ("1", "2", "3", "4")]
    generated = ["The final answer is: 1", "#### 2", "nothing", "The final answer is: 5"]
    score = exact_match_score(list(zip(generated, examples, strict=True)))
    assert score.per_example == [True, True, False, False]
    assert score.metrics == {METRIC: 0.5} and METRIC == "gsm8k/exact_match"
    assert exact_match_score([]).mean == 0.0
