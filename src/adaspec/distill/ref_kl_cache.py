"""The frozen reference's per-token KL to the cached teacher, computed once per (reference, cache).

Stage 3 then runs only the draft's forward and backward. The array is aligned with the teacher
cache's rows and stored beside the reference artefact, keyed by both identities.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from adaspec.artefacts import write_atomically
from adaspec.data.encoding import collate
from adaspec.distill.tokens import answer_logits, answer_mask

ARRAY = "ref_kl.f32"
META = "ref_kl.json"


def load_ref_kl(folder: Path, identity: dict[str, str]) -> np.ndarray | None:
    """The cached array if it exists for exactly this reference and teacher cache, else None."""
    if not (folder / META).is_file() or json.loads((folder / META).read_text()) != identity:
        return None
    return np.fromfile(folder / ARRAY, dtype=np.float32)


@torch.no_grad()
def write_ref_kl(reference, teacher, encoded, folder: Path, identity: dict[str, str], *, batch_size: int, pad_id: int) -> np.ndarray:
    """The reference draft's (`adaspec.drafts.ModelDraft`) per-token divergence from `teacher` on `encoded`."""
    device = next(reference.model.parameters()).device
    pieces: list[np.ndarray] = []
    rows_seen: list[np.ndarray] = []
    for start in tqdm(range(0, len(encoded), batch_size), desc="reference KL cache"):
        batch = {k: v.to(device) for k, v in collate(encoded[start : start + batch_size], pad_id).items()}
        mask = answer_mask(batch["labels"])
        signal = teacher.signal(batch, mask)
        logits = reference.logits(batch["input_ids"], attention_mask=batch["attention_mask"])
        pieces.append(teacher.divergence(signal, answer_logits(logits, mask)).float().cpu().numpy())
        rows_seen.append(signal.rows)
    values = np.zeros(teacher.cache.meta["rows"], dtype=np.float32)
    values[np.concatenate(rows_seen)] = np.concatenate(pieces)

    def fill(tmp: Path) -> None:
        values.tofile(tmp / ARRAY)
        (tmp / META).write_text(json.dumps(identity, sort_keys=True))

    write_atomically(folder, fill)
    return values
