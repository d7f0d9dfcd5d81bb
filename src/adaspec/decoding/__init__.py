"""Speculative decoding engine: generation loops, verification, gamma policies and statistics.

Names are imported on first use, so that `adaspec.config.schema` (which needs only the `DecodeConfig`
schema) can be imported without torch and transformers: a config error is reported in a second.
"""

from importlib import import_module

_WHERE = {
    "DecodeConfig": "config",
    "DraftQuant": "config",
    "GammaPolicy": "config",
    "AdaptiveGamma": "policies",
    "FixedGamma": "policies",
    "HFHeuristicGamma": "policies",
    "Policy": "policies",
    "build_gamma_policy": "policies",
    "quantize_draft_int8": "quant",
    "speculative_generate": "speculative",
    "target_generate": "speculative",
    "verify_block": "speculative",
    "verify_greedy": "speculative",
    "BlockRecord": "stats",
    "GenerationResult": "stats",
    "aggregate": "stats",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'adaspec.decoding' has no attribute {name!r}")
    return getattr(import_module(f"adaspec.decoding.{_WHERE[name]}"), name)
