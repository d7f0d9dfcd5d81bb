"""How a model runs while it decodes: its precision, eager or compiled steps, and the KV cache it decodes on.

`Served` is a model as the decoding loops call it: `new_cache`, `prefill` (the prompt, always eager: its
length varies) and `step` (a few new tokens on top of the cache: one for target-only decoding, gamma + 1
for a verification). On this CPU a step's cost depends on all three settings in ways that are easy to get
wrong (bench/README: the cost curve), so every speed-up names the `Serving` it was measured in.

Compiled steps follow gpt-fast: `torch.compile` (inductor, weights frozen into the graph) with static
shapes, over a preallocated `StaticCache` that is written in place and cropped by moving its length back.
A step of T tokens runs the graph of the smallest compiled width >= T, its input padded with copies of
its last token: the padded positions lie after the real ones, so the causal mask keeps them out of every
real token's attention, and the cache is cropped back to the real ones at once. `warm_up(widths)`
compiles the widths a run needs before anything is timed (`compile_seconds` records what that cost); a
wider step than any warmed compiles its own width. The cache's capacity is rounded up to
`CAPACITY_STEP`, so one graph serves prompts of every length.

On a CUDA GPU the compiled steps are also captured as CUDA graphs (`mode="reduce-overhead"`, as gpt-fast
runs them there): a step replays its width's graph over the static cache, whose tensors keep their addresses
(transformers marks them static), and its outputs are copied out before the next replay reuses them.

A static cache is allocated once per capacity and reset for each generation (a `Served` decodes one
sequence at a time). That is not only cheaper: a graph compiled with frozen weights also holds the address
of the cache it was traced with, and silently reads that one whatever cache it is given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel, StaticCache
from transformers.cache_utils import Cache

from adaspec.decoding.kv import compact_cache, crop_cache, forward, run
from adaspec.decoding.tree import Tree, attention_mask
from adaspec.decoding.weight_only_int8 import quantize_weight_only_int8
from adaspec.errors import UserError

CAPACITY_STEP = 512
# the config offers float32 and bfloat16 (decode.*_dtype); the tests also decode float64 models
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
WEIGHTS = ("dense", "int8")  # int8: weight-only, adaspec.decoding.weight_only_int8
ATTENTION = (None, "sdpa", "eager")  # transformers' attn_implementation; None: as the model was loaded


@dataclass(frozen=True)
class Serving:
    """One serving configuration (the `decode.target_dtype`, `decode.kv_cache` and `decode.compile` keys; the
    weights' storage and the attention kernel are `make bench-costs` rows)."""

    dtype: str = "float32"
    kv_cache: str = "dynamic"
    compile: bool = False
    # compiled: the narrowest step graph. On this CPU the compiled bfloat16 one-token step costs more than a
    # two-token one (bench/results/costs-smollm2.json), so target-only decoding may pad its one token to two:
    # a baseline configuration of its own (`bfloat16-compiled-w2`), timed beside the others
    min_width: int = 1
    weights: str = "dense"
    attention: str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.weights not in WEIGHTS or self.attention not in ATTENTION:
            raise ValueError(f"weights must be one of {WEIGHTS} and attention one of {ATTENTION}, "
                             f"got {self.weights!r} and {self.attention!r}")
        if self.compile and self.kv_cache != "static":
            raise ValueError("a compiled model decodes on a preallocated cache: kv_cache='static'")
        if self.min_width < 1 or (self.min_width > 1 and not self.compile):
            raise ValueError(f"min_width={self.min_width}: a minimum step width (>= 1) is for compiled steps only")

    @classmethod
    def of_target(cls, decode) -> Serving:
        """The target's serving configuration from the `decode` config."""
        return cls(str(decode.target_dtype), str(decode.kv_cache), bool(decode.compile))

    @classmethod
    def parse(cls, name: str) -> Serving:
        """From a `name`: `float32`, `bfloat16-static`, `bfloat16-compiled`, `bfloat16-compiled-w2`,
        `bfloat16-int8`, `float32-attn_eager-compiled`, ...: what `name` writes."""
        dtype, *parts = name.split("-")  # each optional part in its place, taken off the front
        weights = parts.pop(0) if parts[:1] == ["int8"] else "dense"
        attention = parts.pop(0)[len("attn_"):] if parts and parts[0].startswith("attn_") else None
        kind = parts.pop(0) if parts else ""
        width = parts.pop(0) if parts and parts[0].startswith("w") else None
        if parts or kind not in ("", "static", "compiled") \
                or (width is not None and (kind != "compiled" or not width[1:].isdigit())):
            raise ValueError(f"serving configuration {name!r}: expected "
                             f"<dtype>[-int8][-attn_eager|-attn_sdpa][-static|-compiled[-w<min width>]]")
        return cls(dtype, "dynamic" if kind == "" else "static", kind == "compiled", int(width[1:] if width else 1),
                   weights, attention)

    @property
    def name(self) -> str:
        kind = "-compiled" if self.compile else "-static" if self.kv_cache == "static" else ""
        return (self.dtype + ("-int8" if self.weights == "int8" else "")
                + ("" if self.attention is None else f"-attn_{self.attention}")
                + kind + (f"-w{self.min_width}" if self.min_width > 1 else ""))

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def parse_serving(name: str, where: str) -> Serving:
    """`Serving.parse` for user input: a bad name is one line naming `where` it came from."""
    try:
        return Serving.parse(name)
    except ValueError as error:
        raise UserError(f"{where}: {error}") from None


class Served:
    """`model` as decoding runs it in `serving`; the model is cast to the serving dtype in place."""

    def __init__(self, model: PreTrainedModel, serving: Serving = Serving()):
        self.model, self.serving, self.config = model, serving, model.config
        if next(model.parameters()).dtype != serving.torch_dtype:
            model.to(serving.torch_dtype)
        if serving.attention not in (None, model.config._attn_implementation):
            model.set_attn_implementation(serving.attention)
        if serving.weights == "int8":
            quantize_weight_only_int8(model)
        self.widths: list[int] = []  # the compiled step widths, ascending
        self.feature_widths: list[int] = []  # those of the graphs that also return hidden states
        self.tree_widths: list[int] = []  # those of the tree verifications (a 4D mask and position ids)
        self.tree_feature_widths: list[int] = []
        self._static_caches: dict[int, StaticCache] = {}
        self.compile_seconds: dict[int | str, float] = {}  # width, or "<width>+features"
        self._compiled = None
        self.graphs = serving.compile and self.device.type == "cuda"  # CUDA graphs: outputs copied out of them
        if serving.compile:
            import torch._inductor.config  # noqa: F401  (imported for its settings, torch.compile's backend)

            if not self.graphs:
                torch._inductor.config.freezing = True  # weights as constants: what gpt-fast measures on CPU
            _install_output_hooks(model)
            self._compiled = compile_step(model.forward, self.device)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def new_cache(self, capacity: int) -> Cache:
        """An empty cache for a generation that will hold at most `capacity` positions (static: this capacity's one
        cache, emptied: the previous generation's is gone)."""
        if self.serving.kv_cache == "dynamic":
            return DynamicCache(config=self.config)
        rounded = rounded_capacity(capacity)
        if rounded not in self._static_caches:
            self._static_caches[rounded] = StaticCache(config=self.config, max_cache_len=rounded)
        cache = self._static_caches[rounded]
        cache.reset()
        return cache

    def prefill(self, ids: Tensor, cache: Cache) -> Tensor:
        """Read `ids [1, T]` into `cache` (eager, whatever the serving); the last position's logits `[V]`."""
        return forward(self.model, ids, cache, logits_to_keep=1)[-1]

    def step(self, ids: Tensor, cache: Cache) -> Tensor:
        """Logits `[T, V]` of `ids [1, T]` on top of `cache`, which grows by T."""
        return self._owned(self._step(ids, cache, hidden=False).logits[0, : ids.shape[1]])

    def prefill_with_features(self, ids: Tensor, cache: Cache, layers: list[int]) -> tuple[Tensor, Tensor]:
        """`prefill`, and the hidden states `layers` (indices into `hidden_states`) of every position of `ids`,
        concatenated: `[T, len(layers) * H]`, what a draft head reads (`adaspec.drafts.eagle3`)."""
        out = run(self.model, ids, cache, logits_to_keep=1, output_hidden_states=True)
        return out.logits[0, -1], _features(out.hidden_states, layers, ids.shape[1])

    def step_with_features(self, ids: Tensor, cache: Cache, layers: list[int]) -> tuple[Tensor, Tensor]:
        """`step`, and the hidden states `layers` of every position of `ids` (`prefill_with_features`)."""
        out = self._step(ids, cache, hidden=True)
        n = ids.shape[1]
        return self._owned(out.logits[0, :n]), _features(out.hidden_states, layers, n)

    def verify_tree(self, root: Tensor, tree: Tree, cache: Cache, layers: list[int] | None = None
                    ) -> tuple[Tensor, Tensor | None]:
        """One forward over `[root, tree nodes]` (`root [1]`: the last context token, not yet in `cache`), each
        row seeing the cache, its ancestors and itself at position cache length + depth
        (`adaspec.decoding.tree`): logits `[N + 1, V]` and, with `layers`, the rows' hidden states. The cache
        grows by N + 1 rows in the tree's order; `keep_path` compacts it to the accepted path."""
        ids = torch.tensor([tree.tokens], dtype=torch.long, device=root.device)
        out = self._step(torch.cat([root.view(1, 1), ids], dim=1), cache, hidden=bool(layers), tree=tree)
        n = len(tree) + 1
        return self._owned(out.logits[0, :n]), (_features(out.hidden_states, layers, n) if layers else None)

    def keep_path(self, cache: Cache, root_slot: int, path: list[int]) -> None:
        """After `verify_tree` wrote the root at `root_slot` and node i at `root_slot + 1 + i`: move the accepted
        `path`'s rows next to the root and forget every other row."""
        compact_cache(cache, root_slot + 1, [root_slot + 1 + node for node in path])

    def _step(self, ids: Tensor, cache: Cache, hidden: bool, tree: Tree | None = None):
        n = ids.shape[1]
        if self._compiled is None:
            if tree is None:
                return run(self.model, ids, cache, logits_to_keep=n, output_hidden_states=hidden)
            return run(self.model, ids, cache, logits_to_keep=n, output_hidden_states=hidden,
                       **self._tree_inputs(tree, cache, n))
        needed = max(n, self.serving.min_width)
        compiled = (self.tree_feature_widths if hidden else self.tree_widths) if tree is not None \
            else (self.feature_widths if hidden else self.widths)
        width = next((w for w in compiled if w >= needed), needed)  # a new width compiles at its first call
        padded = torch.cat([ids, ids[:, -1:].expand(1, width - n)], dim=1) if width > n else ids
        started = time.perf_counter()
        kwargs = {"output_hidden_states": True} if hidden else {}  # a graph of its own
        if tree is not None:  # padded rows see only themselves, and no real row sees them
            kwargs |= self._tree_inputs(tree, cache, width)
        if self.graphs:  # a new replay: the previous one's outputs have been copied out (`_owned`)
            torch.compiler.cudagraph_mark_step_begin()
        out = self._compiled(input_ids=padded, cache=cache, use_cache=True, logits_to_keep=width, **kwargs)
        if width not in compiled:
            compiled.append(width)
            compiled.sort()
            name = ("tree" if tree is not None else "") + f"{width}" + ("+features" if hidden else "")
            self.compile_seconds[width if name == str(width) else name] = time.perf_counter() - started
        if width > n:
            cache.crop(n - width)  # forget the padded positions (a static cache only moves its length back)
        return out

    def _owned(self, logits: Tensor) -> Tensor:
        """`logits` as the caller may keep them: a CUDA graph's outputs are overwritten by its next replay."""
        return logits.clone() if self.graphs else logits

    def _tree_inputs(self, tree: Tree, cache: Cache, width: int) -> dict[str, Tensor]:
        past = int(cache.get_seq_length())
        kv_length = cache.get_mask_sizes(width, 0)[0] if len(cache.layers) else past + width
        mask = attention_mask(tree, past, int(kv_length), width, self.serving.torch_dtype, self.device)
        positions = torch.tensor([tree.positions(width)], dtype=torch.long, device=self.device) + past
        return {"attention_mask": mask, "position_ids": positions}

    def crop(self, cache: Cache, length: int, current: int | None = None) -> None:
        """Keep the first `length` positions of `cache`; `current`: its length, when the caller knows it."""
        crop_cache(cache, length, current)

    @torch.inference_mode()
    def warm_up(self, widths: list[int], feature_layers: list[int] | None = None, tree: bool = False
                ) -> dict[int | str, float]:
        """Compile the steps of `widths` now, between generations (it empties the cache of their capacity);
        with `feature_layers`, the steps that also return those hidden states (`step_with_features`); with
        `tree`, the tree verifications of `widths` rows (`verify_tree`). Nothing to do when eager. Seconds each
        compilation took."""
        if tree:
            compiled = self.tree_widths if feature_layers is None else self.tree_feature_widths
        else:
            compiled = self.widths if feature_layers is None else self.feature_widths
        for width in sorted({max(w, self.serving.min_width) for w in widths} - set(compiled)):
            if self._compiled is None:
                break
            cache = self.new_cache(width + 2)
            self.prefill(torch.zeros(1, 2, dtype=torch.long, device=self.device), cache)
            ids = torch.zeros(1, width, dtype=torch.long, device=self.device)
            if tree:
                self.verify_tree(ids[0, :1], Tree.chain([0] * (width - 1)), cache, feature_layers)
            elif feature_layers is None:
                self.step(ids, cache)
            else:
                self.step_with_features(ids, cache, feature_layers)
        return dict(self.compile_seconds)


@torch.inference_mode()
def _install_output_hooks(model: PreTrainedModel) -> None:
    """One eager forward that asks for hidden states. Transformers installs the hooks that collect them at the
    first such call; made inside a compiled step (a verification that returns the head's features), that install
    splits the step in two graphs, for good, with Python between them at every call."""
    model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=next(model.parameters()).device),
          output_hidden_states=True)


