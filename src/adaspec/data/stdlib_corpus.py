"""Stage 0's code corpus: the Python standard library's own source files, which every machine has.

Files under the stdlib folder (without tests, IDLE, lib2to3 and site-packages), in a seeded shuffle
of their sorted paths, cut into blocks of whole lines of about `block_chars` characters, until
`max_chars` are taken. The same Python version and settings give the same corpus; `corpus_identity`
names it in the artefact's metrics, since another Python version has other files.
"""

from __future__ import annotations

import hashlib
import platform
import random
import sysconfig
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from adaspec.data.example import Example
from adaspec.data.tasks import first_training_examples

SKIPPED = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "turtledemo",
    "__pycache__",
}


def stdlib_files(root: Path | None = None) -> list[Path]:
    root = root or Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if not SKIPPED & set(p.relative_to(root).parts)]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def line_blocks(text: str, block_chars: int) -> list[str]:
    """Consecutive whole lines of at most about `block_chars` characters; blank-only blocks dropped."""
    blocks, current, size = [], [], 0
    for line in text.splitlines(keepends=True):
        if size + len(line) > block_chars and current:
            blocks.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        blocks.append("".join(current))
    return [b for b in blocks if b.strip()]


def stdlib_blocks(max_chars: int, block_chars: int, seed: int = 0, root: Path | None = None) -> list[str]:
    files = stdlib_files(root)
    random.Random(seed).shuffle(files)
    blocks: list[str] = []
    taken = 0
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for block in line_blocks(text, block_chars):
            blocks.append(block)
            taken += len(block)
            if taken >= max_chars:
                return blocks
    return blocks


def corpus_identity(blocks: list[str]) -> dict[str, str | int]:
    digest = hashlib.sha256("\0".join(blocks).encode()).hexdigest()[:16]
    return {
        "corpus_sha": digest,
        "blocks": len(blocks),
        "chars": sum(map(len, blocks)),
        "python": platform.python_version(),
    }


def corpus_blocks(p: DictConfig, task: DictConfig) -> list[str]:
    """The corpus' blocks (the `pretrain` group `p`), then the first pretrain.task_prompts prompts of the task's
    training split."""
    blocks = stdlib_blocks(p.max_chars, p.block_chars, seed=p.seed)
    return blocks + [e.prompt for e in first_training_examples(task, p.task_prompts)] if p.task_prompts else blocks


def corpus_splits(blocks: list[str], n_val: int) -> tuple[dict[str, list[Example]], dict[str, Any]]:
    """Every block is an example with an empty prompt, so the loss covers all its tokens; the first
    `n_val` blocks are held out."""
    examples = [Example(prompt="", target=block, reference="") for block in blocks]
    return {"train": examples[n_val:], "test": examples[:n_val]}, corpus_identity(blocks)
