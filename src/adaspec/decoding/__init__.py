"""Speculative decoding engine: generation loops, verification, gamma policies and statistics."""

from adaspec.decoding.config import DecodeConfig, DraftQuant, GammaPolicy
from adaspec.decoding.policies import AdaptiveGamma, FixedGamma, HFHeuristicGamma, Policy, build_gamma_policy
from adaspec.decoding.quant import quantize_draft_int8
from adaspec.decoding.speculative import speculative_generate, target_generate, verify_block, verify_greedy
from adaspec.decoding.stats import BlockRecord, GenerationResult, aggregate

__all__ = [
    "AdaptiveGamma",
    "BlockRecord",
    "DecodeConfig",
    "DraftQuant",
    "FixedGamma",
    "GammaPolicy",
    "GenerationResult",
    "HFHeuristicGamma",
    "Policy",
    "aggregate",
    "build_gamma_policy",
    "quantize_draft_int8",
    "speculative_generate",
    "target_generate",
    "verify_block",
    "verify_greedy",
]