def rounded_capacity(positions: int) -> int:
    """A preallocated cache's capacity for `positions`: rounded up to CAPACITY_STEP, so one graph serves many."""
    return -(-positions // CAPACITY_STEP) * CAPACITY_STEP


def compile_step(step, device: torch.device):
    """`torch.compile` of a decoding step (`compile_options`), static shapes: a graph per width and cache capacity
    (a cost curve compiles up to 9 widths, a head's 7 at each capacity), so dynamo's default limit of 8 is raised."""
    import torch._dynamo.config  # noqa: F401  (imported for its settings; loaded only when something compiles)

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(step, dynamic=False, **compile_options(device))


def compile_options(device: torch.device) -> dict[str, str]:
    """`torch.compile`'s mode for decoding steps on `device`: CUDA graphs on a CUDA GPU (one launch replays a
    whole step, where a small model's step is otherwise dominated by kernel launches), inductor's default
    elsewhere (on the CPU, with weights frozen into the graph)."""
    return {"mode": "reduce-overhead"} if device.type == "cuda" else {}


def _features(hidden_states: tuple[Tensor, ...], layers: list[int], n: int) -> Tensor:
    return torch.cat([hidden_states[i][0, :n] for i in layers], dim=-1)


def as_served(model: PreTrainedModel | Served) -> Served:
    """`model` as it is (eager, on a dynamic cache, in its own dtype), unless it is already `Served`."""
    if isinstance(model, Served):
        return model
    dtype = next(model.parameters()).dtype
    return Served(model, Serving(dtype=next(k for k, v in DTYPES.items() if v == dtype)))
