"""The peak of anonymous memory a training run records beside the resident-set peak (which counts mapped caches'
pages): parsed from /proc/self/status, and raised by an allocation, not by reading a mapped file."""

from __future__ import annotations

import csv
import platform

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from adaspec.callbacks.anonymous_memory import PeakAnonymousMemory, anonymous_mb, current_anonymous_mb
from adaspec.callbacks.free_memory import FreeMemory

STATUS = "Name:\tpython\nVmRSS:\t 2048000 kB\nRssAnon:\t 1024000 kB\nRssFile:\t 1024000 kB\n"

linux = pytest.mark.skipif(platform.system() != "Linux", reason="/proc/self/status")


def test_rss_anon_is_read_from_the_status_text():
    assert anonymous_mb(STATUS) == 1000.0
    assert anonymous_mb(STATUS.replace("RssAnon", "RssShmem")) is None  # no such line: unknown, not 0


@linux
def test_an_allocation_raises_the_peak_and_reading_a_mapped_file_does_not(tmp_path):
    mapped = tmp_path / "cache.f16"
    np.ones(128 * 2**20 // 2, dtype=np.float16).tofile(mapped)  # 128 MiB on disk
    watch = PeakAnonymousMemory()
    watch.sample()
    before = watch.peak_mb
    view = np.memmap(mapped, dtype=np.float16, mode="r")
    assert float(view.sum(dtype=np.float32)) > 0  # every page read
    watch.sample()
    assert watch.peak_mb < before + 64  # the mapped file's pages are not anonymous
    held = np.ones(256 * 2**20 // 8)  # 256 MiB written
    watch.sample()
    del held
    assert watch.peak_mb >= before + 200


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_the_peak_counts_from_the_start_of_training_after_what_building_the_stage_freed_is_given_back():
    """Building a stage can pass over data first (distill.cache_ref_kl's reference pass) and free it, fragmented:
    the trainer's FreeMemory gives it back at the start of training, before the peak's first sample."""
    blocks = [torch.ones(16 * 1024) for _ in range(4000)]  # 250 MB of glibc heap, as in test_free_memory
    kept = blocks[::50]
    del blocks
    freed = current_anonymous_mb()
    watch = PeakAnonymousMemory()
    assert watch.peak_mb is None  # nothing sampled while the stage is built
    FreeMemory().on_train_start(None, None)  # the trainer's callbacks, in its order
    watch.on_train_start(None, None)
    watch.on_train_end(None, None)
    assert watch.peak_mb < freed - 150 and len(kept) == 80


class _Spiking(pl.LightningModule):
    """Holds SPIKE_MB more for a moment in one training step and in the first validation, sampled then as the
    watcher thread would (no clock), and frees it before the step ends."""

    SPIKE_MB = 300

    def __init__(self, watch: PeakAnonymousMemory, spike_step: int) -> None:
        super().__init__()
        self.layer, self.watch, self.spike_step, self.validations = torch.nn.Linear(4, 1), watch, spike_step, 0

    def _spike(self) -> None:
        held = np.ones(self.SPIKE_MB * 2**20 // 8)  # written, so resident
        self.watch.sample()
        del held

    def training_step(self, batch, batch_idx):
        if self.global_step + 1 == self.spike_step:
            self._spike()
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        if not self.trainer.sanity_checking and batch_idx == 0:
            self.validations += 1
            if self.validations == 1:
                self._spike()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


@linux
def test_each_row_holds_the_largest_set_since_the_previous_row_and_each_validation_its_own(tmp_path):
    """metrics.csv says where the peak fell: a 300 MB spike freed inside step 3 shows on the row of steps 3-4 only,
    one inside the first validation (after step 4) on that validation's row and on the next training row."""
    data = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
    watch = PeakAnonymousMemory(interval=3600)  # the thread stays idle: the model samples at the spikes
    trainer = pl.Trainer(max_steps=8, log_every_n_steps=2, val_check_interval=4, limit_val_batches=2,
                         callbacks=[watch], logger=CSVLogger(tmp_path, name="", version=""), accelerator="cpu",
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(_Spiking(watch, spike_step=3), data, data)
    with open(tmp_path / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    training = {int(r["step"]): float(r["memory/anonymous_mb"]) for r in rows if r["memory/anonymous_mb"]}
    validation = [(int(r["step"]), float(r["memory/validation_anonymous_mb"]))
                  for r in rows if r["memory/validation_anonymous_mb"]]
    assert sorted(training) == [1, 3, 5, 7]  # Lightning's rows of steps 1-2, 3-4, 5-6, 7-8 (0-based step column)
    quiet = training[1]
    assert training[3] > quiet + 250  # the spike inside step 3, freed before its end: only the window saw it
    assert training[5] > quiet + 250  # the first validation ran between the rows of steps 4 and 6
    assert training[7] < quiet + 100
    assert [step for step, _ in validation] == [3, 7]
    assert validation[0][1] > quiet + 250 and validation[1][1] < quiet + 100
    assert "memory/validation_anonymous_mb" not in trainer.validate(trainer.lightning_module, data, verbose=False)[0]
