"""Teacher-signal cache: the frozen target's next-token distribution on every answer token of the
training split, computed once and memory-mapped, so that stages 2 and 3 (every k, every seed, the
DistillSpec baseline) need no target forward pass.

Rows are the answer tokens of example 0, then example 1, ... in the order `answer_mask` visits them;
`offsets[i]:offsets[i+1]` are example i's rows, so batches in any shuffled order find their rows
through `batch["index"]`. Two forms:

- `exact`: full log-probabilities, float16, [rows, vocab]. The divergences equal the live ones up to
  float16 rounding of the teacher's log-probabilities.
- `topk`: the K largest log-probabilities and their ids, float16/int32 [rows, K], and the probability
  mass outside them, float32 [rows]. Forward KL is then computed against the truncated distribution
  with the remaining mass as one explicit bucket (see `topk_forward_kl`); it is a lower bound of
  the exact KL (merging outcomes never increases a KL divergence, by the data-processing
  inequality), exact when the remaining mass is zero. The reverse KL, TVD and JSD are taken on the
  same coarsened distributions (`adaspec.distill.divergence.topk_divergence`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from tqdm import tqdm

from adaspec.artefacts.store import write_atomically
from adaspec.data.encoding import by_length, collate
from adaspec.distill.mapped_array import mapped
from adaspec.distill.tokens import answer_logits, answer_mask
from adaspec.errors import UserError

META = "cache.json"


@dataclass(frozen=True)
class CacheSpec:
    mode: str  # exact | topk
    topk: int = 64

    @property
    def name(self) -> str:
        return "exact" if self.mode == "exact" else f"topk{self.topk}"


def data_identity(encoded) -> str:
    """Hash of the tokenised training split: covers the task, its data, the tokenizer and max length."""
    digest = hashlib.sha256()
    for e in encoded:
        digest.update(np.asarray(e.input_ids, dtype=np.int32).tobytes())
        digest.update(np.asarray(e.labels, dtype=np.int32).tobytes())
    return digest.hexdigest()[:16]


def answer_counts(encoded) -> np.ndarray:
    return np.array([sum(1 for label in e.labels[1:] if label != -100) for e in encoded], dtype=np.int64)


def cache_bytes(n_rows: int, vocab: int, spec: CacheSpec) -> int:
    if spec.mode == "exact":
        return n_rows * vocab * 2
    return n_rows * (spec.topk * (2 + 4) + 4)


class TeacherCache:
    """Read side: per-batch teacher signal rows from the memory-mapped arrays."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        meta_path = self.folder / META
        if not meta_path.is_file():
            raise UserError(f"no teacher cache at {self.folder}; make it with `make cache` (python -m adaspec.commands.cache)")
        self.meta = json.loads(meta_path.read_text())
        self.spec = CacheSpec(self.meta["mode"], self.meta["topk"])
        self.offsets = np.load(self.folder / "offsets.npy")
        rows, vocab, k = self.meta["rows"], self.meta["vocab"], self.spec.topk
        fix = "rebuild it with `make cache` and overwrite=true"
        if self.spec.mode == "exact":
            self.logprobs = mapped(self.folder / "logprobs.f16", np.float16, (rows, vocab), fix)
        else:
            self.top_logprobs = mapped(self.folder / "top_logprobs.f16", np.float16, (rows, k), fix)
            self.top_ids = mapped(self.folder / "top_ids.i32", np.int32, (rows, k), fix)
            self.rest = mapped(self.folder / "rest_mass.f32", np.float32, (rows,), fix)

    def check_identity(self, identity: dict[str, str]) -> None:
        """Refuse a cache made for another target, tokenizer, task or max length."""
        for key, value in identity.items():
            if self.meta["identity"].get(key) != value:
                raise UserError(
                    f"the teacher cache {self.folder} was made for another {key} "
                    f"({self.meta['identity'].get(key)} != {value}); rebuild it with `make cache` and overwrite=true"
                )

    def rows_for(self, indices: torch.Tensor, answer_tokens: torch.Tensor) -> np.ndarray:
        """Row numbers of the batch's answer tokens, in `answer_mask` order; checks the counts match."""
        rows = []
        for index, n in zip(indices.tolist(), answer_tokens.tolist(), strict=True):
            start, end = int(self.offsets[index]), int(self.offsets[index + 1])
            if end - start != n:
                raise UserError(
                    f"teacher cache {self.folder}: example {index} has {end - start} cached answer tokens but the "
                    f"batch has {n}; the cache was made with other data settings, rebuild it with `make cache`"
                )
            rows.append(np.arange(start, end))
        return np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)

    def exact_logprobs(self, rows: np.ndarray, device) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.logprobs[rows], dtype=np.float32)).to(device)

    def topk(self, rows: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            torch.from_numpy(np.asarray(self.top_logprobs[rows], dtype=np.float32)).to(device),
            torch.from_numpy(np.asarray(self.top_ids[rows], dtype=np.int64)).to(device),
            torch.from_numpy(np.asarray(self.rest[rows], dtype=np.float32)).to(device),
        )


def _topk_kl_chunk(top_logp: torch.Tensor, top_ids: torch.Tensor, rest: torch.Tensor, student: torch.Tensor):
    log_q = F.log_softmax(student.float(), dim=-1)
    log_q_top = log_q.gather(-1, top_ids)
    kl_top = (top_logp.exp() * (top_logp - log_q_top)).sum(-1)
    q_rest = (1 - log_q_top.exp().sum(-1)).clamp_min(1e-12)
    kl_rest = torch.where(rest > 0, rest * (rest.clamp_min(1e-12).log() - q_rest.log()), torch.zeros_like(rest))
    return kl_top + kl_rest


