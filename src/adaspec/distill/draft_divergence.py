"""A draft's per-token divergence from the teacher on a batch's answer tokens: what stages 2-3 train and select
on, for the student and for the frozen reference alike (and what the reference-divergence cache stores)."""

from __future__ import annotations

import torch

from adaspec.drafts import TrainedDraft


def draft_divergence(draft: TrainedDraft, batch: dict[str, torch.Tensor], mask: torch.Tensor, signal,
                     teacher, passes: int = 1) -> torch.Tensor:
    """[N] divergence of a draft's answer tokens (`mask` [B, T-1]) from the teacher's signal, as its kind trains:
    an EAGLE-3 head sums `passes` passes of its training-time test (`TrainedDraft.answer_divergence`)."""
    return draft.answer_divergence(batch, mask, lambda logits: teacher.divergence(signal, logits), passes)
