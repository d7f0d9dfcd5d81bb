"""Forward-call costs: seconds of one cached forward, and the cost ratio c (draft over target, one token)."""

from __future__ import annotations

import torch

from adaspec.decoding.serving import as_served
from adaspec.decoding.tree import Tree
from adaspec.drafts import Draft
from adaspec.drafts.base import median_seconds


@torch.inference_mode()
def forward_seconds(model, prompt: torch.Tensor, n_tokens: int = 1, repeats: int = 30) -> float:
    """Median seconds of one forward of the target `model` over the last `n_tokens` of `prompt` on top of
    the cached rest, with their logits: a decoding step (1) or the verification of gamma proposals (gamma + 1).
    `model` may be `Served` in a serving configuration (adaspec.decoding.serving); a plain model runs as it is."""
    served = as_served(model)
    context, new = prompt[:, :-n_tokens], prompt[:, -n_tokens:]

    def cached_context():
        cache = served.new_cache(prompt.shape[1])
        served.prefill(context, cache)
        return cache

    return median_seconds(cached_context, lambda cache: served.step(new, cache), prompt, repeats)


@torch.inference_mode()
def draft_seconds(draft: Draft, target, prompt: torch.Tensor, repeats: int = 30) -> float:
    """Median seconds of one proposal of `draft` for `target` on top of the cached `prompt`."""
    return draft.step_seconds(prompt, draft.verify_width(target.config.vocab_size), repeats)


@torch.inference_mode()
def tree_verify_seconds(target, prompt: torch.Tensor, nodes: int, layers: list[int] | None = None,
                        repeats: int = 30) -> float:
    """Median seconds of one tree verification of `nodes` nodes (`Served.verify_tree`, with the head's `layers`
    when it reads the target's hidden states) on top of the cached `prompt`: its graph, its mask."""
    served = as_served(target)
    tree = Tree.chain(prompt[0, -nodes:].tolist() if prompt.shape[1] > nodes else [0] * nodes)

    def cached_context():
        cache = served.new_cache(prompt.shape[1] + nodes + 1)
        served.prefill(prompt[:, :-1], cache)
        return cache

    return median_seconds(cached_context, lambda cache: served.verify_tree(prompt[0, -1:], tree, cache, layers),
                          prompt, repeats)


def cost_ratio(draft: Draft, target, prompt: torch.Tensor) -> float:
    return draft_seconds(draft, target, prompt) / forward_seconds(target, prompt)


def call_costs(target, drafts: dict[str, Draft], prompt: torch.Tensor, gammas: list[int]) -> dict:
    """Median seconds of the calls a block makes: the target's one-token step and its verification of
    gamma + 1 tokens (each gamma), each draft's one proposal (`drafts`: name -> Draft)."""
    return {
        "target_1_s": forward_seconds(target, prompt),
        "target_verify_s": {str(g): forward_seconds(target, prompt, g + 1) for g in gammas},
        "draft_1_s": {name: draft_seconds(draft, target, prompt) for name, draft in drafts.items()},
    }


def expected_speedups(tau_by_gamma: dict[str, float], draft_1_s: float, target_1_s: float,
                      verify_s: dict[str, float]) -> dict[str, float]:
    """Per gamma: target-only seconds for the tokens a block emits on average (tau, tokens per target call)
    over the block's seconds (gamma draft steps and one verification of gamma + 1 tokens)."""
    return {g: tau * target_1_s / (int(g) * draft_1_s + verify_s[g]) for g, tau in tau_by_gamma.items()}