def topk_forward_kl(
    top_logp: torch.Tensor, top_ids: torch.Tensor, rest: torch.Tensor, student_logits: torch.Tensor, chunk_size: int = 1024
) -> torch.Tensor:
    """KL(p_topk+rest || q_topk+rest) per token, [N]: the teacher's K tokens plus one bucket holding
    the remaining mass, against the student's probabilities of the same K tokens and bucket."""
    use_checkpoint = torch.is_grad_enabled() and student_logits.requires_grad
    pieces = []
    for s in range(0, student_logits.shape[0], chunk_size):
        args = (top_logp[s : s + chunk_size], top_ids[s : s + chunk_size], rest[s : s + chunk_size])
        piece = student_logits[s : s + chunk_size]
        if use_checkpoint:
            pieces.append(checkpoint(_topk_kl_chunk, *args, piece, use_reentrant=False))
        else:
            pieces.append(_topk_kl_chunk(*args, piece))
    return torch.cat(pieces) if pieces else student_logits.new_zeros(0)


@torch.inference_mode()
def write_teacher_cache(
    target, encoded, folder: Path, spec: CacheSpec, identity: dict[str, str], *, batch_size: int, pad_id: int,
    progress: bool = True, features=None,
) -> Path:
    """Run `target` once over `encoded` and write the cache atomically into `folder`; `features` (a
    feature_cache.FeatureSink) is given the hidden states of the same forward."""
    counts = answer_counts(encoded)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    rows, vocab = int(offsets[-1]), int(target.config.vocab_size)
    device = next(target.parameters()).device

    def fill(tmp: Path) -> None:
        np.save(tmp / "offsets.npy", offsets)
        if spec.mode == "exact":
            logprobs = np.memmap(tmp / "logprobs.f16", dtype=np.float16, mode="w+", shape=(rows, vocab))
        else:
            top_lp = np.memmap(tmp / "top_logprobs.f16", dtype=np.float16, mode="w+", shape=(rows, spec.topk))
            top_ids = np.memmap(tmp / "top_ids.i32", dtype=np.int32, mode="w+", shape=(rows, spec.topk))
            rest = np.memmap(tmp / "rest_mass.f32", dtype=np.float32, mode="w+", shape=(rows,))
        written = 0
        for chunk in tqdm(by_length(encoded, batch_size), desc=f"teacher cache ({spec.name})", disable=not progress):
            batch = {k: v.to(device) for k, v in collate([encoded[i] for i in chunk], pad_id).items()}
            mask = answer_mask(batch["labels"])
            out = target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         output_hidden_states=features is not None)
            if features is not None:
                features.add(chunk, out.hidden_states)
            logits = out.logits
            logp = F.log_softmax(answer_logits(logits, mask).float(), dim=-1)  # the batch's answer rows in order
            if spec.mode == "exact":
                columns = [(logprobs, logp.cpu().numpy().astype(np.float16))]
            else:
                values, ids = logp.topk(spec.topk, dim=-1)
                columns = [(top_lp, values.cpu().numpy().astype(np.float16)),
                           (top_ids, ids.cpu().numpy().astype(np.int32)),
                           (rest, (1 - values.exp().sum(-1)).clamp_min(0).cpu().numpy())]
            first = 0
            for i in chunk:  # each example's rows at its own offsets
                n = int(counts[i])
                for array, computed in columns:
                    array[offsets[i] : offsets[i] + n] = computed[first : first + n]
                first += n
            assert first == logp.shape[0], (first, logp.shape)
            written += first
        assert written == rows, (written, rows)
        for array in ([logprobs] if spec.mode == "exact" else [top_lp, top_ids, rest]):
            array.flush()
        meta = {"mode": spec.mode, "topk": spec.topk, "rows": rows, "vocab": vocab, "identity": identity,
                "examples": len(encoded)}
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True))

    write_atomically(Path(folder), fill)
    return Path(folder)


def derive_topk(source: TeacherCache, folder: Path, topk: int, identity: dict[str, str]) -> Path:
    """A top-`topk` cache cut from a top-K cache (K > topk) of the same target and data, without running the
    target: the K values are sorted, so their first `topk` are the top-`topk`, and the bucket takes the rest
    (equal to a direct top-`topk` cache up to the float16 rounding of the stored log-probabilities)."""
    if source.spec.mode != "topk" or source.spec.topk <= topk:
        raise ValueError(f"cannot cut top-{topk} from {source.spec.name}")
    source.check_identity(identity)
    rows = source.meta["rows"]

    def fill(tmp: Path) -> None:
        np.save(tmp / "offsets.npy", source.offsets)
        top_lp = np.memmap(tmp / "top_logprobs.f16", dtype=np.float16, mode="w+", shape=(rows, topk))
        top_ids = np.memmap(tmp / "top_ids.i32", dtype=np.int32, mode="w+", shape=(rows, topk))
        rest = np.memmap(tmp / "rest_mass.f32", dtype=np.float32, mode="w+", shape=(rows,))
        for start in range(0, rows, 65536):
            end = min(start + 65536, rows)
            values = np.asarray(source.top_logprobs[start:end, :topk])
            top_lp[start:end] = values
            top_ids[start:end] = source.top_ids[start:end, :topk]
            rest[start:end] = np.clip(1 - np.exp(values.astype(np.float64)).sum(-1), 0, None)
        for array in (top_lp, top_ids, rest):
            array.flush()
        meta = {**source.meta, "topk": topk, "derived_from": source.spec.name}
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True))

    write_atomically(Path(folder), fill)
    return Path(folder)
