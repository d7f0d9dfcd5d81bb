"""Prompt-lookup decoding (Saxena 2023; Hugging Face's `prompt_lookup_num_tokens`): a draft without a model.

Before every block it looks for the longest n-gram (`max_ngram_size` down to `min_ngram_size` tokens) that
ends the context and occurred earlier in it (the prompt and the text so far), and proposes the up to gamma
tokens that followed its most recent earlier occurrence. No match: no proposal, and the block is a plain
target step. Training-free, so it is the baseline every speed table carries beside the trained drafts.

HF's implementation takes the earliest occurrence instead of the most recent; the evaluation times HF's
beside ours (`hf_assisted_kwargs`), so both are in the same table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from adaspec.decoding.tree import Tree, TreeShape
from adaspec.drafts.base import Draft, GreedyBlocks


def continuations(ids: list[int], max_ngram_size: int, min_ngram_size: int = 1) -> Iterator[int]:
    """Where the text after each earlier occurrence of an n-gram ending `ids` starts: longer n-grams first, the
    most recent occurrence first among equals (the suffix itself excluded)."""
    for n in range(min(max_ngram_size, len(ids) - 1), min_ngram_size - 1, -1):
        suffix = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start : start + n] == suffix:
                yield start + n


def lookup(ids: list[int], gamma: int, max_ngram_size: int, min_ngram_size: int = 1) -> list[int]:
    """The up to `gamma` tokens after the most recent earlier occurrence of the longest n-gram ending `ids`."""
    if gamma <= 0:
        return []
    after = next(continuations(ids, max_ngram_size, min_ngram_size), None)
    return [] if after is None else ids[after : after + gamma]


def lookup_tree(ids: list[int], shape: TreeShape, max_ngram_size: int, min_ngram_size: int = 1) -> Tree:
    """Prompt lookup's tree: the continuations (up to `shape.depth` tokens) after every earlier occurrence of
    an n-gram ending `ids`, longer n-grams first and the most recent first among equals, merged into a trie of
    at most `shape.nodes` nodes (its first branch is `lookup`'s chain)."""
    tokens: list[int] = []
    parents: list[int] = []
    for after in continuations(ids, max_ngram_size, min_ngram_size):
        node = -1
        for token in ids[after : after + shape.depth]:
            child = next((c for c, p in enumerate(parents) if p == node and tokens[c] == token), None)
            if child is None:
                if len(tokens) >= shape.nodes:
                    break
                tokens.append(token)
                parents.append(node)
                child = len(tokens) - 1
            node = child
        if len(tokens) >= shape.nodes:
            break
    return Tree(tokens, parents, scores=[-float(i) for i in range(len(tokens))])


class PromptLookupDraft(Draft):
    kind = "prompt_lookup"
    proposes_trees = True
    takes_lookup_branch = False  # its trees are lookups already: it would graft itself
    draws_proposals = False  # its proposals are the context's own tokens

    def __init__(self, max_ngram_size: int = 3, min_ngram_size: int = 1):
        if not 1 <= min_ngram_size <= max_ngram_size:
            raise ValueError(f"need 1 <= min_ngram_size <= max_ngram_size, got {min_ngram_size}, {max_ngram_size}")
        self.max_ngram_size, self.min_ngram_size = max_ngram_size, min_ngram_size

    def proposals(self, ids: list[int], gamma: int) -> list[int]:
        return lookup(ids, gamma, self.max_ngram_size, self.min_ngram_size)

    def verify_width(self, target_vocab_size: int) -> int:
        return target_vocab_size

    def start(self, prompt: Tensor, width: int) -> _LookupSession:
        return _LookupSession(self, width)

    def greedy_blocks(self, prompt: Tensor, tokens: list[int], width: int) -> GreedyBlocks:
        prefix = prompt[0].tolist()

        def block(position: int, gamma: int) -> tuple[int, int]:
            proposed = self.proposals(prefix + tokens[:position], gamma)
            n = 0
            while n < len(proposed) and position + n < len(tokens) and proposed[n] == tokens[position + n]:
                n += 1
            return len(proposed), n

        return block

    def hf_assisted_kwargs(self, gamma: int) -> dict[str, Any]:
        return {"prompt_lookup_num_tokens": gamma, "max_matching_ngram_size": self.max_ngram_size}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "parameters": 0, "max_ngram_size": self.max_ngram_size,
                "min_ngram_size": self.min_ngram_size}


class _LookupSession:
    """Nothing to cache: every block searches the whole context again."""

    def __init__(self, draft: PromptLookupDraft, width: int):
        self.draft, self.width = draft, width

    def propose(self, context: Tensor, gamma: int, temperature: float, generator: torch.Generator | None):
        tokens = torch.tensor(self.draft.proposals(context.tolist(), gamma), dtype=torch.long, device=context.device)
        if temperature == 0:
            return tokens, None
        # a deterministic proposal: the draft's distribution is all on it (verification then accepts with p(x))
        return tokens, torch.nn.functional.one_hot(tokens, self.width).float()

    def propose_tree(self, context: Tensor, shape: TreeShape, temperature: float,
                     generator: torch.Generator | None) -> Tree:
        """`lookup_tree`: deterministic picks, so verification treats each as q = one-hot."""
        return lookup_tree(context.tolist(), shape, self.draft.max_ngram_size, self.draft.min_ngram_size)

    def keep_path(self, path: list[int]) -> None:
        pass

    def rollback(self, length: int) -> None:
        pass
