"""The most memory training allocated: the peak of the process's anonymous resident set (`RssAnon`), sampled
through every step by a background thread.

The process's peak resident set (`ru_maxrss`, `peak_memory_mb`) also counts the pages of memory-mapped files as
they are read: an EAGLE-3 head's feature cache (4.1 GB for demo-real's answers) is mapped, so the resident set
grows by the pages a run has touched, pages the kernel can drop and read again. What training itself needs is
the anonymous part. Linux only (None elsewhere).

Where in a run the peak falls, `metrics.csv` and W&B say: `memory/anonymous_mb`, on each row of training
steps, is the largest set since the previous such row (a validation between them included);
`memory/validation_anonymous_mb`, on each validation row of training, the largest during that validation.
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
    `interval` seconds and at every step's end; and the logged largest set per row (the module's docstring)."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval, self.peak_mb = interval, None
        self.since_row_mb: float | None = None  # since the previous row of training steps
        self.validation_mb: float | None = None  # during the validation running now; None outside one
        self._lock = threading.Lock()  # the watcher thread samples while the hooks read and reset
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        now = current_anonymous_mb()
        if now is None:
            return
        with self._lock:
            self.peak_mb, self.since_row_mb = _larger(self.peak_mb, now), _larger(self.since_row_mb, now)
            if self.validation_mb is not None:
                self.validation_mb = max(self.validation_mb, now)

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
        # Lightning writes a row of step metrics after this hook when this holds (its logger connector's
        # should_update_logs, with global_step already counting this step); logged at other steps, the value
        # would be dropped and its window lost
        if trainer.global_step % trainer.log_every_n_steps == 0 or trainer.should_stop:
            with self._lock:
                value, self.since_row_mb = self.since_row_mb, None
            if value is not None:
                pl_module.log("memory/anonymous_mb", value)

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if self._during_training(trainer):
            now = current_anonymous_mb()  # None off Linux: no window opens
            with self._lock:
                self.validation_mb = now

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if self.validation_mb is None:
            return
        self.sample()
        with self._lock:
            value, self.validation_mb = self.validation_mb, None
        pl_module.log("memory/validation_anonymous_mb", value)

    @staticmethod
    def _during_training(trainer) -> bool:
        # not the sanity check, nor the validation after fit whose metrics the artefact keeps
        return trainer.state.fn == "fit" and not trainer.sanity_checking

    def on_train_end(self, trainer, pl_module) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


def _larger(current: float | None, new: float) -> float:
    return new if current is None else max(current, new)
