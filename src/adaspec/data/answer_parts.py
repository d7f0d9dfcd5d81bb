"""The target's answers committed with the repository, in parts: each part holds `PART_SIZE` consecutive problems
of the task's training file and is written atomically beside a sidecar carrying its hash, so generation that
stops loses at most the part it was writing and a fresh clone reuses every part whose hash matches.

    experiments/results/<model>-target-answers/<task>/<format>-max<N>/parts/
        part-0003.jsonl  one answer record per line (adaspec.data.target_answers), problems 768-1023, by index
        part-0003.json   {"first", "count", "sha256" (of the .jsonl), "target_content", "answer_tokens", ...}

A part is read only whole. Its sidecar is written last, so a .jsonl without one is an interrupted part (ignored:
generated again). A part of another target (another `target_content`) is not this target's data and is skipped;
a part whose file no longer matches its hash (edited, truncated) is refused with the command that regenerates it.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from adaspec.errors import UserError
from adaspec.toolkit import write_bytes_atomically, write_json_atomically

PART_SIZE = 256


def regenerate_command(folder: Path, part: int) -> str:
    """The command that writes part `part` of `folder` again; sampled answers' folders end in -t<T>-s<seed>-b<batch>."""
    sampled = re.search(r"-t([0-9.e+-]+)-s(\d+)-b(\d+)$", folder.parent.name)
    extra = (f" distill.answer_temperature={sampled[1]} distill.answer_seed={sampled[2]}"
             f" distill.answer_batch_size={sampled[3]}") if sampled else ""
    return f'make answer-parts ARGS="distill.answer_parts={part}{extra}"'


def part_of(index: int) -> int:
    return index // PART_SIZE


def part_indices(part: int, total: int) -> range:
    """The training-file indices part `part` holds when the file has `total` problems."""
    return range(part * PART_SIZE, min((part + 1) * PART_SIZE, total))


def part_files(folder: Path, part: int) -> tuple[Path, Path]:
    return folder / f"part-{part:04d}.jsonl", folder / f"part-{part:04d}.json"


def parse_parts(spec: str, total: int) -> list[int]:
    """`all`, `P` or `A-B` (inclusive) as part numbers of a training file of `total` problems."""
    last = part_of(total - 1)
    try:
        if spec == "all":
            first, end = 0, last
        elif "-" in spec:
            first, end = (int(s) for s in spec.split("-", 1))
        else:
            first = end = int(spec)
    except ValueError:
        raise UserError(f"distill.answer_parts={spec!r}: expected all, a part number or A-B (parts 0-{last})") from None
    if not 0 <= first <= end <= last:
        raise UserError(f"distill.answer_parts={spec!r}: the training file has parts 0-{last} of {PART_SIZE} problems")
    return list(range(first, end + 1))


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_part(folder: Path, part: int, records: list[dict], sidecar: dict) -> Path:
    """Part `part`: `records` (one per index, in index order), then its sidecar with their hash."""
    lines, meta = part_files(folder, part)
    data = "".join(json.dumps(r) + "\n" for r in sorted(records, key=lambda r: r["index"])).encode()
    write_bytes_atomically(lines, data)
    write_json_atomically(meta, {"first": part * PART_SIZE, "count": len(records), "sha256": _hash(data), **sidecar})
    return lines


def _sidecar(meta: Path) -> dict:
    try:
        return json.loads(meta.read_text())
    except json.JSONDecodeError:
        part = int(meta.stem.split("-")[1])
        raise UserError(f"{meta}: not a part's sidecar (cut or edited); restore it with `git checkout -- {meta}` "
                        f"or regenerate the part with `{regenerate_command(meta.parent, part)}`") from None


def read_part(folder: Path, part: int, target_content: str) -> list[dict] | None:
    """Part `part`'s records when it is finished and this target's; None when it is not there, unfinished or
    another target's. A finished part whose file does not match its hash is refused."""
    lines, meta = part_files(folder, part)
    if not meta.is_file():
        return None
    sidecar = _sidecar(meta)
    if sidecar.get("target_content") != target_content:
        return None
    data = lines.read_bytes() if lines.is_file() else b""
    records = [json.loads(line) for line in data.decode().splitlines()] if _hash(data) == sidecar["sha256"] else []
    if [r["index"] for r in records] != list(range(sidecar["first"], sidecar["first"] + sidecar["count"])):
        raise UserError(
            f"{lines}: the answer part does not match the hash in {meta.name} (edited or truncated); restore it "
            f"with `git checkout -- {lines}` or regenerate it with `{regenerate_command(folder, part)}`"
        )
    return records


def part_targets(folder: Path) -> set[str]:
    """The targets whose finished parts `folder` holds (their content hashes)."""
    return {_sidecar(meta).get("target_content") for meta in folder.glob("part-*.json")}
