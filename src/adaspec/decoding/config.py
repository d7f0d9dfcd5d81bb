"""Schema of the `decode` config group."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class GammaPolicy(StrEnum):
    fixed = "fixed"
    adaptive = "adaptive"
    hf = "hf"


class DraftQuant(StrEnum):
    none = "none"
    int8 = "int8"


@dataclass
class DecodeConfig:
    policy: GammaPolicy = GammaPolicy.fixed
    gamma: int = 5
    temperature: float = 0.0
    max_new_tokens: int = 128
    adaptive_window: int = 8
    long_context_threshold: int = 2048
    long_context_reduction: int = 1
    draft_quant: DraftQuant = DraftQuant.none
