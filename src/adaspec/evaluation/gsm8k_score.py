"""GSM8K scoring: read the final number from generated text and compare it with the reference."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from adaspec.data.example import Example

METRIC = "gsm8k/exact_match"
ANSWER_MARKERS = ("The final answer is:", "####")
# Digits with optional thousands separators and decimals; a sentence's final "." is not a decimal point.
NUMBER = r"-?\d(?:[\d,]*\d)?(?:\.\d+)?"
NUMBER_AFTER_MARKER = re.compile(r"\s*\$?\s*(" + NUMBER + ")")


def normalise_number(text: str) -> str | None:
    """'1,234.50' -> '1234.5', '$7.00' -> '7', '-3.' -> '-3'; None if `text` is not a number."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_final_number(text: str) -> str | None:
    """The number after the first answer marker ("The final answer is:" or "####"), else the last number.

    A marker with no number right after it means no answer: None, as for text without any number.
    """
    marker_positions = [(text.find(m), m) for m in ANSWER_MARKERS if m in text]
    if marker_positions:
        position, marker = min(marker_positions)
        match = NUMBER_AFTER_MARKER.match(text, position + len(marker))
        return normalise_number(match.group(1)) if match else None
    numbers = re.findall(NUMBER, text)
    return normalise_number(numbers[-1]) if numbers else None


def exact_match(prediction_text: str, reference: str) -> bool:
    """True when the prediction's final number equals the reference number (after normalising both)."""
    predicted = extract_final_number(prediction_text)
    expected = normalise_number(reference)
    return predicted is not None and expected is not None and predicted == expected


@dataclass(frozen=True)
class ExactMatchScore:
    per_example: list[bool]
    mean: float

    @property
    def metrics(self) -> dict[str, float]:
        return {METRIC: self.mean}


def exact_match_score(samples: list[tuple[str, Example]]) -> ExactMatchScore:
    """Exact match of each (generated text, example) pair, and their mean (0.0 for no samples)."""
    matches = [exact_match(generated, example.reference) for generated, example in samples]
    return ExactMatchScore(matches, sum(matches) / len(matches) if matches else 0.0)
