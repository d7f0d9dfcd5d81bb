"""Which answer tokens stage 3 trains on: the top-k fraction by dL = L_draft - L_ref.

`select_top_k` picks exactly ceil(k * n) tokens out of n (at least one), so the selected fraction
is exact even when many dL values tie; ties go to the earlier token. The official AdaSPEC code
thresholds at the batch quantile instead, which selects more than k of the tokens when values tie
at the threshold.
"""

from __future__ import annotations

import math

import torch

from adaspec.config import Selection


def n_selected(n: int, k: float) -> int:
    return min(n, max(1, math.ceil(k * n - 1e-9))) if n else 0


def _top_k_mask(delta: torch.Tensor, k: float) -> torch.Tensor:
    mask = torch.zeros_like(delta, dtype=torch.bool)
    order = torch.sort(delta, descending=True, stable=True).indices
    mask[order[: n_selected(delta.numel(), k)]] = True
    return mask


def threshold_for_fraction(delta: torch.Tensor, k: float) -> float:
    """The dL value of the last token kept when keeping the top-k fraction of `delta`."""
    if delta.numel() == 0:
        raise ValueError("cannot estimate a selection threshold from zero tokens")
    ordered = torch.sort(delta.float(), descending=True).values
    return float(ordered[n_selected(delta.numel(), k) - 1])


def select_top_k(
    delta: torch.Tensor,
    k: float,
    mode: str | Selection = Selection.batch,
    sequence_ids: torch.Tensor | None = None,
    threshold: float | None = None,
) -> torch.Tensor:
    """Boolean mask over the N answer tokens in `delta` ([N]).

    batch: top-k over all N tokens. sequence: top-k within each sequence (`sequence_ids` [N]).
    global: every token with dL >= `threshold` (estimated elsewhere on calibration batches).
    """
    mode = mode.value if isinstance(mode, Selection) else str(mode)
    if k >= 1.0:
        return torch.ones_like(delta, dtype=torch.bool)
    if mode == Selection.batch.value:
        return _top_k_mask(delta, k)
    if mode == Selection.sequence.value:
        if sequence_ids is None:
            raise ValueError("selection=sequence needs sequence_ids")
        mask = torch.zeros_like(delta, dtype=torch.bool)
        for seq in torch.unique(sequence_ids):
            rows = (sequence_ids == seq).nonzero(as_tuple=True)[0]
            mask[rows] = _top_k_mask(delta[rows], k)
        return mask
    if mode == Selection["global"].value:  # `global` is a Python keyword: no attribute access
        if threshold is None:
            raise ValueError("selection=global needs a threshold; the ThresholdRefresh callback sets it")
        return delta >= threshold
    raise ValueError(f"unknown selection mode {mode!r}; allowed: {[s.value for s in Selection]}")
