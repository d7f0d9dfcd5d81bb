"""A draft that is a small causal LM (`model.draft`), optionally over a reduced vocabulary (`DraftVocab`).

The model reads and writes its own ids; this class is the one place that maps them from and to target
ids, so nothing else needs to know whether a draft's vocabulary is reduced. Training uses `logits` (over
the draft's support) and `model` (the weights the optimiser updates); decoding uses the `Draft` interface.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from adaspec.decoding.kv import compact_cache, crop_cache, forward, run
from adaspec.decoding.sampling import greedy, sample
from adaspec.decoding.tree import Tree, TreeShape, additive
from adaspec.distill.tokens import answer_logits
from adaspec.drafts.base import GreedyBlocks
from adaspec.drafts.trained import TrainedDraft
from adaspec.drafts.tree_expansion import Pool, expand, frontier_mask
from adaspec.models.draft_vocab import DraftVocab, is_reduced, load_draft_vocab


class ModelDraft(TrainedDraft):
    kind = "model"
    export_format = "hf"
    proposes_trees = True

    def __init__(self, model: PreTrainedModel, vocab: DraftVocab | None = None):
        if vocab is None and is_reduced(model.config):
            raise ValueError("the model has a reduced vocabulary: give ModelDraft its DraftVocab (load_draft does)")
        if vocab is not None and model.config.vocab_size < vocab.size:
            raise ValueError(
                f"the id map has {vocab.size} draft ids but the model only {model.config.vocab_size} token rows"
            )
        self.model, self.vocab = model, vocab

    @classmethod
    def load(cls, folder: str | Path, attn_implementation: str = "auto", target: PreTrainedModel | None = None,
             **kwargs) -> ModelDraft:
        """A saved draft (or reference) artefact with the id map saved beside it (`draft_vocab.json`); it reads no
        `target`."""
        from adaspec.models.build import load_model  # models.build imports the draft-init machinery

        return cls(load_model(folder, attn_implementation, **kwargs), load_draft_vocab(folder))

    # --- what training needs -------------------------------------------------------------------------
    def logits(self, input_ids: Tensor, index: Tensor | None = None, **kwargs) -> Tensor:
        """Logits `[B, T, support]` for `input_ids` in target ids (the support: draft ids when reduced). `index`
        (the batch's example indices) is for drafts that read per-example caches; this one reads none."""
        return self.model(input_ids=self.to_draft_ids(input_ids), **kwargs).logits

    def answer_divergence(self, batch: dict[str, Tensor], mask: Tensor, divergence: Callable[[Tensor], Tensor],
                          passes: int = 1) -> Tensor:
        """`divergence` of the answer tokens' logits (one pass: a small LM has no training-time test)."""
        logits = self.logits(batch["input_ids"], attention_mask=batch["attention_mask"], index=batch.get("index"))
        return divergence(answer_logits(logits, mask))

    # --- what decoding needs -------------------------------------------------------------------------
    def verify_width(self, target_vocab_size: int) -> int:
        if self.vocab is None:
            return min(target_vocab_size, self.model.config.vocab_size)
        if target_vocab_size < self.vocab.target_size:
            raise ValueError(
                f"the draft's id map covers {self.vocab.target_size} target ids, the target has {target_vocab_size}"
            )
        return self.vocab.target_size

    def start(self, prompt: Tensor, width: int) -> _ModelSession:
        return _ModelSession(self, prompt, width)

    def greedy_blocks(self, prompt: Tensor, tokens: list[int], width: int) -> GreedyBlocks:
        """One teacher-forced forward over `prompt + tokens` gives the draft's greedy token after every prefix
        of `tokens`; a greedy block at position p accepts proposals while they equal `tokens` (the draft saw
        `tokens` itself up to there) and always proposes gamma."""
        matches = self._greedy_matches(prompt, tokens, width)

        def block(position: int, gamma: int) -> tuple[int, int]:
            n = 0
            while n < gamma and position + n < len(matches) and matches[position + n]:
                n += 1
            return gamma, n

        return block

    @torch.inference_mode()
    def _greedy_matches(self, prompt: Tensor, tokens: list[int], width: int) -> list[bool]:
        if not tokens:
            return []
        target_ids = torch.tensor(tokens, device=prompt.device)
        seq = torch.cat([prompt[0], target_ids[:-1]]).view(1, -1)
        support = width if self.vocab is None else self.vocab.size
        logits = self.logits(seq, logits_to_keep=len(tokens))[0, :, :support]
        return (self.to_target_ids(greedy(logits)) == target_ids).tolist()

    def hf_assisted_kwargs(self, gamma: int) -> dict[str, Any] | None:
        if self.vocab is not None:  # HF would feed draft ids to the target unmapped
            return None
        return {"assistant_model": self.model}

    def hf_assisted_refusal(self) -> str:
        return (f"has a reduced vocabulary ({self.describe()['draft_vocab_size']} tokens); HF assisted generation "
                f"cannot map its ids")

    def int8(self, device: torch.device, folder: Path | None = None, attn_implementation: str = "auto") -> ModelDraft:
        """CPU: torch dynamic quantisation of this model; GPU: the artefact at `folder` loaded by bitsandbytes."""
        from adaspec.decoding.quant import load_draft_8bit, quantize_draft_int8  # bitsandbytes is optional

        if device.type == "cpu":
            return ModelDraft(quantize_draft_int8(self.model), self.vocab)
        if folder is None:
            raise ValueError("an 8-bit draft on the GPU is loaded from its artefact folder: pass folder")
        return ModelDraft(load_draft_8bit(folder, attn_implementation, device.index or 0), self.vocab)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "parameters": sum(p.numel() for p in self.model.parameters()),
                "draft_vocab_size": None if self.vocab is None else self.vocab.size}


