"""Schema of the `decode` config group."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class GammaPolicy(StrEnum):
    fixed = "fixed"
    adaptive = "adaptive"
    hf = "hf"


class DraftQuant(StrEnum):
    none = "none"
    int8 = "int8"


class Precision(StrEnum):
    float32 = "float32"
    bfloat16 = "bfloat16"


class KVCacheKind(StrEnum):
    dynamic = "dynamic"  # grows by concatenation, cropped by slicing (transformers' DynamicCache)
    static = "static"  # preallocated, written in place and cropped by moving its length back (StaticCache)


@dataclass
class DecodeConfig:
    """conf/decode/<policy>.yaml sets only `policy` and links `gamma` to the top-level `gamma`; the rest
    are these defaults (adaspec.decoding.policies says what each policy does with them)."""

    policy: GammaPolicy = GammaPolicy.fixed
    gamma: int = 5  # draft tokens per block: fixed, the adaptive base, the hf start (1..32)
    temperature: float = 0.0  # 0: greedy verification; > 0: sampling with the standard rejection rule
    # temperature > 0: the temperature the draft proposes at (null: `temperature`). Exact whatever it is (a proposal
    # is accepted with min(1, p/q) of the q it was drawn from); it pays where the draft is flatter or sharper than
    # the target on the text decoded (demo-real's head was not: experiments/smollm2/README.md, "The draft's temperature")
    draft_temperature: float | None = None
    max_new_tokens: int = 128
    adaptive_window: int = 8  # policy=adaptive: blocks in the rejection-rate window
    long_context_threshold: int = 2048  # beyond this many context tokens, gamma is lowered ...
    long_context_reduction: int = 1  # ... by this much (1 or 2), never below 1
    draft_quant: DraftQuant = DraftQuant.none  # int8: also evaluate an 8-bit copy of each draft
    # How the models run while decoding (adaspec.decoding.serving): what a speed-up is measured in.
    target_dtype: Precision = Precision.float32
    draft_dtype: Precision = Precision.float32
    kv_cache: KVCacheKind = KVCacheKind.dynamic  # the target's; a draft's cache stays dynamic
    compile: bool = False  # torch.compile the target's decoding steps (needs kv_cache=static); CUDA graphs on a GPU
    draft_compile: bool = False  # the same for an EAGLE-3 head's steps, on a static cache of its own
    # Draft trees (adaspec.decoding.tree): `off` (chains of gamma), a shape name such as `k4-d4-n16` or
    # `k4-d4-n12+lookup8` (the hybrid: a prompt-lookup branch of 8), or a mapping {top_k: 4, depth: 4, nodes: 16,
    # lookup: 0} (lookup: a length, or true for the depth); `auto`: the evaluation chooses each draft's shape or chain
    # by expected speed-up, measured on held-out prompts (adaspec.evaluation.tree_choice; eval.tree_candidates)
    tree: Any = "off"
