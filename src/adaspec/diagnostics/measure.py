"""Numbers the diagnostics need, read from artefacts and logs (nothing is retrained)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch

from adaspec.data.encoding import collate
from adaspec.distill.divergence import token_divergence
from adaspec.distill.tokens import answer_logits, answer_mask


def logged(stage_folder: Path, column: str) -> list[float]:
    """Every value of `column` in the stage's metrics.csv, in step order."""
    path = stage_folder / "logs" / "metrics.csv"
    if not path.is_file():
        return []
    with open(path) as fh:
        return [float(row[column]) for row in csv.DictReader(fh) if row.get(column)]


def logged_by_step(stage_folder: Path, column: str) -> dict[int, float]:
    """{step: value} of `column` in the stage's metrics.csv (the last value where a step logged twice)."""
    path = stage_folder / "logs" / "metrics.csv"
    if not path.is_file():
        return {}
    with open(path) as fh:
        return {int(float(row["step"])): float(row[column]) for row in csv.DictReader(fh) if row.get(column)}


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


@torch.no_grad()
def held_out_kl_and_agreement(target, student, encoded, pad_id: int, batch_size: int = 16) -> tuple[float, float, int]:
    """(mean forward KL(p_target || q_student), greedy top-1 agreement, tokens) over held-out answer tokens."""
    kl_sum, agree, n = 0.0, 0, 0
    for start in range(0, len(encoded), batch_size):
        batch = collate(encoded[start : start + batch_size], pad_id)
        mask = answer_mask(batch["labels"])
        kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        t = answer_logits(target(**kwargs).logits, mask)
        s = answer_logits(student(**kwargs).logits, mask)
        vocab = min(t.shape[-1], s.shape[-1])
        t, s = t[:, :vocab], s[:, :vocab]
        kl_sum += float(token_divergence(t, s).sum())
        agree += int((t.argmax(-1) == s.argmax(-1)).sum())
        n += t.shape[0]
    return kl_sum / max(n, 1), agree / max(n, 1), n


def machine_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / 2**20
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    return float("nan")
