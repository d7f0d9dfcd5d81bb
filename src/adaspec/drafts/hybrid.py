"""The hybrid proposer: a ranking draft's tree with prompt lookup's continuation grafted in as a branch.

Prompt lookup is accepted in long runs where the text repeats the question (numbers, names, code) and not at all
elsewhere; a trained draft is the other way round. The hybrid's tree is the draft's EAGLE-2 tree (`decode.tree`)
plus the lookup chain (up to `decode.tree.lookup` tokens after the most recent earlier occurrence of the longest
n-gram ending the context, `adaspec.drafts.prompt_lookup.lookup`), grafted where it shares the draft's nodes; the
chain keeps its nodes and the draft's least likely nodes make room for it within `decode.tree.nodes`.
Verification then takes whichever branch the target agrees with further. `decode.tree.lookup=<length>` (a name
ending `+lookup` or `+lookup<length>`) turns it on; `for_shape` wraps a draft when its shape asks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from adaspec.decoding.tree import Tree, TreeShape
from adaspec.drafts.base import Draft, GreedyBlocks
from adaspec.drafts.prompt_lookup import PromptLookupDraft


class HybridDraft(Draft):
    kind = "hybrid"
    proposes_trees = True

    def __init__(self, draft: Draft, lookup: PromptLookupDraft | None = None):
        if not draft.proposes_trees:
            raise ValueError(f"decode.tree.lookup: a {draft.kind} draft cannot rank alternatives")
        self.draft, self.lookup = draft, lookup or PromptLookupDraft()
        self.target_layers, self.draws_proposals = draft.target_layers, draft.draws_proposals

    def verify_width(self, target_vocab_size: int) -> int:
        return self.draft.verify_width(target_vocab_size)

    def start(self, prompt: Tensor, width: int) -> _HybridSession:
        return _HybridSession(self.draft.start(prompt, width), self.lookup)

    def greedy_blocks(self, prompt: Tensor, tokens: list[int], width: int) -> GreedyBlocks:
        return self.draft.greedy_blocks(prompt, tokens, width)

    def replay_session(self, prompt: Tensor, context: Tensor, width: int):
        session, rewind = self.draft.replay_session(prompt, context, width)
        return _HybridSession(session, self.lookup), rewind

    def describe(self) -> dict[str, Any]:
        return self.draft.describe() | {"hybrid_with": self.lookup.describe()}


def for_shape(draft: Draft, shape: TreeShape) -> Draft:
    """`draft` as a tree of `shape` proposes it: with prompt lookup grafted in when the shape has a lookup branch."""
    return HybridDraft(draft) if shape.lookup else draft


class _HybridSession:
    def __init__(self, session, lookup: PromptLookupDraft):
        self.session, self.lookup = session, lookup
        self.origin: list[int | None] = []

    def propose(self, context: Tensor, gamma: int, temperature: float, generator: torch.Generator | None):
        return self.session.propose(context, gamma, temperature, generator)

    def propose_tree(self, context: Tensor, shape: TreeShape, temperature: float,
                     generator: torch.Generator | None) -> Tree:
        tree = self.session.propose_tree(context, shape, temperature, generator)
        chain = self.lookup.proposals(context.tolist(), shape.lookup)
        tree, self.origin = tree.graft(chain, shape.nodes)
        return tree

    def keep_path(self, path: list[int]) -> None:
        inner = [self.origin[node] for node in path]
        self.session.keep_path(inner[: inner.index(None) if None in inner else len(inner)])

    def read_target(self, features: Tensor) -> None:
        self.session.read_target(features)

    def rollback(self, length: int) -> None:
        self.session.rollback(length)
