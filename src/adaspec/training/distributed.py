"""Which process of a data-parallel run this is, before and after Lightning sets up the process group.

Lightning's DDP launcher starts ranks 1..n-1 by re-running the entry point; SLURM (srun) and torchrun
start every rank at once. Only global rank zero writes stage artefacts (the draft initialisation
included) and prints progress; the others wait for files that rank zero writes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from lightning.fabric.utilities.rank_zero import rank_zero_only

from adaspec.errors import UserError


def is_global_zero() -> bool:
    """Global rank zero: rank 0 (RANK, LOCAL_RANK or SLURM_PROCID, as Lightning reads them) on node 0."""
    return getattr(rank_zero_only, "rank", 0) == 0 and int(os.environ.get("NODE_RANK", "0")) == 0


def say(message: str) -> None:
    """Print on global rank zero only."""
    if is_global_zero():
        print(message, flush=True)


def wait_for(path: Path, what: str, timeout_s: float = 1800.0, poll_s: float = 1.0) -> None:
    """Non-zero ranks: wait until rank zero has written `path`."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise UserError(f"waited {timeout_s:.0f}s for rank 0 to write {what} {path}; did rank 0 fail?")
        time.sleep(poll_s)
