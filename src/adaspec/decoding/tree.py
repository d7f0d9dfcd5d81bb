"""Draft trees: many continuations verified in one target forward (EAGLE-2, arXiv 2406.16858; SpecInfer, 2305.09781).

A `Tree` hangs below the last context token (the root, row 0 of the verification): node i has a target id
`tokens[i]` and a parent `parents[i]` (-1: the root; else an earlier node), so nodes come in topological
order. The target reads `[root, node 0, ..., node N-1]` in ONE forward with `attention_mask` (each row sees
the context, its ancestors and itself) at `position_ids` (context length - 1 + depth). Verification walks
from the root: the target's token after the root is compared with the root's children, and so on down; the
longest accepted root-to-leaf path is kept and the target's token after it is the correction or bonus.

Greedy: the child equal to the target's argmax is accepted, so the emitted tokens are the target's argmax
along the path, as in a chain. Temperature > 0: the siblings are tried one by one (SpecInfer's recursive
rejection sampling, in EAGLE's sibling-by-sibling form): child x drawn from q (`Tree.q`; a deterministic
choice such as a top-k pick is q = one-hot(x)) is accepted with probability min(1, p(x)/q(x)); after a
rejection p becomes norm(max(0, p - q)) and the next sibling is tried; when every child is rejected the
token is drawn from what is left of p. Each drawn child must be drawn independently of its siblings tried
before it, and whether it is in the tree at all must not depend on what was drawn (`Tree.pinned`); a
deterministic pick may depend on any draw of the draft's, never on the target's. Then the emitted token is
distributed exactly as p.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from adaspec.decoding.sampling import greedy, sample
from adaspec.decoding.tree_shape import MAX_NODES, TreeShape, tree_shape

__all__ = ["MAX_NODES", "Tree", "TreeShape", "accept_greedy", "accept_sampled", "attention_mask", "tree_shape"]


@dataclass
class Tree:
    """Proposals as a tree below the root (module docstring). `q[i]` is the distribution node i was drawn from
    (`[N, width]`, temperature > 0 only; one-hot for a deterministic pick); None: every node is a deterministic
    pick. `pinned`: the drawn nodes, which anything that prunes the tree must keep (`graft` does)."""

    tokens: list[int]
    parents: list[int]
    q: Tensor | None = None
    scores: list[float] | None = None  # the draft's cumulative log-probability of each node, where it ranked them
    pinned: tuple[int, ...] = ()
    depths: list[int] = field(init=False)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError(f"{len(self.tokens)} tokens but {len(self.parents)} parents")
        self.depths = []
        for i, parent in enumerate(self.parents):
            if not -1 <= parent < i:
                raise ValueError(f"node {i}: parent {parent} must be -1 (the root) or an earlier node")
            self.depths.append(1 if parent < 0 else self.depths[parent] + 1)

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def chain(cls, tokens: list[int], q: Tensor | None = None) -> Tree:
        return cls(list(tokens), list(range(-1, len(tokens) - 1)), q)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def children(self, node: int) -> list[int]:
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to `node` (empty for the root, -1)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def graft(self, chain: list[int], budget: int) -> tuple[Tree, list[int | None]]:
        """This tree with `chain` (tokens after the root) as a branch: followed down the nodes it shares with the
        tree, new nodes after; then the lowest-ranked nodes off the chain and not pinned are dropped until `budget`
        nodes are left (a ranked tree drops its least likely leaves first; the chain is cut so that the pinned
        nodes fit beside it). Grafted nodes are deterministic picks (one-hot rows of `q`). Returns the new tree
        and, for each of its nodes, the node it was here (None: a grafted one)."""
        chain = chain[: max(0, budget - len(self.pinned))]
        tokens, parents = list(self.tokens), list(self.parents)
        scores = list(self.scores) if self.scores is not None else [-float(i) for i in range(len(tokens))]
        on_chain, node = [], -1
        for token in chain:
            child = next((c for c, p in enumerate(parents) if p == node and tokens[c] == token), None)
            if child is None:
                tokens.append(token)
                parents.append(node)
                scores.append(0.0)
                child = len(tokens) - 1
            on_chain.append(child)
            node = child
        protected = set(on_chain) | set(self.pinned)
        others = sorted((n for n in range(len(tokens)) if n not in protected), key=lambda n: (-scores[n], n))
        kept = protected | set(others[: max(0, budget - len(protected))])
        depth: dict[int, int] = {-1: 0}
        for n in sorted(kept, key=lambda n: (n >= len(self), n)):  # a grafted node's parent comes before it
            depth[n] = depth[parents[n]] + 1
        order = sorted(kept, key=lambda n: (depth[n], n))  # siblings keep their order, grafted ones last
        index = {n: i for i, n in enumerate(order)}
        q = None
        if self.q is not None:
            q = torch.zeros(len(order), self.q.shape[-1], dtype=self.q.dtype, device=self.q.device)
            for i, n in enumerate(order):
                if n < len(self):
                    q[i] = self.q[n]
                else:
                    q[i, tokens[n]] = 1.0
        tree = Tree([tokens[n] for n in order], [index.get(parents[n], -1) for n in order], q,
                    [scores[n] for n in order], tuple(index[n] for n in self.pinned))
        return tree, [n if n < len(self) else None for n in order]

    def ancestors(self, width: int | None = None) -> Tensor:
        """`[W, W]` bool, W = N + 1 rows (the root first) or `width` (padding rows see only themselves):
        row r sees column c when c is r or one of its ancestors."""
        n = len(self) + 1
        width = width or n
        seen = torch.eye(width, dtype=torch.bool)
        seen[1:n, 0] = True
        for i, parent in enumerate(self.parents):
            if parent >= 0:
                seen[i + 1] |= seen[parent + 1]
        return seen

    def positions(self, width: int | None = None) -> list[int]:
        """Each row's depth below the root (0 for the root; padding rows at the deepest's + 1)."""
        rows = [0] + self.depths
        return rows + [self.depth + 1] * ((width or len(rows)) - len(rows))


def attention_mask(tree: Tree, past: int, kv_length: int, width: int, dtype: torch.dtype,
                   device: torch.device) -> Tensor:
    """The additive mask `[1, 1, width, kv_length]` of a verification forward of `tree` (padded to `width` rows)
    written after `past` cached positions: every row sees the cache; among the new rows, itself and its ancestors;
    nothing beyond (a static cache's empty slots)."""
    seen = torch.zeros(width, kv_length, dtype=torch.bool)
    seen[:, :past] = True
    seen[:, past : past + width] = tree.ancestors(width)
    return additive(seen, dtype).to(device)[None, None]


def additive(seen: Tensor, dtype: torch.dtype) -> Tensor:
    """A bool visibility mask as the additive float mask HF attention takes: 0 where seen, the dtype's min elsewhere."""
    return torch.zeros(seen.shape, dtype=dtype).masked_fill_(~seen, torch.finfo(dtype).min)


def accept_greedy(logits: Tensor, tree: Tree) -> tuple[list[int], int]:
    """Greedy verification of `tree` from the target's logits `[N + 1, V]` (row 0: the root): the accepted path
    (node indices, root excluded) and the target's argmax after it."""
    predicted = greedy(logits).tolist()
    path, node = [], -1
    while True:
        token = predicted[node + 1]
        child = next((c for c in tree.children(node) if tree.tokens[c] == token), None)
        if child is None:
            return path, token
        path.append(child)
        node = child


def accept_sampled(probs: Tensor, tree: Tree, generator: torch.Generator | None) -> tuple[list[int], int]:
    """Speculative-sampling verification of `tree` (module docstring) from the target's distributions `[N + 1, V]`:
    the accepted path and the token after it, distributed exactly as the target's sample."""
    path, node = [], -1
    while True:
        p = probs[node + 1].clone()
        accepted = None
        for child in tree.children(node):
            x = tree.tokens[child]
            q = None if tree.q is None else tree.q[child].to(p.dtype)
            q_x = 1.0 if q is None else float(q[x])
            u = float(torch.rand((), generator=generator, device=p.device))
            if u * q_x < float(p[x]):
                accepted = child
                break
            if q is None:
                p[x] = 0.0
            else:
                p = (p - q).clamp_min(0)
            total = p.sum()
            # p == q (up to rounding) leaves nothing: a rejection was then (almost) impossible; fall back to p
            p = p / total if total > 0 else probs[node + 1].clone()
        if accepted is None:
            return path, int(sample(p, generator))
        path.append(accepted)
        node = accepted
