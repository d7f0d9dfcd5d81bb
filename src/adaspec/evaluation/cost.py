"""Forward-call costs: seconds of one cached forward, and the cost ratio c (draft over target, one token)."""

from __future__ import annotations

import statistics
import time

import torch
from transformers import DynamicCache

from adaspec.decoding.speculative import _forward
from adaspec.models.draft_vocab import DraftVocab


@torch.inference_mode()
def forward_seconds(
    model, prompt: torch.Tensor, n_tokens: int = 1, repeats: int = 30, vocab_map: DraftVocab | None = None
) -> float:
    """Median seconds of one forward of the last `n_tokens` of `prompt` (target ids) on top of the cached
    rest, with their logits: a decoding step (1) or the verification of gamma proposals (gamma + 1).
    `vocab_map`: `model` is a draft with a reduced vocabulary, which reads the prompt in draft ids."""
    if vocab_map is not None:
        prompt = vocab_map.to(prompt.device).to_draft(prompt)
    context, new = prompt[:, :-n_tokens], prompt[:, -n_tokens:]
    times = []
    for _ in range(repeats):
        cache = DynamicCache(config=model.config)
        _forward(model, context, cache, logits_to_keep=1)
        if prompt.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        _forward(model, new, cache, logits_to_keep=n_tokens)
        if prompt.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cost_ratio(draft, target, prompt: torch.Tensor, vocab_map: DraftVocab | None = None) -> float:
    return forward_seconds(draft, prompt, vocab_map=vocab_map) / forward_seconds(target, prompt)


def call_costs(target, drafts: dict[str, tuple], prompt: torch.Tensor, gammas: list[int]) -> dict:
    """Median seconds of the calls a block makes: the target's one-token step and its verification of
    gamma + 1 tokens (each gamma), each draft's one-token step (`drafts`: name -> (model, vocab_map))."""
    return {
        "target_1_s": forward_seconds(target, prompt),
        "target_verify_s": {str(g): forward_seconds(target, prompt, g + 1) for g in gammas},
        "draft_1_s": {name: forward_seconds(model, prompt, vocab_map=vm) for name, (model, vm) in drafts.items()},
    }


def expected_speedups(tau_by_gamma: dict[str, float], draft_1_s: float, target_1_s: float,
                      verify_s: dict[str, float]) -> dict[str, float]:
    """Per gamma: target-only seconds for the tokens a block emits on average (tau, tokens per target call)
    over the block's seconds (gamma draft steps and one verification of gamma + 1 tokens)."""
    return {g: tau * target_1_s / (int(g) * draft_1_s + verify_s[g]) for g, tau in tau_by_gamma.items()}
