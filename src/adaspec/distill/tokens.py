"""Answer-token bookkeeping shared by every stage: which logits predict which labels."""

from __future__ import annotations

import torch

from adaspec.data.encoding import IGNORE


def answer_mask(labels: torch.Tensor) -> torch.Tensor:
    """[B, T-1] bool: logits at position t predict labels[t+1]; prompt and padding are excluded."""
    return labels[:, 1:] != IGNORE


def answer_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, V] logits of the answer positions given by `answer_mask`."""
    return logits[:, :-1][mask]


def answer_targets(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N] next-token ids at the answer positions."""
    return labels[:, 1:][mask]
