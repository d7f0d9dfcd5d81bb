"""Per-token divergences between a teacher's and a student's next-token distributions.

Inputs are logits of answer positions only, [N, V]. The work runs in chunks of tokens so that the
float32 log-probabilities of teacher and student never exist for all N tokens at once; with
gradients on, each chunk is recomputed in the backward pass (activation checkpointing) instead of
keeping its [chunk, V] intermediates alive.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from adaspec.config import Divergence


def _chunk_divergence(teacher_logits: torch.Tensor, student_logits: torch.Tensor, kind: str) -> torch.Tensor:
    log_p = F.log_softmax(teacher_logits.float(), dim=-1)
    log_q = F.log_softmax(student_logits.float(), dim=-1)
    if kind == Divergence.forward_kl.value:  # KL(p_teacher || q_student)
        return (log_p.exp() * (log_p - log_q)).sum(-1)
    if kind == Divergence.reverse_kl.value:  # KL(q_student || p_teacher)
        return (log_q.exp() * (log_q - log_p)).sum(-1)
    if kind == Divergence.tvd.value:
        return 0.5 * (log_p.exp() - log_q.exp()).abs().sum(-1)
    raise ValueError(f"unknown divergence {kind!r}; allowed: {[d.value for d in Divergence]}")


def token_divergence(
    teacher_logits: torch.Tensor,
    student_logits: torch.Tensor,
    kind: str | Divergence = Divergence.forward_kl,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """Divergence per token, shape [N], float32; differentiable with respect to the student only."""
    kind = kind.value if isinstance(kind, Divergence) else str(kind)
    teacher_logits = teacher_logits.detach()
    use_checkpoint = torch.is_grad_enabled() and student_logits.requires_grad
    pieces = []
    for start in range(0, teacher_logits.shape[0], chunk_size):
        t, s = teacher_logits[start : start + chunk_size], student_logits[start : start + chunk_size]
        if use_checkpoint:
            pieces.append(checkpoint(_chunk_divergence, t, s, kind, use_reentrant=False))
        else:
            pieces.append(_chunk_divergence(t, s, kind))
    if not pieces:
        return student_logits.new_zeros(0, dtype=torch.float32)
    return torch.cat(pieces)
