"""Which answer tokens stage 3 trains on: the top-k fraction by dL = L_draft - L_ref.

- batch: `select_top_k` picks exactly ceil(k * n) tokens out of n (at least one), so the selected fraction
  is exact even when many dL values tie; ties go to the earlier token.
- quantile: the official AdaSPEC rule, every token with dL >= torch.quantile(dL, 1 - k) over the
  micro-batch's answer tokens. It keeps floor(k * n + 0.6) tokens rather than ceil(k * n) for k = 0.4
  (one fewer whenever n = 3 mod 5, sometimes when n = 1 mod 5 through float32 rank arithmetic) and every
  token tied at the threshold (dL all equal: all of them).
- sequence: the batch rule within each sequence.
- global: every token with dL >= one threshold shared by the batches (the ThresholdRefresh callback keeps it);
  a batch for which it would select a fraction outside [k/2, 2k] is cut at its own top-k instead.
- soft: `soft_selection_weights`, a weight per token from its rank instead of a 0/1 cut.
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


TORCH_QUANTILE_LIMIT = 2**24  # torch.quantile refuses larger inputs


def fraction_band(k: float) -> tuple[float, float]:
    """selection=global: the selected fractions a shared threshold may give a batch, [k/2, min(2k, 1)].
    Outside it the batch is cut at its own top-k instead and the threshold is reset (ThresholdRefresh)."""
    return k / 2, min(2 * k, 1.0)


def global_cut(delta: torch.Tensor, k: float, threshold: float) -> tuple[float, bool]:
    """(the cut for this batch, whether `threshold` left the band): `threshold` when it selects a fraction
    of `delta` inside `fraction_band(k)`, else the batch's own top-k cut."""
    low, high = fraction_band(k)
    fraction = float((delta >= threshold).float().mean()) if delta.numel() else k
    if low <= fraction <= high:
        return threshold, False
    return threshold_for_fraction(delta, k), True


def quantile_threshold(delta: torch.Tensor, k: float) -> torch.Tensor:
    """The official code's threshold, ``torch.quantile(dL, 1 - k)`` in float32 (linear interpolation); for
    more values than torch.quantile takes, the same interpolation between two `kthvalue`s."""
    values = delta.detach().float()
    if values.numel() <= TORCH_QUANTILE_LIMIT:
        return torch.quantile(values, 1 - k)
    rank = torch.tensor(1 - k, dtype=torch.float32) * (values.numel() - 1)
    below = int(torch.floor(rank))
    low = torch.kthvalue(values, below + 1).values
    high = torch.kthvalue(values, min(below + 2, values.numel())).values
    return torch.lerp(low, high, (rank - below).to(values.device))


def soft_selection_weights(delta: torch.Tensor, k: float, temperature: float) -> torch.Tensor:
    """selection=soft: a weight in [0, m / (sum of sigmoids)] per token, [N] float32, m = ceil(k N).

    With r_i the token's 0-based ascending rank of dL (ties: the earlier token ranks higher, as in
    `select_top_k`) and c = N - m - 1/2 the midpoint between the last dropped and the first kept rank of
    the hard top-k, w_i = sigmoid((r_i - c) / (temperature * N)), scaled so that the weights sum to m:
    the mean weight is m / N, i.e. k up to the rounding of the hard selection. As temperature -> 0 the
    weights are the hard top-k mask exactly; as it grows they approach m / N for every token."""
    n = delta.numel()
    if n == 0 or k >= 1.0:
        return torch.ones_like(delta, dtype=torch.float32)
    m = n_selected(n, k)
    order = torch.sort(delta.detach(), descending=True, stable=True).indices
    rank = torch.empty(n, dtype=torch.float32, device=delta.device)
    rank[order] = torch.arange(n - 1, -1, -1, dtype=torch.float32, device=delta.device)
    weights = torch.sigmoid((rank - (n - m - 0.5)) / (temperature * n))
    return weights * (m / weights.sum())


def select_top_k(
    delta: torch.Tensor,
    k: float,
    mode: str | Selection = Selection.batch,
    sequence_ids: torch.Tensor | None = None,
    threshold: float | None = None,
) -> torch.Tensor:
    """Boolean mask over the N answer tokens in `delta` ([N]).

    batch: top-k over all N tokens. quantile: dL >= torch.quantile(dL, 1 - k). sequence: top-k within
    each sequence (`sequence_ids` [N]). global: every token with dL >= `threshold`. soft: the hard top-k
    that its weights centre on (the mask the selection statistics count).
    """
    mode = mode.value if isinstance(mode, Selection) else str(mode)
    if k >= 1.0:
        return torch.ones_like(delta, dtype=torch.bool)
    if mode in (Selection.batch.value, Selection.soft.value):
        return _top_k_mask(delta, k)
    if mode == Selection.quantile.value:
        if delta.numel() == 0:
            return torch.zeros_like(delta, dtype=torch.bool)
        return delta.float() >= quantile_threshold(delta, k)
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