class _ModelSession:
    """One generation's KV cache. It holds the context but the tokens the draft has not read yet: the last
    context token, or two after a fully accepted block (the draft never reads its own last proposal)."""

    def __init__(self, draft: ModelDraft, prompt: Tensor, width: int):
        self.draft, self.model = draft, draft.model
        self.width, self.support = width, (width if draft.vocab is None else draft.vocab.size)
        self.cache = DynamicCache(config=self.model.config)
        self.tree_after: int | None = None  # propose_tree: the tree's rows follow this many context rows
        if prompt.shape[1] > 1:
            forward(self.model, draft.to_draft_ids(prompt[:, :-1]), self.cache, logits_to_keep=1)

    def propose(self, context: Tensor, gamma: int, temperature: float, generator: torch.Generator | None):
        proposals, probs = [], []
        x = context[self.cache.get_seq_length():].view(1, -1)  # what the cache has not read yet
        for _ in range(gamma):
            logits = forward(self.model, self.draft.to_draft_ids(x), self.cache, logits_to_keep=1)[-1, : self.support]
            if temperature == 0:
                token = greedy(logits, keepdim=True)
            else:
                probs.append(torch.softmax(logits.float() / temperature, dim=-1))
                token = sample(probs[-1], generator)
            token = self.draft.to_target_ids(token)
            proposals.append(token)
            x = token.view(1, 1)
        tokens = torch.cat(proposals) if proposals else context.new_empty(0)
        if temperature == 0:
            return tokens, None
        if not probs:
            return tokens, torch.zeros(0, self.width, device=context.device)
        q = torch.stack(probs)
        return tokens, self.draft.to_target_distribution(q)

    def propose_tree(self, context: Tensor, shape: TreeShape, temperature: float,
                     generator: torch.Generator | None) -> Tree:
        """EAGLE-2's tree after `context` (`adaspec.drafts.tree_expansion`): one batched forward per depth over the
        frontier, a 4D mask letting each node see the context and its ancestors. The frontier nodes' keys and
        values stay in the cache until `keep_path`."""
        length = context.shape[0]
        crop_cache(self.cache, length - 1)  # the root's logits come from reading at least the last token
        unread = context[self.cache.get_seq_length():].view(1, -1)
        root_logits = forward(self.model, self.draft.to_draft_ids(unread), self.cache, logits_to_keep=1)[-1]
        scale = temperature if temperature > 0 else 1.0
        dtype, device = next(self.model.parameters()).dtype, context.device
        self.slots: dict[int, int] = {}

        def step(pool: Pool, frontier: list[int]) -> Tensor:
            past = self.cache.get_seq_length()
            seen = frontier_mask(pool, frontier, self.slots, past, length)
            mask = additive(seen, dtype)
            positions = torch.tensor([[length - 1 + pool.depths[node] for node in frontier]], device=device)
            ids = torch.tensor([[pool.tokens[node] for node in frontier]], device=device)  # draft ids
            logits = run(self.model, ids, self.cache, logits_to_keep=len(frontier),
                         attention_mask=mask.to(device)[None, None], position_ids=positions).logits[0]
            return torch.log_softmax(logits[:, : self.support].float() / scale, dim=-1)

        root = torch.log_softmax(root_logits[: self.support].float() / scale, dim=-1)
        self.pool_of_node: list[int] = []
        self.tree_after = length  # the cache's rows from here on are the tree's until keep_path
        return expand(root, step, shape, self.draft.to_target_ids, chosen=self.pool_of_node, temperature=temperature,
                      generator=generator, q_to_target=self.draft.to_target_distribution)

    def keep_path(self, path: list[int]) -> None:
        """Keep the cached rows of the path's nodes that were read (a prefix of it), right after the context."""
        rows = [self.slots.get(self.pool_of_node[node]) for node in path]
        compact_cache(self.cache, self.tree_after, rows[: rows.index(None) if None in rows else len(rows)])
        self.tree_after = None

    def rollback(self, length: int) -> None:
        if self.tree_after is not None:  # a tree nobody verified (the replay): forget its rows
            length, self.tree_after = min(length, self.tree_after), None
        crop_cache(self.cache, length)

