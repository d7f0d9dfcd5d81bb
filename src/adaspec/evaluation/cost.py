"""The draft/target cost ratio c: seconds of one cached single-token forward, draft over target."""

from __future__ import annotations

import statistics
import time

import torch
from transformers import DynamicCache

from adaspec.decoding.speculative import _forward
from adaspec.models.draft_vocab import DraftVocab


@torch.inference_mode()
def forward_seconds(
    model, prompt: torch.Tensor, repeats: int = 30, vocab_map: DraftVocab | None = None
) -> float:
    """Median seconds of one cached single-token forward after `prompt` (target ids): what a decoding step
    costs. `vocab_map`: `model` is a draft with a reduced vocabulary, which reads the prompt in draft ids."""
    if vocab_map is not None:
        prompt = vocab_map.to(prompt.device).to_draft(prompt)
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


def cost_ratio(draft, target, prompt: torch.Tensor, vocab_map: DraftVocab | None = None) -> float:
    return forward_seconds(draft, prompt, vocab_map=vocab_map) / forward_seconds(target, prompt)
