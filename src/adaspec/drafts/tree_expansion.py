"""EAGLE-2's tree expansion (SafeAILab/EAGLE `eagle/model/cnets.py` `topK_genrate`), for any draft that ranks tokens.

Depth 1: the `top_k` most likely tokens after the root. Every later depth: the frontier (the `top_k` nodes of the
previous depth with the highest cumulative log-probability) is read by the draft in ONE batched forward (each node
seeing its ancestors: a tree mask over the draft's own cache), each frontier node offers its `top_k` children, and
the `top_k` best of those k * k become the next frontier. Finally the `nodes` best nodes of everything offered are
kept: a node's cumulative log-probability is never above its parent's, so the kept set holds every kept node's
parent. The draft supplies `step(frontier)`: the log-probabilities `[len(frontier), support]` of the children of
those pool nodes.

Temperature > 0 with `TreeShape.sample`: some of the root's children are drawn from the draft's distribution and
verified as draws (accepted with min(1, p/q), then the residual), in the order they were chosen: `+sample` draws the
first, then takes the top_k - 1 most likely of the other tokens; `+sample-last` takes the top_k - 1 most likely, then
draws one from the rest; `+sample-all` draws all top_k without replacement (recursive rejection sampling without
replacement, arXiv 2402.14160). Each draw comes from q without the children chosen before it, renormalised, and
that is the q it is verified against. A draw can only be verified against the q it came from if whether it is in
the tree never depends on what was drawn, and a child verified before a draw must be there whatever is drawn after
it: so every root child up to the last drawn one is pinned, always kept, in that order (later siblings and every
deeper node may depend on the draws: they are verified as deterministic picks, after them). Only the root gets
drawn children: a draw deeper down would compete with earlier-verified nodes for the node budget, unless the
budget is split before anything is drawn: `+sample-deep` (`draw_every_depth`) draws top_k nodes at every depth,
each node's number of children fixed before its children are drawn, and pins them all.

A drawn child is tried in a top pick's turn but scored by its own, often lower, probability, so the budget keeps
few nodes below it. `TreeShape.ranked` scores the root child tried i-th as the i-th most likely root child (its own
score where that is higher): the nodes below a drawn child then compete as if it were that top pick. The scores
only choose which nodes the draft proposes, never how they are verified.
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
    `temperature` > 0 with `shape.sample`: the root's children (`deep`: every node) are drawn as it says with
    `generator`, and the tree carries `q` (mapped to the target's vocabulary by `q_to_target`): each drawn node's
    distribution, one-hot rows for every other node."""
    pool = Pool()
    if shape.depth == 0 or shape.nodes == 0:
        return Tree([], [], scores=[])
    k = min(shape.top_k, root_logprobs.shape[-1])
    drawn: dict[int, Tensor] = {}  # pool node -> the distribution it was drawn from
    deep = shape.sample == "deep" and temperature > 0
    if deep:
        drawn = draw_every_depth(pool, root_logprobs, step, shape, generator)
    elif shape.sample and temperature > 0:
        frontier = []
        turn_scores = root_logprobs.topk(k).values.tolist() if shape.ranked else None  # i-th tried, i-th best
        for i, (token, q) in enumerate(choose_children(root_logprobs, k, shape.sample, generator)):
            own = float(root_logprobs[token])
            frontier.append(pool.add(token, -1, max(own, turn_scores[i]) if turn_scores else own))
            if q is not None:
                drawn[frontier[-1]] = q
        grow(pool, frontier, step, shape)
    else:
        values, tokens = root_logprobs.topk(k)
        grow(pool, [pool.add(t, -1, v) for t, v in zip(tokens.tolist(), values.tolist(), strict=True)], step, shape)
    if deep:
        pinned = tuple(range(len(pool.tokens)))  # every node drawn
    else:
        pinned = tuple(range(max(drawn) + 1)) if drawn else ()  # the root's children up to the last drawn one
    rank = [0.0 if n in pinned else pool.scores[n] for n in range(len(pool.tokens))]
    kept = sorted(sorted(range(len(pool.tokens)), key=lambda n: (-rank[n], pool.depths[n], n))[: shape.nodes])
    if chosen is not None:
        chosen.extend(kept)
    index = {node: i for i, node in enumerate(kept)}
    target_ids = to_target(torch.tensor([pool.tokens[n] for n in kept], dtype=torch.long)).tolist()
    q = None
    if drawn:
        q = torch.zeros(len(kept), root_logprobs.shape[-1], device=root_logprobs.device)
        q[torch.arange(len(kept), device=q.device), torch.tensor([pool.tokens[n] for n in kept], device=q.device)] = 1.0
        for node, row in drawn.items():
            q[index[node]] = row
        q = q if q_to_target is None else q_to_target(q)
    return Tree(target_ids, [index.get(pool.parents[n], -1) for n in kept], q, [rank[n] for n in kept],
                pinned=pinned)


