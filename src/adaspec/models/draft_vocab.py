"""A reduced draft vocabulary (EAGLE-3's ``draft_vocab_size``, FR-Spec): the draft's embedding and output
head cover only the N most frequent target-tokenizer tokens of the training text, so at a 49k-token
vocabulary its output head stops dominating its cost.

`DraftVocab` is the id map between the two vocabularies: ``draft_to_target [N]`` (increasing target
ids) and ``target_to_draft [V]`` (-1 for a target token the draft cannot propose). The draft reads and
writes draft ids; a target token outside the map that appears in the context is fed to the draft as
the *fallback* token (the tokenizer's unk, else its eos). Speculative decoding stays exact: the draft's
proposals are mapped to target ids and verified by the target, and in sampling mode the draft's
probability of an excluded token is 0 (`DraftVocab.scatter`).

The map is saved next to the draft's weights as ``draft_vocab.json``; the shrunk model's config carries
``target_vocab_size`` so that a reduced draft is recognised without its map (`is_reduced`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

from adaspec.errors import UserError

VOCAB_FILE = "draft_vocab.json"
SPECIAL_TOKEN_IDS = ("eos_token_id", "pad_token_id", "bos_token_id", "unk_token_id")


@dataclass(frozen=True, eq=False)
class DraftVocab:
    draft_to_target: Tensor  # LongTensor [N], strictly increasing target ids
    target_size: int  # V: width of the target's logits
    fallback_target_id: int  # fed to the draft for a context token outside the map; must be in the map
    target_to_draft: Tensor = field(init=False)  # LongTensor [V], -1 where excluded

    def __post_init__(self) -> None:
        d2t = torch.as_tensor(self.draft_to_target, dtype=torch.long)
        if d2t.ndim != 1 or d2t.numel() == 0 or not bool((d2t[1:] > d2t[:-1]).all()):
            raise ValueError(
                "draft_to_target must be a non-empty, strictly increasing 1-D tensor of target ids"
            )
        if int(d2t[0]) < 0 or int(d2t[-1]) >= self.target_size:
            raise ValueError(f"draft_to_target ids must lie in [0, {self.target_size})")
        t2d = torch.full((self.target_size,), -1, dtype=torch.long, device=d2t.device)
        t2d[d2t] = torch.arange(d2t.numel(), device=d2t.device)
        if not 0 <= self.fallback_target_id < self.target_size or int(t2d[self.fallback_target_id]) < 0:
            raise ValueError(f"the fallback token {self.fallback_target_id} must be in the draft vocabulary")
        object.__setattr__(self, "draft_to_target", d2t)
        object.__setattr__(self, "target_to_draft", t2d)

    @property
    def size(self) -> int:
        return self.draft_to_target.numel()

    @property
    def fallback_draft_id(self) -> int:
        return int(self.target_to_draft[self.fallback_target_id])

    def to(self, device: torch.device | str) -> DraftVocab:
        if self.draft_to_target.device == torch.device(device):
            return self
        moved = copy.copy(self)  # checked when it was made: moving it reads nothing back from the device
        object.__setattr__(moved, "draft_to_target", self.draft_to_target.to(device))
        object.__setattr__(moved, "target_to_draft", self.target_to_draft.to(device))
        return moved

    def contains(self, target_ids: Tensor) -> Tensor:
        return self.target_to_draft[target_ids] >= 0

    def to_draft(self, target_ids: Tensor) -> Tensor:
        """Draft ids of ``target_ids`` (any shape); tokens outside the map become the fallback token."""
        draft_ids = self.target_to_draft[target_ids]
        return torch.where(draft_ids >= 0, draft_ids, self.fallback_draft_id)

    def labels_to_draft(self, labels: Tensor, ignore_index: int = -100) -> Tensor:
        """Cross-entropy labels in draft ids: ``ignore_index`` stays, tokens outside the map are ignored
        (the draft cannot predict them; `to_draft` would turn them into the fallback token)."""
        inside = (labels >= 0) & (labels < self.target_size)
        draft_ids = torch.where(inside, self.target_to_draft[labels.clamp(0, self.target_size - 1)], -1)
        return torch.where(draft_ids >= 0, draft_ids, ignore_index)

    def to_target(self, draft_ids: Tensor) -> Tensor:
        return self.draft_to_target[draft_ids]

    def scatter(self, draft_values: Tensor, fill: float = 0.0) -> Tensor:
        """``[..., N]`` values over the draft vocabulary as ``[..., V]`` over the target's, ``fill`` elsewhere:
        0 for probabilities (the draft never proposes an excluded token), ``-inf`` for logits."""
        out = draft_values.new_full((*draft_values.shape[:-1], self.target_size), fill)
        return out.index_copy_(-1, self.draft_to_target, draft_values)

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / VOCAB_FILE
        path.write_text(
            json.dumps(
                {
                    "target_vocab_size": self.target_size,
                    "fallback_target_id": self.fallback_target_id,
                    "draft_to_target": self.draft_to_target.tolist(),
                }
            )
        )
        return path


def load_draft_vocab(folder: str | Path) -> DraftVocab | None:
    """The map saved with a draft in ``folder``, or None when the draft has the full vocabulary."""
    path = Path(folder) / VOCAB_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return DraftVocab(
            torch.tensor(data["draft_to_target"]), data["target_vocab_size"], data["fallback_target_id"]
        )
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(
            f"{path} is not a valid draft vocabulary map ({err}); delete the draft folder and rebuild it"
        ) from err


def token_counts(sequences: Iterable[Sequence[int] | np.ndarray | Tensor], target_size: int) -> np.ndarray:
    """How often each target token id occurs in ``sequences`` (e.g. the training split's input ids)."""
    counts = np.zeros(target_size, dtype=np.int64)
    for ids in sequences:
        ids = np.asarray(ids.cpu() if isinstance(ids, Tensor) else ids, dtype=np.int64).ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= target_size):
            raise ValueError(f"token ids must lie in [0, {target_size}), got [{ids.min()}, {ids.max()}]")
        counts += np.bincount(ids, minlength=target_size)
    return counts


