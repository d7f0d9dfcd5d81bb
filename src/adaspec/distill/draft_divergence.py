"""A draft's per-token divergence from the teacher on a batch's answer tokens: what stages 2-3 train and select
on, for the student and for the frozen reference alike (and what the reference-divergence cache stores)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from adaspec.distill.tokens import answer_logits
from adaspec.drafts import Eagle3Draft, ModelDraft

TTT_DECAY = 0.8  # EAGLE-3's weight of pass k of its training-time test: 0.8^k


def draft_divergence(draft: ModelDraft | Eagle3Draft, batch: dict[str, torch.Tensor], mask: torch.Tensor, signal,
                     teacher, passes: int = 1) -> torch.Tensor:
    """[N] divergence of a draft's answer tokens (`mask` [B, T-1]) from the teacher's signal. An EAGLE-3 head:
    the sum over `passes` passes of EAGLE-3's training-time test of 0.8^k times pass k's (one pass: its plain
    logits), its output layer run on the answer positions only."""
    if not isinstance(draft, Eagle3Draft):
        logits = draft.logits(batch["input_ids"], attention_mask=batch["attention_mask"], index=batch.get("index"))
        return teacher.divergence(signal, answer_logits(logits, mask))
    rows = F.pad(mask, (0, 1))  # the answer positions: the head's output layer runs there only
    unrolled = draft.unrolled_logits(batch["input_ids"], passes, attention_mask=batch["attention_mask"],
                                     index=batch.get("index"), rows=rows)
    return sum(TTT_DECAY**k * teacher.divergence(signal, logits) for k, logits in enumerate(unrolled))
