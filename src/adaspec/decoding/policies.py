"""Gamma (draft block length) policies.

Interface used by the decoding loop, per generation:
``reset()`` once, then per block ``gamma = next_gamma(context_len)`` and, after verification,
``update(n_proposed, n_accepted)``. Blocks without proposals (``n_proposed == 0``) are ignored.

Every policy lowers gamma by ``long_context_reduction`` (1 or 2) once the context (prompt plus
generated tokens) is longer than ``long_context_threshold`` tokens, never below 1.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class Policy:
    """Base class: the long-context reduction. Subclasses implement ``_gamma``, ``update``, ``reset``."""

    def __init__(self, long_context_threshold: int = 2048, long_context_reduction: int = 1) -> None:
        if long_context_reduction not in (1, 2):
            raise ValueError(f"long_context_reduction must be 1 or 2, got {long_context_reduction}")
        self.long_context_threshold = long_context_threshold
        self.long_context_reduction = long_context_reduction

    def _gamma(self) -> int:
        raise NotImplementedError

    def next_gamma(self, context_len: int) -> int:
        gamma = self._gamma()
        if context_len > self.long_context_threshold:
            gamma -= self.long_context_reduction
        return max(1, gamma)

    def update(self, n_proposed: int, n_accepted: int) -> None:
        pass

    def reset(self) -> None:
        pass


class FixedGamma(Policy):
    def __init__(self, gamma: int, **long_context: int) -> None:
        super().__init__(**long_context)
        if gamma < 1:
            raise ValueError(f"gamma must be >= 1, got {gamma}")
        self.gamma = gamma

    def _gamma(self) -> int:
        return self.gamma


class AdaptiveGamma(Policy):
    """Pick gamma from the recent rejection rate (the AdaSPEC practice note).

    The rejection rate over the last ``window`` blocks is ``rejected / (accepted + rejected)``, with
    ``rejected`` the number of those blocks that had a rejection and ``accepted`` their accepted
    proposals, i.e. ``1 - alpha`` over the window. This estimates the per-token rejection
    probability: it counts only judged proposals (the verifier stops at the first rejection) and,
    unlike ``rejected blocks / blocks`` or ``(proposed - accepted) / proposed``, does not itself
    depend on gamma, so changing gamma does not feed back into the estimate.

    rate < low -> min(base + 2, max_gamma); rate > high -> max(base - 1, min_gamma); else base.
    ``base`` is used until a block has been observed.
    """

    def __init__(
        self,
        base: int = 5,
        window: int = 8,
        low: float = 0.2,
        high: float = 0.4,
        max_gamma: int = 8,
        min_gamma: int = 3,
        **long_context: int,
    ) -> None:
        super().__init__(**long_context)
        if window < 1 or base < 1 or not 0 <= low <= high <= 1:
            raise ValueError(f"invalid AdaptiveGamma({base=}, {window=}, {low=}, {high=})")
        self.base, self.low, self.high = base, low, high
        self.max_gamma, self.min_gamma = max_gamma, min_gamma
        self._recent: deque[tuple[int, bool]] = deque(maxlen=window)  # (accepted, had rejection)

    def reject_rate(self) -> float | None:
        accepted = sum(a for a, _ in self._recent)
        rejected = sum(r for _, r in self._recent)
        return rejected / (accepted + rejected) if accepted + rejected else None

    def _gamma(self) -> int:
        rate = self.reject_rate()
        if rate is None:
            return self.base
        if rate < self.low:
            return min(self.base + 2, self.max_gamma)
        if rate > self.high:
            return max(self.base - 1, self.min_gamma)
        return self.base

    def update(self, n_proposed: int, n_accepted: int) -> None:
        if n_proposed > 0:
            self._recent.append((n_accepted, n_accepted < n_proposed))

    def reset(self) -> None:
        self._recent.clear()


class HFHeuristicGamma(Policy):
    """transformers' assisted-generation heuristic: +2 after a fully accepted block, else -1 (floor 1)."""

    def __init__(self, start: int = 5, **long_context: int) -> None:
        super().__init__(**long_context)
        if start < 1:
            raise ValueError(f"start must be >= 1, got {start}")
        self.start = self.gamma = start

    def _gamma(self) -> int:
        return self.gamma

    def update(self, n_proposed: int, n_accepted: int) -> None:
        if n_proposed > 0:
            self.gamma = self.gamma + 2 if n_accepted == n_proposed else max(1, self.gamma - 1)

    def reset(self) -> None:
        self.gamma = self.start


def build_gamma_policy(decode_cfg: Any) -> Policy:
    """Build a policy from a `DecodeConfig`-like object (dataclass, DictConfig, namespace).

    Reads ``policy`` ("fixed" | "adaptive" | "hf", str or Enum), ``gamma`` (fixed gamma, adaptive
    base, hf start), ``adaptive_window``, ``long_context_threshold``, ``long_context_reduction``.
    """
    name = getattr(decode_cfg.policy, "value", decode_cfg.policy)
    long_context = {
        "long_context_threshold": int(decode_cfg.long_context_threshold),
        "long_context_reduction": int(decode_cfg.long_context_reduction),
    }
    gamma = int(decode_cfg.gamma)
    if name == "fixed":
        return FixedGamma(gamma, **long_context)
    if name == "adaptive":
        return AdaptiveGamma(base=gamma, window=int(decode_cfg.adaptive_window), **long_context)
    if name == "hf":
        return HFHeuristicGamma(gamma, **long_context)
    raise ValueError(f"unknown gamma policy {name!r}; expected 'fixed', 'adaptive' or 'hf'")
