"""A draft that is an EAGLE-3 head (`adaspec.models.eagle3.Eagle3Head`) reading the target's hidden states.

Decoding: the loop hands the session the target's features of every position it keeps, from the prefill
and each verification forward (`read_target`), so the head costs no extra target call. The session's KV
cache holds only pairs built from the target's features ("real" pairs); the pairs a block builds on the
head's own outputs are dropped after it, and rebuilt from the target's features once verification has run.

Training: `logits(input_ids)` reads the target's features (its `feature_source`: the feature cache, or the frozen
target run without gradient), then runs the head over every pair, so the stages' losses see logits aligned like a
causal LM's (position t predicts token t+1) over the draft's support; `answer_divergence` sums the passes of
EAGLE-3's training-time test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor
from transformers import PretrainedConfig, PreTrainedModel

from adaspec.decoding.sampling import greedy, sample
from adaspec.decoding.serving import CAPACITY_STEP, compile_step, rounded_capacity
from adaspec.decoding.tree import Tree, TreeShape
from adaspec.drafts.base import GreedyBlocks, median_seconds
from adaspec.drafts.feature_source import FeatureSource
from adaspec.drafts.trained import TrainedDraft
from adaspec.drafts.tree_expansion import Pool, expand, frontier_mask
from adaspec.models.draft_vocab import DraftVocab, load_draft_vocab
from adaspec.models.eagle3 import (
    Eagle3Config,
    Eagle3Head,
    KVCache,
    StaticKVCache,
    eagle3_layers,
    shift_features,
)

TTT_DECAY = 0.8  # EAGLE-3's weight of pass k of its training-time test: 0.8^k

# the pair counts a compiled head step runs (one graph each; a step of fewer pairs is padded to the next): proposals
# (1), catch-up after a block (accepted + 1), tree frontiers; a wider step (a prompt's catch-up) runs eager
COMPILED_WIDTHS = (1, 2, 4, 8, 16, 32, 64)


class Eagle3Draft(TrainedDraft):
    kind = "eagle3"
    folder_suffix = "-eagle3"
    export_format = "speculators"
    model_type = Eagle3Config.model_type
    starts_from_target = True
    proposes_trees = True

    def __init__(self, head: Eagle3Head, vocab: DraftVocab | None = None, target: PreTrainedModel | None = None):
        """`target`: the model whose hidden states the head reads outside decoding (the replay, training)."""
        size = head.config.draft_vocab_size
        if vocab is None and size != head.config.vocab_size:
            raise ValueError(f"the head predicts {size} draft ids of {head.config.vocab_size}: give it its DraftVocab")
        if vocab is not None and vocab.size != size:
            raise ValueError(f"the id map has {vocab.size} draft ids, the head's output {size}")
        self.model, self.vocab = head, vocab
        self.feature_source = FeatureSource(target) if target is not None else None
        self.target_layers = list(head.config.target_layers)
        self.compiled_step = None  # `compile_steps`: the head's decoding steps compiled over a static cache
        self.graphs = False  # ... and captured as CUDA graphs
        self._static_caches: dict[int, StaticKVCache] = {}  # by capacity: a compiled step keeps their addresses

    @classmethod
    def load(cls, folder: str | Path, attn_implementation: str = "auto", target: PreTrainedModel | None = None,
             dtype: torch.dtype | None = None, **_) -> Eagle3Draft:
        head = Eagle3Head.from_pretrained(folder, **({"dtype": dtype} if dtype is not None else {}))
        return cls(head, load_draft_vocab(folder), target)

    @classmethod
    def feature_layers(cls, target_config: PretrainedConfig) -> list[int]:
        return eagle3_layers(target_config.num_hidden_layers)  # the head's own choice (`Eagle3Head.from_target`)

    @classmethod
    def from_target(cls, model: DictConfig, seed: int, target: PreTrainedModel, vocab: DraftVocab | None
                    ) -> Eagle3Draft:
        """A head at the target's width, its embedding the target's (frozen), its output over `vocab` (None: the
        target's vocabulary); model.head_output_init=target starts its final norm and output rows as the target's."""
        size = target.config.vocab_size
        torch.manual_seed(seed)
        rows = None
        if model.head_output_init == "target":
            rows = torch.arange(size) if vocab is None else vocab.draft_to_target
        return cls(Eagle3Head.from_target(target, size if vocab is None else vocab.size, output_rows=rows), vocab)

    # --- what training needs -------------------------------------------------------------------------
    def features(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """The target's features `[B, T, 3H]` of every position (no gradient), run by its `feature_source` (which
        keeps the last batch's for the drafts that share it)."""
        if self.feature_source is None or self.feature_source.target is None:
            raise ValueError("an EAGLE-3 head trains on the target's hidden states: give Eagle3Draft the target")
        return self.feature_source.live(input_ids, attention_mask, self.target_layers)

    def logits(self, input_ids: Tensor, attention_mask: Tensor | None = None, features: Tensor | None = None,
               index: Tensor | None = None, **_) -> Tensor:
        """Logits `[B, T, support]`: position t predicts token t+1 from the target's feature of position t-1
        and the token at t (`features`: the target's; else read from the feature cache for the examples
        `index`, or computed)."""
        features = self._features(input_ids, attention_mask, features, index)
        projected = self.model.project(shift_features(features).to(self.model.fc.weight.dtype))
        return self.model(projected, input_ids, attention_mask=attention_mask)[1]

    def unrolled_logits(self, input_ids: Tensor, steps: int, attention_mask: Tensor | None = None,
                        features: Tensor | None = None, index: Tensor | None = None,
                        rows: Tensor | None = None) -> list[Tensor]:
        """`logits` of each pass of EAGLE-3's training-time test (`Eagle3Head.unrolled`): pass k's position
        t predicts token t+1 as the k-th proposal after a block's first would (its first k positions read
        no real feature). `features` and `index` as in `logits`; `rows [B, T]`: only those positions' logits
        (`Eagle3Head.unrolled`)."""
        features = self._features(input_ids, attention_mask, features, index)
        projected = self.model.project(shift_features(features).to(self.model.fc.weight.dtype))
        return self.model.unrolled(projected, input_ids, steps, attention_mask=attention_mask, rows=rows)

    def answer_divergence(self, batch: dict[str, Tensor], mask: Tensor, divergence: Callable[[Tensor], Tensor],
                          passes: int = 1) -> Tensor:
        """The sum over `passes` passes of EAGLE-3's training-time test of 0.8^k times pass k's `divergence` (one
        pass: its plain logits'), the output layer run on the answer positions only."""
        rows = F.pad(mask, (0, 1))  # the answer positions: the head's output layer runs there only
        unrolled = self.unrolled_logits(batch["input_ids"], passes, attention_mask=batch["attention_mask"],
                                        index=batch.get("index"), rows=rows)
        return sum(TTT_DECAY**k * divergence(logits) for k, logits in enumerate(unrolled))

    def _features(self, input_ids: Tensor, attention_mask: Tensor | None, features: Tensor | None,
                  index: Tensor | None) -> Tensor:
        cache = self.feature_source.cache if self.feature_source is not None else None
        if features is None and index is not None and cache is not None:
            features = cache.batch(index, attention_mask, self.model.fc.weight.dtype)
        return self.features(input_ids, attention_mask) if features is None else features

    # --- what decoding needs -------------------------------------------------------------------------
    def verify_width(self, target_vocab_size: int) -> int:
        if self.vocab is None:
            return min(target_vocab_size, self.model.config.draft_vocab_size)
        if target_vocab_size < self.vocab.target_size:
            raise ValueError(
                f"the head's id map covers {self.vocab.target_size} target ids, the target has {target_vocab_size}"
            )
        return self.vocab.target_size

    def compile_steps(self) -> bool:
        """Decode with the head's steps compiled (`decode.draft_compile`), on a preallocated cache: CUDA graphs on a
        CUDA GPU, inductor on the CPU (`adaspec.decoding.serving.compile_step`). Call after `to(device)`."""
        device = self.model.fc.weight.device
        self.graphs = device.type == "cuda"
        self.compiled_step = compile_step(self.model.decode_step, device)
        return True

    @torch.inference_mode()
    def warm_up(self, prompt_lengths: list[int]) -> None:
        """Compile every step width (`COMPILED_WIDTHS`) on the cache of each prompt length's capacity now."""
        if self.compiled_step is None:
            return
        weight = self.model.fc.weight
        for capacity in sorted({self.static_cache(n + CAPACITY_STEP).capacity for n in prompt_lengths}):
            session = self.start(torch.zeros(1, capacity - CAPACITY_STEP, dtype=torch.long), 1)
            for width in COMPILED_WIDTHS:
                features = torch.zeros(1, width, self.model.config.hidden_size, dtype=weight.dtype,
                                       device=weight.device)
                session._run(features, torch.zeros(1, width, dtype=torch.long, device=weight.device))
                session.cache.crop(0)

    def static_cache(self, pairs: int) -> StaticKVCache:
        """The static cache that holds `pairs` pairs (capacities rounded up to CAPACITY_STEP), emptied."""
        capacity = rounded_capacity(pairs)
        if capacity not in self._static_caches:
            weight = self.model.fc.weight
            self._static_caches[capacity] = StaticKVCache(self.model.config, capacity, weight.dtype, weight.device)
        cache = self._static_caches[capacity]
        cache.crop(0)
        return cache

    def start(self, prompt: Tensor, width: int) -> _Eagle3Session:
        return _Eagle3Session(self, width, prompt.shape[1])

    def greedy_blocks(self, prompt: Tensor, tokens: list[int], width: int) -> GreedyBlocks:
        """The target's features of the whole greedy output come from one forward; a block at position p is
        then the head's own greedy proposals from there, compared with `tokens`."""
        context = torch.cat([prompt[0], torch.tensor(tokens, device=prompt.device, dtype=prompt.dtype)])
        session = self.start(prompt, width)
        session.read_target(self.features(context[:-1].view(1, -1))[0])

        # position -> (proposals examined, how many of them matched): the replay asks for the same positions at
        # every gamma it walks, and a run stopped at its first miss answers every larger gamma too
        runs: dict[int, tuple[int, int]] = {}

        def block(position: int, gamma: int) -> tuple[int, int]:
            examined, n = runs.get(position, (0, 0))
            if n == examined < gamma:
                length = prompt.shape[1] + position
                session.cache.crop(length)  # the features of the whole output stay
                examined, n = gamma, session.matching_run(context[:length], tokens[position:], gamma)
                runs[position] = examined, n
            return gamma, min(n, gamma)

        return block

    def replay_session(self, prompt: Tensor, context: Tensor, width: int):
        """The target's features of the whole `context` from one forward; rewinding crops only the head's cache."""
        session = self.start(prompt, width)
        session.read_target(self.features(context[:-1].view(1, -1))[0])
        return session, session.cache.crop

    def step_seconds(self, prompt: Tensor, width: int, repeats: int = 30) -> float:
        """One proposal on top of the real pairs of `prompt` but its last (features: zeros, the cost is the same)."""
        features = torch.zeros(prompt.shape[1] - 1, len(self.target_layers) * self.model.config.hidden_size,
                               device=prompt.device,
                               dtype=self.model.fc.weight.dtype)

        def prepare() -> _Eagle3Session:
            session = self.start(prompt, width)
            session.read_target(features)
            session.catch_up(prompt[0], prompt.shape[1] - 1)
            return session

        return median_seconds(prepare, lambda session: session.propose(prompt[0], 1, 0.0, None), prompt, repeats)

    def hf_assisted_refusal(self) -> str:
        return "is an EAGLE-3 head, which HF assisted generation cannot run"

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "parameters": sum(p.numel() for p in self.model.trainable_parameters()),
                "frozen_embedding_parameters": self.model.embed_tokens.weight.numel(),
                "target_layers": self.target_layers,
                "draft_vocab_size": None if self.vocab is None else self.vocab.size}


