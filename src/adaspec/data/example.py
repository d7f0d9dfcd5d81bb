"""The one record shape every task loader returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Example:
    prompt: str
    target: str  # the text the model learns to produce after the prompt (EOS is added later)
    reference: str  # what the task's score compares against: the final number, or test code
    record: dict[str, Any] = field(default_factory=dict, compare=False)
    finished: bool = True  # False: `target` was cut short (a target answer unfinished within its token budget)
