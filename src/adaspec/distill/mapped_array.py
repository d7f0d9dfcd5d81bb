"""A cache's array, memory-mapped read-only after checking the file holds all of it: a file cut by a crash or a
full disk is refused in one line naming it and the fix, never read past its end."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from adaspec.errors import UserError


def mapped(path: Path, dtype, shape: tuple[int, ...], fix: str) -> np.memmap:
    """`path` as an array of `shape`; `fix`: how to rebuild the cache, for the refusal."""
    expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
    found = path.stat().st_size if path.is_file() else None
    if found != expected:
        what = "is missing" if found is None else f"holds {found:,} bytes where its cache's metadata needs {expected:,}"
        raise UserError(f"{path} {what} (cut or replaced); {fix}")
    return np.memmap(path, dtype=dtype, mode="r", shape=shape)
