"""The target's hidden states an EAGLE-3 head reads (`adaspec.models.eagle3`), computed once and memory-mapped
beside the teacher cache, so that stages 2 and 3 train a head without running the target.

Unlike the teacher signal, a head needs the features of every position, prompt included (its attention reads
them all): rows are the positions of example 0, then example 1, ... (`offsets[i]:offsets[i+1]`, example i's
`len(input_ids)` rows), float16 `[rows, len(layers) * H]`. The cache covers the training split and the
validation examples, in the order the teacher cache does, so a batch finds its rows through `batch["index"]`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from adaspec.artefacts.store import write_atomically
from adaspec.data.encoding import by_length, collate
from adaspec.distill.mapped_array import mapped
from adaspec.errors import UserError
from adaspec.models.eagle3 import target_features

META = "features.json"


def feature_cache_bytes(encoded, width: int) -> int:
    return sum(len(e.input_ids) for e in encoded) * width * 2


class FeatureCache:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        if not (self.folder / META).is_file():
            raise UserError(f"no feature cache at {self.folder}: stage 2 of an EAGLE-3 head builds it")
        self.meta = json.loads((self.folder / META).read_text())
        self.offsets = np.load(self.folder / "offsets.npy")
        shape = (self.meta["rows"], self.meta["width"])
        self.features = mapped(self.folder / "features.f16", np.float16, shape,
                               "delete the folder (stage 2 of an EAGLE-3 head rebuilds it) or pass overwrite=true")

    def check_identity(self, identity: dict) -> None:
        """Refuse a cache made for another target, data or set of layers."""
        for key, value in identity.items():
            if self.meta["identity"].get(key) != value:
                raise UserError(
                    f"the feature cache {self.folder} was made for another {key} ({self.meta['identity'].get(key)} "
                    f"!= {value}); delete it (it is rebuilt) or pass overwrite=true"
                )

    def batch(self, index: torch.Tensor, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Features `[B, T, width]` of a right-padded batch (zeros on padding)."""
        lengths = attention_mask.sum(-1).tolist()
        out = torch.zeros(*attention_mask.shape, self.meta["width"], dtype=dtype)
        for b, (i, n) in enumerate(zip(index.tolist(), lengths, strict=True)):
            start, end = int(self.offsets[i]), int(self.offsets[i + 1])
            if end - start != n:
                raise UserError(f"feature cache {self.folder}: example {i} has {end - start} cached positions, the "
                                f"batch {n}; it was made with other data settings, delete it (it is rebuilt)")
            out[b, :n] = torch.from_numpy(np.array(self.features[start:end])).to(dtype)  # a copy: the map is read-only
        return out.to(attention_mask.device)


class FeatureSink:
    """Writes the features of `layers` into a folder being filled, batch by batch, each example at its offsets:
    `write_feature_cache` feeds it from a pass of its own, the teacher cache's pass from the same forward."""

    def __init__(self, tmp: Path, encoded, layers: list[int], hidden_size: int):
        self.tmp, self.layers = Path(tmp), list(layers)
        self.lengths = np.array([len(e.input_ids) for e in encoded], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.width = len(layers) * hidden_size
        np.save(self.tmp / "offsets.npy", self.offsets)
        self.features = np.memmap(self.tmp / "features.f16", dtype=np.float16, mode="w+",
                                  shape=(int(self.offsets[-1]), self.width))

    def add(self, chunk: list[int], hidden_states) -> None:
        """The batch of examples `chunk` (right-padded, in that order) and the target's hidden states on it."""
        values = target_features(hidden_states, self.layers).float().cpu().numpy().astype(np.float16)
        for b, i in enumerate(chunk):
            self.features[self.offsets[i] : self.offsets[i + 1]] = values[b, : self.lengths[i]]

    def finish(self, identity: dict) -> None:
        self.features.flush()
        meta = {"rows": int(self.offsets[-1]), "width": self.width, "layers": self.layers, "identity": identity,
                "examples": len(self.lengths)}
        (self.tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True))


def feature_identity(data_identity: dict, layers: list[int]) -> dict:
    """A feature cache's identity: its data's (adaspec.artefacts.rules.cache_identity) and the layers."""
    return {**data_identity, "layers": "-".join(str(i) for i in layers)}


@torch.inference_mode()
def write_feature_cache(target, encoded, layers: list[int], folder: Path, identity: dict, *, batch_size: int,
                        pad_id: int, progress: bool = True) -> FeatureCache:
    """Run `target` once over `encoded` and write the features of `layers` atomically into `folder`."""
    device = next(target.parameters()).device

    def fill(tmp: Path) -> None:
        sink = FeatureSink(tmp, encoded, layers, target.config.hidden_size)
        for chunk in tqdm(by_length(encoded, batch_size), desc="feature cache", disable=not progress):
            batch = collate([encoded[i] for i in chunk], pad_id)
            out = target(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                         output_hidden_states=True, logits_to_keep=1)
            sink.add(chunk, out.hidden_states)
        sink.finish(identity)

    write_atomically(Path(folder), fill)
    return FeatureCache(folder)
