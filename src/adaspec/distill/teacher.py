"""Where stages 2 and 3 get the teacher's distribution from: the live target, or the teacher cache.

A teacher gives, per batch, a `signal` for the answer tokens (computed once, shared by the draft
and the reference), and the per-token divergence of a student's answer logits from that signal: one
divergence (distill.divergence, with distill.jsd_beta for jsd) for the draft and the reference alike, so
dL compares like with like.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel

from adaspec.distill.divergence import token_divergence, topk_divergence
from adaspec.distill.teacher_cache import TeacherCache
from adaspec.distill.tokens import answer_logits


class LiveTeacher:
    """Runs the frozen target on every batch."""

    def __init__(self, target: PreTrainedModel, divergence: str, chunk_size: int, jsd_beta: float = 0.5):
        self.target, self.kind, self.chunk_size, self.jsd_beta = target, divergence, chunk_size, jsd_beta

    @torch.no_grad()
    def signal(self, batch: dict[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        logits = self.target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return answer_logits(logits, mask)

    def divergence(self, signal: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
        return token_divergence(signal, student_logits, self.kind, self.chunk_size, self.jsd_beta)


@dataclass(frozen=True)
class CachedSignal:
    rows: np.ndarray  # cache rows of the batch's answer tokens, in answer-mask order
    payload: Any  # exact: log-probs [N, V]; topk: (log-probs [N, K], ids [N, K], remaining mass [N])


class CachedTeacher:
    """Reads the target's answer-token distributions from a `TeacherCache`."""

    def __init__(self, cache: TeacherCache, divergence: str, chunk_size: int, jsd_beta: float = 0.5):
        self.cache, self.kind, self.chunk_size, self.jsd_beta = cache, divergence, chunk_size, jsd_beta

    def signal(self, batch: dict[str, torch.Tensor], mask: torch.Tensor) -> CachedSignal:
        rows = self.cache.rows_for(batch["index"], mask.sum(1))
        device = batch["input_ids"].device
        if self.cache.spec.mode == "exact":
            return CachedSignal(rows, self.cache.exact_logprobs(rows, device))
        return CachedSignal(rows, self.cache.topk(rows, device))

    def divergence(self, signal: CachedSignal, student_logits: torch.Tensor) -> torch.Tensor:
        if self.cache.spec.mode == "exact":  # log-probabilities are valid logits: log_softmax keeps them
            return token_divergence(signal.payload, student_logits, self.kind, self.chunk_size, self.jsd_beta)
        return topk_divergence(
            *signal.payload, student_logits, self.kind, chunk_size=self.chunk_size, jsd_beta=self.jsd_beta
        )
