"""The frozen reference's per-token KL to the cached teacher, computed once per (reference, cache): a model draft's,
or an EAGLE-3 head's weighted over its training-time-test passes (reading the target's features from their cache).

Stage 3 then runs only the draft's forward and backward. The array is aligned with the teacher
cache's rows and stored beside the reference artefact, keyed by both identities.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from adaspec.artefacts.store import write_atomically
from adaspec.data.encoding import by_length, collate
from adaspec.distill.draft_divergence import draft_divergence
from adaspec.distill.tokens import answer_mask

ARRAY = "ref_kl.f32"
META = "ref_kl.json"


def load_ref_kl(folder: Path, identity: dict[str, str]) -> np.ndarray | None:
    """The cached array if it exists for exactly this reference and teacher cache, else None."""
    if not (folder / META).is_file() or json.loads((folder / META).read_text()) != identity:
        return None
    return np.fromfile(folder / ARRAY, dtype=np.float32)


# trainer.precision -> the autocast dtype Lightning runs it under ("bf16" and "16": its older names of the same)
MIXED_AUTOCAST = {"bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16, "16-mixed": torch.float16, "16": torch.float16}


@torch.no_grad()
def write_ref_kl(reference, teacher, encoded, folder: Path, identity: dict[str, str], *, batch_size: int, pad_id: int,
                 passes: int = 1, autocast: torch.dtype | None = None) -> np.ndarray:
    """The reference draft's per-token divergence from `teacher` on `encoded` (adaspec.distill.draft_divergence:
    an EAGLE-3 head's over `passes` passes of its training-time test), in batches of similar length (each row
    is written back at its own place, so the order is free); under `autocast`, the dtype in which stage 3's
    mixed precision runs the live reference."""
    device = next(reference.model.parameters()).device
    pieces: list[np.ndarray] = []
    rows_seen: list[np.ndarray] = []
    for positions in tqdm(by_length(encoded, batch_size), desc="reference KL cache"):
        batch = {k: v.to(device) for k, v in collate([encoded[i] for i in positions], pad_id).items()}
        mask = answer_mask(batch["labels"])
        signal = teacher.signal(batch, mask)
        with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
            divergence = draft_divergence(reference, batch, mask, signal, teacher, passes)
        pieces.append(divergence.float().cpu().numpy())
        rows_seen.append(signal.rows)
    values = np.zeros(teacher.cache.meta["rows"], dtype=np.float32)
    values[np.concatenate(rows_seen)] = np.concatenate(pieces)

    def fill(tmp: Path) -> None:
        values.tofile(tmp / ARRAY)
        (tmp / META).write_text(json.dumps(identity, sort_keys=True))

    write_atomically(folder, fill)
    return values
