"""The shape of a draft tree (`decode.tree`), without torch: the config rules check it before anything loads."""

from __future__ import annotations

from dataclasses import dataclass

MAX_NODES = 32  # a tree verification reads at most the root and 32 nodes: speculative.MAX_BLOCK positions
AUTO = "auto"  # decode.tree=auto: the evaluation chooses each draft's shape (adaspec.evaluation.tree_choice)
# TreeShape.sample: its name's suffix
SAMPLES = {"first": "+sample", "last": "+sample-last", "all": "+sample-all", "deep": "+sample-deep"}
RANKED = "+ranked"  # TreeShape.ranked: its name's suffix, after the sample's


@dataclass(frozen=True)
class TreeShape:
    """EAGLE-2's expansion: the `top_k` best children of each of the `top_k` best frontier nodes per depth, `depth`
    draft steps, then the `nodes` best nodes by cumulative draft log-probability. `lookup` > 0: also graft the
    prompt-lookup continuation of up to `lookup` tokens as a branch, within the `nodes` (the hybrid proposer,
    `adaspec.drafts.hybrid`). `sample` (temperature > 0 only, greedy ignores it) draws some of the root's top_k
    children from the draft's distribution instead of taking its top picks (`adaspec.drafts.tree_expansion`):
    `first` (`+sample`) the first, then the top_k - 1 most likely of the rest; `last` (`+sample-last`) the top_k - 1
    most likely, then one drawn from the rest; `all` (`+sample-all`) all top_k, drawn without replacement; `deep`
    (`+sample-deep`) top_k nodes at every depth, all drawn (the nodes must hold top_k * depth; the rest is the
    lookup branch's).
    `ranked` (`+ranked`, with `sample` only): the root child verified i-th is scored as the i-th most likely root
    child, so that a drawn child, tried in a top pick's turn, has a top pick's room below it."""

    top_k: int = 4
    depth: int = 4
    nodes: int = 16
    lookup: int = 0
    sample: str = ""
    ranked: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= 16:
            raise ValueError(f"decode.tree.top_k must be 1..16, got {self.top_k}")
        if not 1 <= self.depth <= MAX_NODES:
            raise ValueError(f"decode.tree.depth must be 1..{MAX_NODES} (the verification's block room), got {self.depth}")
        if not self.depth <= self.nodes <= MAX_NODES:
            raise ValueError(f"decode.tree.nodes must be between decode.tree.depth ({self.depth}) and {MAX_NODES} "
                             f"(the verification's block room), got {self.nodes}")
        if not 0 <= self.lookup <= self.nodes:
            raise ValueError(f"decode.tree.lookup must be between 0 (off) and decode.tree.nodes ({self.nodes}), "
                             f"got {self.lookup}")
        if self.sample and self.sample not in SAMPLES:
            raise ValueError(f"decode.tree.sample must be off or one of {', '.join(SAMPLES)}, got {self.sample!r}")
        if self.ranked and not self.sample:
            raise ValueError("decode.tree.ranked ranks the root's drawn children: it needs decode.tree.sample "
                             f"({', '.join(SAMPLES)})")
        if self.sample in ("last", "all") and self.nodes < self.top_k:  # every root child is pinned: it must fit
            raise ValueError(f"decode.tree.nodes ({self.nodes}) must be at least decode.tree.top_k ({self.top_k}) "
                             f"with sample={self.sample}, which keeps every child of the root")
        if self.sample == "deep" and self.nodes < self.top_k * self.depth:  # every node drawn is pinned
            raise ValueError(f"decode.tree.nodes ({self.nodes}) must be at least top_k * depth "
                             f"({self.top_k * self.depth}) with sample=deep, which keeps every node it draws")

    @property
    def reach(self) -> int:
        """The longest run a block can accept: the draft's depth or the lookup branch's length."""
        return max(self.depth, self.lookup)

    def capped(self, room: int) -> TreeShape:
        """This shape accepting no more than `room` tokens (what is left before `max_new_tokens`; 0: no proposal at
        all): the depth, the lookup branch and the nodes shrink with it."""
        depth, lookup = max(0, min(self.depth, room)), max(0, min(self.lookup, room))
        if (depth, lookup) == (self.depth, self.lookup):
            return self
        return _Capped(self.top_k, depth, min(self.nodes, depth * self.top_k + lookup), lookup, self.sample,
                       self.ranked)

    @property
    def name(self) -> str:
        """`k4-d4-n16`, `k4-d4-n16+lookup` (a lookup branch as long as the depth), `k4-d4-n16+lookup8`,
        `k4-d4-n16+sample`, `k4-d3-n12+lookup8+sample`, `k4-d3-n12+lookup8+sample-all+ranked`."""
        suffix = "" if not self.lookup else "+lookup" if self.lookup == self.depth else f"+lookup{self.lookup}"
        ranked = RANKED if self.ranked else ""
        return f"k{self.top_k}-d{self.depth}-n{self.nodes}{suffix}{SAMPLES.get(self.sample, '')}{ranked}"

    @classmethod
    def parse(cls, name: str) -> TreeShape:
        """The inverse of `name`."""
        base, *extras = name.split("+")
        ranked = extras[-1:] == [RANKED[1:]]
        extras = extras[:-1] if ranked else extras
        sample = next((mode for mode, suffix in SAMPLES.items() if extras[-1:] == [suffix[1:]]), "")
        extras = extras[:-1] if sample else extras
        try:
            k, d, n = base.split("-")
            if k[0] != "k" or d[0] != "d" or n[0] != "n" or len(extras) > 1 or not all(
                    e.startswith("lookup") for e in extras):
                raise ValueError
            numbers = int(k[1:]), int(d[1:]), int(n[1:])
            lookup = 0 if not extras else int(extras[0][len("lookup"):] or numbers[1])
        except (ValueError, IndexError):
            raise ValueError(f"tree shape {name!r}: expected k<top_k>-d<depth>-n<nodes>[+lookup[<length>]]"
                             f"[+sample[-last|-all|-deep][+ranked]], e.g. k4-d4-n16 or k4-d4-n12+lookup8") from None
        return cls(*numbers, lookup, sample, ranked)