class _Eagle3Session:
    """The target's features of the context positions it has read (`features [F, 3H]`) and the head's KV
    cache of real pairs: pair i is (feature of position i-1, token i); pair 0 reads zeros."""

    def __init__(self, draft: Eagle3Draft, width: int, prompt_length: int):
        self.draft, self.head, self.width = draft, draft.model, width
        self.features: Tensor | None = None
        self.feature_width = len(draft.target_layers) * self.head.config.hidden_size
        compiled = draft.compiled_step is not None
        self.cache = draft.static_cache(prompt_length + CAPACITY_STEP) if compiled else KVCache()

    def _run(self, features: Tensor, ids: Tensor, positions: Tensor | None = None,
             tree_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The head over the pairs (`features [1, T, H]`, `ids [1, T]`) after its cache (`Eagle3Head.forward`),
        compiled on a static cache when the draft is (`Eagle3Draft.compile_steps`): T padded to a compiled width
        (`COMPILED_WIDTHS`; the padded pairs come after the real ones, see only themselves and are forgotten), or
        eager on the same cache when T is wider (a prompt's catch-up)."""
        if self.draft.compiled_step is None:
            return self.head(features, ids, self.cache, positions=positions, tree_mask=tree_mask)
        start, t = len(self.cache), ids.shape[1]
        width = next((w for w in COMPILED_WIDTHS if w >= t), t)
        if start + width > self.cache.capacity:  # a longer generation than the cache was sized for: a bigger one
            self._grow(start + width)
        device, capacity = ids.device, self.cache.capacity
        slots = torch.arange(start, start + width, device=device)
        keys = torch.arange(capacity, device=device)
        if tree_mask is None:
            positions, mask = slots, keys[None, :] <= slots[:, None]
        else:
            mask = torch.nn.functional.pad(tree_mask, (0, capacity - tree_mask.shape[1], 0, width - t))
            mask[t:] = keys[None, :] == slots[t:, None]  # a padded pair sees only itself
            positions = torch.cat([positions, positions[-1:].expand(width - t)])
        if width > t:
            features = torch.cat([features, features[:, -1:].expand(1, width - t, -1)], dim=1)
            ids = torch.cat([ids, ids[:, -1:].expand(1, width - t)], dim=1)
        step = self.draft.compiled_step if width in COMPILED_WIDTHS else self.head.decode_step
        if self.draft.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        out, logits = step(features, ids, positions, slots, mask, self.cache.keys, self.cache.values)
        self.cache.length = start + t
        out, logits = out[:, :t], logits[:, :t]
        return (out.clone(), logits.clone()) if self.draft.graphs else (out, logits)  # a replay overwrites them

    def _grow(self, pairs: int) -> None:
        bigger = self.draft.static_cache(pairs + CAPACITY_STEP)
        kept = len(self.cache)
        bigger.keys[:, :, :kept] = self.cache.keys[:, :, :kept]
        bigger.values[:, :, :kept] = self.cache.values[:, :, :kept]
        bigger.length, self.cache = kept, bigger

    def read_target(self, features: Tensor) -> None:
        features = features.to(self.head.fc.weight.dtype)
        self.features = features if self.features is None else torch.cat([self.features, features])

    def catch_up(self, context: Tensor, pairs: int) -> tuple[Tensor, Tensor]:
        """Build the real pairs up to `pairs` (exclusive; the last one again if it is built already): the
        head's output `[H]` and logits `[draft vocab]` of the last."""
        start = min(len(self.cache), pairs - 1)
        self.cache.crop(start)
        have = 0 if self.features is None else self.features.shape[0]
        if have < pairs - 1:
            raise RuntimeError(f"the head needs the target's features of {pairs - 1} positions, it has {have}")
        rows = self.features[max(start - 1, 0) : pairs - 1] if have else None
        if start == 0:  # pair 0 has no position before it: zeros
            zero = torch.zeros(1, self.feature_width, device=context.device, dtype=self.head.fc.weight.dtype)
            rows = zero if rows is None else torch.cat([zero, rows])
        out, logits = self._run(self.head.project(rows)[None], context[start:pairs][None])
        return out[0, -1], logits[0, -1]

    def propose(self, context: Tensor, gamma: int, temperature: float, generator: torch.Generator | None):
        length = context.shape[0]
        chain = self._chain(context, temperature, generator)
        drawn = [next(chain) for _ in range(gamma)]
        self.cache.crop(length)  # only real pairs stay
        tokens = torch.cat([token for token, _ in drawn]) if drawn else context.new_empty(0)
        if temperature == 0:
            return tokens, None
        if not drawn:
            return tokens, torch.zeros(0, self.width, device=context.device)
        q = torch.stack([p for _, p in drawn])  # [n, support]: the full vocabulary when there is no id map
        return tokens, self.draft.to_target_distribution(q)

    def propose_tree(self, context: Tensor, shape: TreeShape, temperature: float,
                     generator: torch.Generator | None) -> Tree:
        """EAGLE-2's tree after `context` (`adaspec.drafts.tree_expansion`): one batched head forward per depth,
        each frontier pair reading its parent's output and seeing the real pairs and its ancestors' pairs.
        Deterministic picks (top-k), ranked by log-probabilities at `temperature` (1 when greedy); with
        `shape.sample` at temperature > 0 some of the root's children are drawn instead."""
        length = context.shape[0]
        support = self.head.config.draft_vocab_size
        scale = temperature if temperature > 0 else 1.0
        root_out, root_logits = self.catch_up(context, length)
        outs: dict[int, Tensor] = {}
        slots: dict[int, int] = {}
        device = context.device

        def step(pool: Pool, frontier: list[int]) -> Tensor:
            parents = [pool.parents[node] for node in frontier]
            features = torch.stack([root_out if p < 0 else outs[p] for p in parents])[None]
            ids = self.draft.to_target_ids(torch.tensor([pool.tokens[node] for node in frontier], device=device))[None]
            mask = frontier_mask(pool, frontier, slots, len(self.cache), length).to(device)
            positions = torch.tensor([length - 1 + pool.depths[node] for node in frontier], device=device)
            out, logits = self._run(features, ids, positions=positions, tree_mask=mask)
            outs.update(zip(frontier, out[0], strict=True))
            return torch.log_softmax(logits[0, :, :support].float() / scale, dim=-1)

        root = torch.log_softmax(root_logits[:support].float() / scale, dim=-1)
        tree = expand(root, step, shape, lambda ids: self.draft.to_target_ids(ids.to(device)), temperature=temperature,
                      generator=generator, q_to_target=self.draft.to_target_distribution)
        self.cache.crop(length)  # only real pairs stay
        return tree

    def keep_path(self, path: list[int]) -> None:
        """Nothing: the tree's pairs are gone already; the path's real pairs come from the target's features."""

    def matching_run(self, context: Tensor, expected: list[int], limit: int) -> int:
        """How many of the head's greedy proposals after `context` (at most `limit`) equal `expected` in
        order: `propose`'s greedy chain, stopped at its first miss."""
        chain, n = self._chain(context, 0.0, None), 0
        while n < min(limit, len(expected)) and int(next(chain)[0]) == expected[n]:
            n += 1
        self.cache.crop(context.shape[0])
        return n

    def _chain(self, context: Tensor, temperature: float, generator: torch.Generator | None):
        """The head's proposals after `context`, one (target id [1], its draft distribution or None) per
        `next`: the head steps on its own output only when the next proposal is asked for. The caller crops
        the cache back to the real pairs."""
        support = self.head.config.draft_vocab_size
        out, logits = self.catch_up(context, context.shape[0])
        while True:
            logits = logits[:support]
            if temperature == 0:
                probs, token = None, greedy(logits, keepdim=True)
            else:
                probs = torch.softmax(logits.float() / temperature, dim=-1)
                token = sample(probs, generator)
            token = self.draft.to_target_ids(token)
            yield token, probs
            # the head goes on from its own output at the previous position
            step_out, step_logits = self._run(out.view(1, 1, -1), token.view(1, 1))
            out, logits = step_out[0, -1], step_logits[0, -1]

    def rollback(self, length: int) -> None:
        if self.features is not None:
            self.features = self.features[:length]
        self.cache.crop(length)