def grow(pool: Pool, frontier: list[int], step: Callable[[Pool, list[int]], Tensor], shape: TreeShape) -> None:
    """EAGLE-2's later depths below the root's children `frontier`: each depth's frontier offers its top_k children
    to the pool, and the top_k best of them by cumulative log-probability are the next frontier."""
    for _ in range(shape.depth - 1):
        logprobs = step(pool, frontier)
        values, tokens = logprobs.topk(min(shape.top_k, logprobs.shape[-1]), dim=-1)
        offered = [(pool.scores[node] + v, t, node)
                   for node, vs, ts in zip(frontier, values.tolist(), tokens.tolist(), strict=True)
                   for v, t in zip(vs, ts, strict=True)]
        added = [pool.add(t, node, score) for score, t, node in offered]
        frontier = sorted(added, key=lambda n: -pool.scores[n])[: shape.top_k]
        frontier.sort()


def choose_children(logprobs: Tensor, k: int, how: str, generator: torch.Generator | None
                    ) -> list[tuple[int, Tensor | None]]:
    """`k` children of a node whose children have `logprobs` (the root's; any node's with `how` = `all`), in the order
    they are verified, each with the distribution it was drawn from (None: a top pick): `how` is `TreeShape.sample`
    (module docstring). Every choice leaves out the children chosen before it; a draw from what is left of q,
    renormalised (a top pick where nothing is left: q underflowed to one-hot)."""
    drawn_at = {"first": {0}, "last": {k - 1}, "all": set(range(k))}[how]
    left = logprobs.float().exp()
    children: list[tuple[int, Tensor | None]] = []
    for i in range(k):
        mass = float(left.sum())
        if i in drawn_at and mass > 0:
            token, q = int(sample(left, generator)), left / mass
        else:
            token, q = int(left.argmax()), None
        children.append((token, q))
        left = left.index_fill(-1, torch.tensor([token], device=left.device), 0.0)
    return children


def draw_every_depth(pool: Pool, root_logprobs: Tensor, step: Callable[[Pool, list[int]], Tensor], shape: TreeShape,
                     generator: torch.Generator | None) -> dict[int, Tensor]:
    """`TreeShape.sample` = `deep`: top_k nodes at every depth, every one drawn. The root's top_k children are drawn
    without replacement; at each later depth the previous depth's nodes are read in one forward, and the top_k child
    slots of highest value go to them (a slot's value: its parent's score plus the parent's j-th highest child
    log-probability, known before anything is drawn there), each node's slots then drawn without replacement from
    its distribution. A node's score is its slot's value, so how many children a node gets never depends on what is
    drawn for them, and every node is pinned: each draw is verified against the q it came from. Returns each drawn
    node's distribution."""
    drawn: dict[int, Tensor] = {}
    k = min(shape.top_k, root_logprobs.shape[-1])
    level = add_draws(pool, -1, 0.0, root_logprobs, k, generator, drawn)
    for _ in range(shape.depth - 1):
        logprobs = step(pool, level)
        best = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1).values.tolist()
        slots = sorted(((pool.scores[node] + v, i) for i, (node, row) in enumerate(zip(level, best, strict=True))
                        for v in row), key=lambda slot: -slot[0])[:k]
        counts = [sum(1 for _, i in slots if i == row) for row in range(len(level))]
        level = [child for i, node in enumerate(level) if counts[i]
                 for child in add_draws(pool, node, pool.scores[node], logprobs[i], counts[i], generator, drawn)]
    return drawn


def add_draws(pool: Pool, parent: int, parent_score: float, logprobs: Tensor, count: int,
              generator: torch.Generator | None, drawn: dict[int, Tensor]) -> list[int]:
    """`count` children of `parent` drawn without replacement from `logprobs`, scored as the `count` most likely
    children would be; records each draw's distribution in `drawn`."""
    turn_scores = logprobs.topk(count).values.tolist()
    children = []
    for score, (token, q) in zip(turn_scores, choose_children(logprobs, count, "all", generator), strict=True):
        children.append(pool.add(token, parent, parent_score + score))
        if q is not None:
            drawn[children[-1]] = q
    return children


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
