"""The peak of anonymous memory a training run records beside the resident-set peak (which counts mapped caches'
pages): parsed from /proc/self/status, and raised by an allocation, not by reading a mapped file."""

from __future__ import annotations

import platform

import numpy as np
import pytest
import torch

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