@dataclass(frozen=True)
class _Capped(TreeShape):
    """A shape cut to the room left (depth 0: no proposal at all); never configured, so not validated."""

    def __post_init__(self) -> None:
        pass


def tree_shape(decode_tree) -> TreeShape | None:
    """The `decode.tree` setting: `off` (chains: None), a shape name (`k4-d4-n16+lookup`) or a mapping with the
    keys top_k, depth, nodes and optionally lookup (a length, or true: the depth), sample (off, first, last, all, deep;
    `sample_first: true` is `sample: first`) and ranked (true or false). Bad input
    raises ValueError naming the key; so does `auto`, which only the evaluation resolves (`is_auto`)."""
    if is_auto(decode_tree):
        raise ValueError("decode.tree=auto is chosen per draft by the evaluation (adaspec.evaluation.tree_choice); "
                         "here give a shape such as k4-d4-n16, or off")
    if decode_tree is None or decode_tree is False or str(decode_tree) in ("off", "none", "false"):
        return None
    if isinstance(decode_tree, str):
        return TreeShape.parse(decode_tree)
    keys = dict(decode_tree)
    unknown = set(keys) - {"top_k", "depth", "nodes", "lookup", "sample", "sample_first", "ranked"}
    if unknown:
        raise ValueError(f"decode.tree: unknown key(s) {sorted(unknown)}; allowed: top_k, depth, nodes, lookup, "
                         "sample, ranked (or off)")
    if "sample" in keys and "sample_first" in keys:
        raise ValueError("decode.tree gives both sample and sample_first (its older spelling); keep sample only")
    if isinstance(keys.get("lookup"), bool):  # lookup: true is a branch as long as the depth
        keys["lookup"] = int(keys.get("depth", TreeShape.depth)) if keys["lookup"] else 0
    sample_first = keys.pop("sample_first", False)
    if not isinstance(sample_first, bool):
        raise ValueError(f"decode.tree.sample_first must be true or false, got {sample_first!r}")
    sample = keys.pop("sample", "first" if sample_first else False)
    sample = "" if sample is False or str(sample) in ("off", "none") else str(sample)
    ranked = keys.pop("ranked", False)
    if not isinstance(ranked, bool):
        raise ValueError(f"decode.tree.ranked must be true or false, got {ranked!r}")
    return TreeShape(**{k: int(v) for k, v in keys.items()}, sample=sample, ranked=ranked)


def is_auto(decode_tree) -> bool:
    return isinstance(decode_tree, str) and decode_tree == AUTO


def monitor_tree(decode_tree) -> TreeShape | None:
    """What the training-time acceptance monitor decodes with: decode.tree's shape, and chains for `auto` (the
    choice weighs the serving's measured costs, which a training run does not have)."""
    return None if is_auto(decode_tree) else tree_shape(decode_tree)
