"""Every stage's trainer gives the heap memory a step freed back to the system (glibc's malloc_trim): without it
the resident set of a CPU run grew step after step with the batches' changing shapes (adaspec.callbacks.free_memory)."""

from __future__ import annotations

import os
import platform

import pytest
import torch

from adaspec.callbacks.free_memory import FreeMemory
from adaspec.training.trainer import build_trainer


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_every_stage_trainer_frees_memory_after_each_step(tiny_cfg, tmp_path):
    trainer = build_trainer(tiny_cfg().stage, tiny_cfg().trainer, tmp_path, n_train=64)
    assert sum(isinstance(cb, FreeMemory) for cb in trainer.callbacks) == 1


glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")


def fragmented_heap() -> tuple[float, list]:
    """250 MB of 64 KiB tensors (glibc's heap, not mmap) freed but every 50th: the resident set after it, the kept."""
    blocks = [torch.ones(16 * 1024) for _ in range(4000)]
    kept = blocks[::50]
    del blocks
    return resident_mb(), kept


@glibc
def test_trimming_returns_a_fragmented_heap_to_the_system():
    """Freeing fragmented blocks leaves the resident set up (the negative control), trimming brings it back."""
    start = resident_mb()
    freed, kept = fragmented_heap()
    assert freed > start + 150  # freed but not returned: what made a long run grow
    FreeMemory().on_train_batch_end(None, None, None, None, 0)
    assert resident_mb() < freed - 150 and len(kept) == 80


@glibc
def test_a_validation_batch_gives_back_what_it_fragmented():
    """Validation's batches fragment the heap as training's do; untrimmed, the first training step after a
    validation grew on top of it (300-500 MB in demo-real's head runs)."""
    start = resident_mb()
    freed, kept = fragmented_heap()
    assert freed > start + 150
    FreeMemory().on_validation_batch_end(None, None, None, None, 0)
    assert resident_mb() < freed - 150 and len(kept) == 80
