"""Which answer tokens stage 3 trains on: the top-k fraction by dL = L_draft - L_ref.

Every rule is one function registered by name in `RULES` (the config's `distill.selection` choices come
from it): from the per-token dL [N], the answer mask [B, T-1] and k, plus a `SelectionState` for what a
rule reads beyond them, to a `SelectionRecord` of the tokens it kept, their weights and the cut it made.
Callbacks read the record (a training step's output), never attributes of the module.

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
from collections.abc import Callable
from dataclasses import dataclass

import torch


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


@dataclass
class SelectionState:
    """What a rule reads beyond dL, the mask and k."""

    threshold: float | None = None  # global: the threshold shared by the batches (ThresholdRefresh moves it)
    temperature: float = 0.05  # soft: distill.soft_temperature
    # batch under distill.global_quantile with several devices: every device's dL, concatenated
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None


@dataclass
class SelectionRecord:
    """What a rule did to one batch: the tokens it kept ([N] bool: the mask the statistics count), their
    weights ([N] float, None for 0/1), the dL of its cut (nan when it kept nothing), whether a shared
    threshold left its band (global: reset it), the dL it ranked and the label ids of the N tokens."""

    selected: torch.Tensor
    weights: torch.Tensor | None
    threshold: float
    delta: torch.Tensor
    out_of_band: bool = False
    answer_ids: torch.Tensor | None = None


Rule = Callable[[torch.Tensor, torch.Tensor | None, float, SelectionState], SelectionRecord]
RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return register


def _record(
    delta: torch.Tensor,
    selected: torch.Tensor,
    cut: float | None,
    weights: torch.Tensor | None = None,
    out_of_band: bool = False,
) -> SelectionRecord:
    """The record of a rule that kept `selected`; `cut` None: the dL of the last token kept."""
    if cut is None:
        cut = float(delta[selected].min()) if selected.any() else float("nan")
    return SelectionRecord(selected, weights, cut, delta, out_of_band)


def _everything(delta: torch.Tensor) -> SelectionRecord:
    return _record(delta, torch.ones_like(delta, dtype=torch.bool), None)


@rule("batch")
def batch_rule(delta, mask, k, state) -> SelectionRecord:
    """Exactly the top ceil(k N) of the batch's N tokens. Under distill.global_quantile (`state.gather`):
    every token at or above the cut of all devices' tokens, held to the band of `global`."""
    if k >= 1.0:
        return _everything(delta)
    if state.gather is not None:
        cut, out_of_band = global_cut(delta, k, threshold_for_fraction(state.gather(delta), k))
        return _record(delta, delta >= cut, cut, out_of_band=out_of_band)
    return _record(delta, _top_k_mask(delta, k), None)


@rule("sequence")
def sequence_rule(delta, mask, k, state) -> SelectionRecord:
    """The batch rule within each sequence (a row of `mask`)."""
    if k >= 1.0:
        return _everything(delta)
    if mask is None:
        raise ValueError("selection=sequence needs the answer mask")
    sequence_ids = torch.arange(mask.shape[0], device=mask.device)[:, None].expand_as(mask)[mask]
    selected = torch.zeros_like(delta, dtype=torch.bool)
    for seq in torch.unique(sequence_ids):
        rows = (sequence_ids == seq).nonzero(as_tuple=True)[0]
        selected[rows] = _top_k_mask(delta[rows], k)
    return _record(delta, selected, None)


@rule("global")
def global_rule(delta, mask, k, state) -> SelectionRecord:
    """Every token with dL >= the shared `state.threshold`, unless it would select a fraction outside
    `fraction_band(k)`: then the batch's own top-k cut, and `out_of_band` tells ThresholdRefresh to reset."""
    if k >= 1.0:
        return _everything(delta)
    if state.threshold is None:
        raise ValueError("selection=global needs a threshold; the ThresholdRefresh callback sets it")
    cut, out_of_band = global_cut(delta, k, state.threshold)
    return _record(delta, delta >= cut, cut, out_of_band=out_of_band)


@rule("quantile")
def quantile_rule(delta, mask, k, state) -> SelectionRecord:
    """The official code's rule: dL >= torch.quantile(dL, 1 - k), ties kept."""
    if k >= 1.0 or delta.numel() == 0:
        return _everything(delta)
    cut = quantile_threshold(delta, k)
    return _record(delta, delta.float() >= cut, float(cut))


@rule("soft")
def soft_rule(delta, mask, k, state) -> SelectionRecord:
    """Weights from the rank of dL (`soft_selection_weights`); `selected` is the hard top-k they centre on."""
    if k >= 1.0:
        return _everything(delta)
    weights = soft_selection_weights(delta, k, state.temperature)
    return _record(delta, _top_k_mask(delta, k), None, weights=weights)


def select(
    name: str, delta: torch.Tensor, k: float, mask: torch.Tensor | None = None, state: SelectionState | None = None
) -> SelectionRecord:
    """Rule `name` applied to `delta` ([N]); `mask` [B, T-1] says which sequence each token is in."""
    if name not in RULES:
        raise ValueError(f"unknown selection rule {name!r}; allowed: {sorted(RULES)}")
    return RULES[name](delta, mask, k, state or SelectionState())
