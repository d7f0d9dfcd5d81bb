"""EAGLE-2's tree expansion (SafeAILab/EAGLE `eagle/model/cnets.py` `topK_genrate`), for any draft that ranks tokens.

Depth 1: the `top_k` most likely tokens after the root. Every later depth: the frontier (the `top_k` nodes of the
previous depth with the highest cumulative log-probability) is read by the draft in ONE batched forward (each node
seeing its ancestors: a tree mask over the draft's own cache), each frontier node offers its `top_k` children, and
the `top_k` best of those k * k become the next frontier. Finally the `nodes` best nodes of everything offered are
kept: a node's cumulative log-probability is never above its parent's, so the kept set holds every kept node's
parent. The draft supplies `step(frontier)`: the log-probabilities `[len(frontier), support]` of the children of
those pool nodes.

Temperature > 0 with `+sample` (`TreeShape.sample_first`): the root's first child is drawn from the draft's
distribution and verified as a draw (accepted with min(1, p/q)) before its siblings, the top_k - 1 most likely of
the other tokens. A draw can only be verified against the q it came from if the tree's making never looks at what
was drawn before deciding to keep it, so that child is pinned: always kept, first among the root's children (its
siblings and every deeper node may depend on it: they are verified as deterministic picks, only after it). Only the
root gets a drawn child: a draw deeper down would compete with earlier-verified nodes for the node budget.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from adaspec.decoding.sampling import sample
from adaspec.decoding.tree import Tree, TreeShape


class Pool:
    """Every node offered so far: its token (the draft's support id), parent (-1: the root), depth and score."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.scores: list[float] = []

    def add(self, token: int, parent: int, score: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        self.scores.append(score)
        return len(self.tokens) - 1

    def ancestors(self, node: int) -> list[int]:
        """`node`'s ancestors, the root's child first (the root itself excluded)."""
        out = []
        while (node := self.parents[node]) >= 0:
            out.append(node)
        return out[::-1]


def expand(root_logprobs: Tensor, step: Callable[[Pool, list[int]], Tensor], shape: TreeShape,
           to_target: Callable[[Tensor], Tensor], chosen: list[int] | None = None, temperature: float = 0.0,
           generator: torch.Generator | None = None, q_to_target: Callable[[Tensor], Tensor] | None = None) -> Tree:
    """The tree of `shape` below a root whose children have `root_logprobs [support]` (module docstring);
    `to_target` maps support ids to target ids. `chosen` (a list) receives each tree node's pool index.
    `temperature` > 0 with `shape.sample_first`: the root's first child is drawn with `generator`, and the tree
    carries `q` (mapped to the target's vocabulary by `q_to_target`): that child's distribution, one-hot rows for
    every other node."""
    pool = Pool()
    if shape.depth == 0 or shape.nodes == 0:
        return Tree([], [], scores=[])
    k = min(shape.top_k, root_logprobs.shape[-1])
    root_q = root_logprobs.float().exp() if shape.sample_first and temperature > 0 else None
    drawn = None if root_q is None else int(sample(root_q, generator))
    if drawn is None:
        values, tokens = root_logprobs.topk(k)
        frontier = [pool.add(t, -1, v) for t, v in zip(tokens.tolist(), values.tolist(), strict=True)]
    else:
        values, tokens = root_logprobs.index_fill(-1, torch.tensor([drawn], device=root_logprobs.device),
                                                  -float("inf")).topk(k - 1)
        frontier = [pool.add(drawn, -1, float(root_logprobs[drawn]))]
        frontier += [pool.add(t, -1, v) for t, v in zip(tokens.tolist(), values.tolist(), strict=True)]
    for _ in range(shape.depth - 1):
        logprobs = step(pool, frontier)
        values, tokens = logprobs.topk(min(shape.top_k, logprobs.shape[-1]), dim=-1)
        offered = [(pool.scores[node] + v, t, node)
                   for node, vs, ts in zip(frontier, values.tolist(), tokens.tolist(), strict=True)
                   for v, t in zip(vs, ts, strict=True)]
        added = [pool.add(t, node, score) for score, t, node in offered]
        frontier = sorted(added, key=lambda n: -pool.scores[n])[: shape.top_k]
        frontier.sort()
    pinned = () if drawn is None else (0,)  # pool node 0: the drawn child; a log-probability of 0 ranks it first
    rank = [0.0 if n in pinned else pool.scores[n] for n in range(len(pool.tokens))]
    kept = sorted(sorted(range(len(pool.tokens)), key=lambda n: (-rank[n], pool.depths[n], n))[: shape.nodes])
    if chosen is not None:
        chosen.extend(kept)
    index = {node: i for i, node in enumerate(kept)}
    target_ids = to_target(torch.tensor([pool.tokens[n] for n in kept], dtype=torch.long)).tolist()
    q = None
    if drawn is not None:
        q = torch.zeros(len(kept), root_logprobs.shape[-1], device=root_logprobs.device)
        q[torch.arange(len(kept), device=q.device), torch.tensor([pool.tokens[n] for n in kept], device=q.device)] = 1.0
        q[0] = root_q
        q = q if q_to_target is None else q_to_target(q)
    return Tree(target_ids, [index.get(pool.parents[n], -1) for n in kept], q, [rank[n] for n in kept],
                pinned=pinned)


def frontier_mask(pool: Pool, frontier: list[int], slots: dict[int, int], past: int, context: int) -> Tensor:
    """`[len(frontier), past + len(frontier)]` bool: frontier node j (written at slot past + j) sees the `context`
    real positions, its ancestors' slots and itself. Records each frontier node's slot in `slots`."""
    seen = torch.zeros(len(frontier), past + len(frontier), dtype=torch.bool)
    seen[:, :context] = True
    for j, node in enumerate(frontier):
        for ancestor in pool.ancestors(node):
            seen[j, slots[ancestor]] = True
        slots[node] = past + j
        seen[j, past + j] = True
    return seen
