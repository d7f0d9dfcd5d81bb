"""The most memory training allocated: the peak of the process's anonymous resident set (`RssAnon`), sampled
through every step by a background thread.

The process's peak resident set (`ru_maxrss`, `peak_memory_mb`) also counts the pages of memory-mapped files as
they are read: an EAGLE-3 head's feature cache (4.1 GB for demo-real's answers) is mapped, so the resident set
grows by the pages a run has touched, pages the kernel can drop and read again. What training itself needs is
the anonymous part. Linux only (None elsewhere).
"""

from __future__ import annotations

import threading
from pathlib import Path

import lightning.pytorch as pl

STATUS = Path("/proc/self/status")


def anonymous_mb(status: str) -> float | None:
    """`RssAnon` in MiB from the text of /proc/<pid>/status; None when it has none."""
    for line in status.splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024  # kB
    return None


def current_anonymous_mb() -> float | None:
    try:
        return anonymous_mb(STATUS.read_text())
    except OSError:
        return None


class PeakAnonymousMemory(pl.Callback):
    """`peak_mb`: the largest anonymous resident set seen from the start of training to its end, sampled every
    `interval` seconds and at every step's end."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval, self.peak_mb = interval, None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        now = current_anonymous_mb()
        if now is not None:
            self.peak_mb = now if self.peak_mb is None else max(self.peak_mb, now)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def on_train_start(self, trainer, pl_module) -> None:
        # from here, not from the stage's building: what that freed is given back first (FreeMemory, the
        # trainer's earlier callback), so a reference cache's pass before training does not count as training's
        self.sample()
        if self.peak_mb is not None and self._thread is None:  # Linux
            self._thread = threading.Thread(target=self._watch, name="peak-anonymous-memory", daemon=True)
            self._thread.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.sample()

    def on_train_end(self, trainer, pl_module) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
