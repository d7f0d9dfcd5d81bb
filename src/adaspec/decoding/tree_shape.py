"""The shape of a draft tree (`decode.tree`), without torch: the config rules check it before anything loads."""

from __future__ import annotations

from dataclasses import dataclass

MAX_NODES = 32  # a tree verification reads at most the root and 32 nodes: speculative.MAX_BLOCK positions


@dataclass(frozen=True)
class TreeShape:
    """EAGLE-2's expansion: the `top_k` best children of each of the `top_k` best frontier nodes per depth, `depth`
    draft steps, then the `nodes` best nodes by cumulative draft log-probability. `lookup`: also graft the
    prompt-lookup continuation as a branch (the hybrid proposer, `adaspec.drafts.hybrid`)."""

    top_k: int = 4
    depth: int = 4
    nodes: int = 16
    lookup: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= 16:
            raise ValueError(f"decode.tree.top_k must be 1..16, got {self.top_k}")
        if not 1 <= self.depth <= MAX_NODES:
            raise ValueError(f"decode.tree.depth must be 1..{MAX_NODES} (the verification's block room), got {self.depth}")
        if not self.depth <= self.nodes <= MAX_NODES:
            raise ValueError(f"decode.tree.nodes must be between decode.tree.depth ({self.depth}) and {MAX_NODES} "
                             f"(the verification's block room), got {self.nodes}")

    def capped(self, depth: int) -> TreeShape:
        """This shape no deeper than `depth` (the room left before `max_new_tokens`; at least 1... or a plain step
        at 0): the nodes shrink with it."""
        depth = max(0, min(self.depth, depth))
        if depth == self.depth:
            return self
        return _Capped(self.top_k, depth, min(self.nodes, depth * self.top_k), self.lookup)

    @property
    def name(self) -> str:
        """`k4-d4-n16`, `k4-d4-n16+lookup`: how results name the shape."""
        return f"k{self.top_k}-d{self.depth}-n{self.nodes}" + ("+lookup" if self.lookup else "")

    @classmethod
    def parse(cls, name: str) -> TreeShape:
        """The inverse of `name`."""
        base, plus, extra = name.partition("+")
        try:
            k, d, n = base.split("-")
            if k[0] != "k" or d[0] != "d" or n[0] != "n" or (plus and extra != "lookup"):
                raise ValueError
            numbers = int(k[1:]), int(d[1:]), int(n[1:])
        except (ValueError, IndexError):
            raise ValueError(f"tree shape {name!r}: expected k<top_k>-d<depth>-n<nodes>[+lookup], e.g. k4-d4-n16") from None
        return cls(*numbers, bool(plus))


@dataclass(frozen=True)
class _Capped(TreeShape):
    """A shape cut to the room left (depth 0: no proposal at all); never configured, so not validated."""

    def __post_init__(self) -> None:
        pass


def tree_shape(decode_tree) -> TreeShape | None:
    """The `decode.tree` setting: `off` (chains: None), a shape name (`k4-d4-n16+lookup`) or a mapping with the
    keys top_k, depth, nodes and optionally lookup. Bad input raises ValueError naming the key."""
    if decode_tree is None or decode_tree is False or str(decode_tree) in ("off", "none", "false"):
        return None
    if isinstance(decode_tree, str):
        return TreeShape.parse(decode_tree)
    keys = dict(decode_tree)
    unknown = set(keys) - {"top_k", "depth", "nodes", "lookup"}
    if unknown:
        raise ValueError(f"decode.tree: unknown key(s) {sorted(unknown)}; allowed: top_k, depth, nodes, lookup (or off)")
    return TreeShape(**{k: (bool(v) if k == "lookup" else int(v)) for k, v in keys.items()})


