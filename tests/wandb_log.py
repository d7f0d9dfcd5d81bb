"""What an offline W&B run logged, read back from its `run-*.wandb` file, so that a test can compare the
values with metrics.csv instead of checking that the file exists.

The file is a LevelDB-style log (the format W&B's offline runs use): a 7-byte header, then 32 KiB blocks
of chunks, each `crc32 (4) | length (2) | kind (1) | bytes`, kind 1 a whole record, 2/3/4 its first,
middle and last pieces; a record is a `wandb_internal_pb2.Record` protobuf.

W&B's service process writes the file in the background and may still hold records after `run.finish()`
returns (CI once read a file without its history), so the reader first tears the service down, which waits
for every run's file to be closed, and checks each chunk's CRC-32.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

HEADER, BLOCK, CHUNK_HEADER = 7, 32 * 1024, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    data, pos, pieces, out = path.read_bytes(), HEADER, b"", []
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER:  # a block's tail too short for a chunk header is padding
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if length == 0 and kind == 0:
            break
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        if zlib.crc32(bytes([kind]) + chunk) != crc:
            raise ValueError(f"{path}: chunk at byte {pos} fails its CRC (a partly written file?)")
        pos += CHUNK_HEADER + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pieces = chunk
        elif kind == MIDDLE:
            pieces += chunk
        elif kind == LAST:
            out.append(pieces + chunk)
    return out


def _items(run_folder: Path, record_type: str, field: str) -> list[dict]:
    """{key: value decoded from JSON} of `field` of each record of `record_type`, in the order written."""
    import wandb
    from wandb.proto import wandb_internal_pb2

    wandb.teardown()
    (path,) = run_folder.glob("run-*.wandb")
    out = []
    for raw in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == record_type:
            items = getattr(getattr(record, record_type), field)
            out.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    return out


def history(run_folder: Path) -> list[dict]:
    """Every history row (`wandb.log` call) of the offline run in `run_folder`."""
    return _items(run_folder, "history", "item")


def summary(run_folder: Path) -> dict:
    """The run's summary (`run.summary.update`), the last value of each key."""
    out = {}
    for update in _items(run_folder, "summary", "update"):
        out |= update
    return out