def most_frequent_vocab(
    counts: np.ndarray, size: int, keep_ids: Iterable[int], fallback_target_id: int
) -> DraftVocab:
    """The ``size`` most frequent tokens of ``counts [V]`` (ties: lower id first), always including
    ``keep_ids`` (special tokens: eos, end of turn, pad) and the fallback token."""
    target_size = len(counts)
    keep = sorted({int(i) for i in keep_ids} | {int(fallback_target_id)})
    if not len(keep) <= size <= target_size:
        raise UserError(
            f"model.draft_vocab_size={size} must lie between the {len(keep)} special tokens it always keeps "
            f"and the target's vocabulary size {target_size}"
        )
    if keep[0] < 0 or keep[-1] >= target_size:
        raise ValueError(f"special token ids must lie in [0, {target_size}), got {keep}")
    by_frequency = np.lexsort((np.arange(target_size), -counts))  # count descending, then id ascending
    chosen = np.zeros(target_size, dtype=bool)
    chosen[keep] = True
    rest = by_frequency[~chosen[by_frequency]][: size - len(keep)]
    chosen[rest] = True
    return DraftVocab(torch.from_numpy(np.flatnonzero(chosen)), target_size, int(fallback_target_id))


def special_token_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Every special token of the tokenizer (eos, pad, end-of-turn and other chat markers, ...)."""
    ids = set(tokenizer.all_special_ids)
    ids.update(i for name in SPECIAL_TOKEN_IDS if (i := getattr(tokenizer, name, None)) is not None)
    return ids


def build_draft_vocab(
    sequences: Iterable[Sequence[int] | np.ndarray | Tensor],
    tokenizer: PreTrainedTokenizerBase,
    size: int,
    target_size: int,
) -> DraftVocab:
    """The map of the ``size`` most frequent tokens of ``sequences`` (target ids), with every special token
    of ``tokenizer``. ``target_size`` is the target's logit width (``target.config.vocab_size``, which
    may exceed ``len(tokenizer)`` by padding). The fallback is the tokenizer's unk token, else its eos."""
    fallback = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else tokenizer.eos_token_id
    if fallback is None:
        raise UserError(
            "the target's tokenizer has neither an unk nor an eos token; a reduced draft vocabulary "
            "needs one of them for context tokens outside it"
        )
    counts = token_counts(sequences, target_size)
    return most_frequent_vocab(counts, size, special_token_ids(tokenizer), fallback)


def is_reduced(config: PretrainedConfig) -> bool:
    return getattr(config, "target_vocab_size", None) is not None


def reduced_config(config: PretrainedConfig, vocab: DraftVocab) -> PretrainedConfig:
    """A copy of a full-vocabulary draft ``config`` with ``vocab_size = N``, its special token ids in draft
    ids, and ``target_vocab_size = V`` (the marker `is_reduced` reads)."""
    out = copy.deepcopy(config)
    _reduce_config_in_place(out, vocab)
    return out


def _reduce_config_in_place(config: PretrainedConfig, vocab: DraftVocab) -> None:
    config.vocab_size = vocab.size
    config.target_vocab_size = vocab.target_size
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(config, name, _draft_id(getattr(config, name, None), vocab))


def _draft_id(target_id: int | list[int] | None, vocab: DraftVocab) -> int | list[int] | None:
    if target_id is None:
        return None
    if isinstance(target_id, list):
        return [i for i in (_draft_id(t, vocab) for t in target_id) if i is not None]
    draft_id = int(vocab.target_to_draft[target_id]) if 0 <= target_id < vocab.target_size else -1
    return draft_id if draft_id >= 0 else None


@torch.no_grad()
def shrink_to_draft_vocab(model: PreTrainedModel, vocab: DraftVocab) -> PreTrainedModel:
    """Keep only the rows of ``vocab`` in the model's input embedding and output head (in place; a tied
    head stays tied) and switch its config to `reduced_config`. Returns ``model``."""
    if is_reduced(model.config):
        raise ValueError("the model already has a reduced vocabulary")
    if model.config.vocab_size < vocab.target_size:
        raise ValueError(
            f"the model has {model.config.vocab_size} token rows, the map needs {vocab.target_size}"
        )
    rows = vocab.draft_to_target.to(model.device)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head is not None and head.weight is embedding.weight
    embedding.weight = nn.Parameter(embedding.weight[rows].clone())
    embedding.num_embeddings = vocab.size
    if getattr(embedding, "padding_idx", None) is not None:
        embedding.padding_idx = _draft_id(embedding.padding_idx, vocab)
    if head is not None:
        head.weight = embedding.weight if tied else nn.Parameter(head.weight[rows].clone())
        if head.bias is not None:
            head.bias = nn.Parameter(head.bias[rows].clone())
        head.out_features = vocab.size
    _reduce_config_in_place(model.config, vocab)  # in place: the inner modules share this config object
    if model.generation_config is not None:
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            setattr(model.generation_config, name, getattr(model.config, name))
    return model


def require_full_vocabulary(draft: PreTrainedModel, purpose: str) -> None:
    """A UserError for code paths that feed draft ids to the target unmapped (HF assisted generation)."""
    if is_reduced(draft.config):
        raise UserError(
            f"{purpose} does not support a draft with a reduced vocabulary (model.draft_vocab_size="
            f"{draft.config.vocab_size}); use the project's speculative decoding, or a full-vocabulary draft"
        )
