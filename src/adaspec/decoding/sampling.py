"""Picking tokens: the argmax (`greedy`), and draws from distributions without making the host wait for the device.

`torch.multinomial` on a CUDA tensor waits for the device; the exponential race (gpt-fast's
`multinomial_sample_one_no_sync`) draws from the same distribution on the device alone: with independent
E_i ~ Exp(1), argmax_i p_i / E_i is i with probability p_i / sum(p). On the CPU there is nothing to wait for, and
`torch.multinomial` keeps every sampled result measured there reproducible, so the race is the default only where
the probabilities live on another device.
"""

from __future__ import annotations

import torch
from torch import Tensor


def greedy(logits: Tensor, keepdim: bool = False) -> Tensor:
    """`logits.argmax(-1)`, the same index: on the CPU a bfloat16 argmax runs element by element (1.2 ms over 13 rows
    of a 49,152-way vocabulary, AMD EPYC) where converting to float32 first, which is exact, takes 0.3 ms."""
    if logits.device.type == "cpu" and logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()
    return logits.argmax(-1, keepdim=keepdim)


def sample(weights: Tensor, generator: torch.Generator | None = None, race: bool | None = None) -> Tensor:
    """One index `[..., 1]` per row of `weights [..., V]` (non-negative, not necessarily normalised), drawn in
    proportion to them; `race`: the exponential race (default: off the CPU), else `torch.multinomial`."""
    if race is None:
        race = weights.device.type != "cpu"
    if race:
        exponentials = torch.empty_like(weights, dtype=torch.float32).exponential_(1, generator=generator)
        return (weights.float() / exponentials).argmax(-1, keepdim=True)
    rows = weights.reshape(-1, weights.shape[-1])
    return torch.multinomial(rows, 1, generator=generator).reshape(*weights.shape[:-1], 1)
