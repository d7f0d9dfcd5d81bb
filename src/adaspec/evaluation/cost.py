"""The draft/target cost ratio c: seconds of one cached single-token forward, draft over target."""

from __future__ import annotations

import statistics
import time

import torch
from transformers import DynamicCache

from adaspec.decoding.speculative import _forward


@torch.inference_mode()
def forward_seconds(model, prompt: torch.Tensor, repeats: int = 30) -> float:
    """Median seconds of one cached single-token forward after `prompt`: what a decoding step costs."""
    times = []
    for _ in range(repeats):
        cache = DynamicCache(config=model.config)
        _forward(model, prompt, cache, logits_to_keep=1)
        if prompt.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        _forward(model, prompt[:, -1:], cache, logits_to_keep=1)
        if prompt.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cost_ratio(draft, target, prompt: torch.Tensor) -> float:
    return forward_seconds(draft, prompt) / forward_seconds(target, prompt)
