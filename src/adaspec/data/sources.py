"""Where a real task's records come from: JSONL files in `task.local_dir`, or the Hugging Face Hub.

Both paths return plain dicts per split and check that every record has the fields the task needs,
so a bad file fails here with the file, line and field named, not later inside a tokenizer.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from adaspec.errors import UserError

Record = dict[str, Any]
Located = tuple[str, Record]  # (where the record came from, e.g. "train.jsonl:12", the record)

HUB_PROBE_TIMEOUT_S = 5.0


def read_jsonl(path: Path, required_fields: Sequence[str]) -> list[Located]:
    """Every line of `path` as a dict holding `required_fields`, with its location; blank lines are skipped."""
    if not path.is_file():
        raise UserError(f"data file {path} does not exist: check task.local_dir")
    records: list[Located] = []
    try:
        # not splitlines(): it also splits at U+2028 and friends, which JSON strings may hold raw
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from e
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{line_no}: invalid JSON ({e.msg}); fix or remove that line") from e
        if not isinstance(record, dict):
            raise UserError(f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}")
        where = f"{path}:{line_no}"
        check_fields(record, required_fields, where)
        records.append((where, record))
    return records


def check_fields(record: Record, required: Sequence[str], where: str) -> None:
    for name in required:
        if name not in record or record[name] is None:
            raise UserError(f"{where}: record has no field {name!r} (it needs {', '.join(required)})")


def hub_is_offline() -> bool:
    """True when HF_HUB_OFFLINE / HF_DATASETS_OFFLINE say so, from the environment or `datasets.config`."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return True
    import datasets.config  # slow to import; only Hub tasks need it

    return bool(datasets.config.HF_HUB_OFFLINE)


def hub_is_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """A quick TCP connect to the Hub endpoint, so that no network does not mean minutes of retries.

    Runs in a daemon thread because name resolution ignores socket timeouts.
    """
    from huggingface_hub import constants  # slow to import; only Hub tasks need it

    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    reachable = threading.Event()

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                reachable.set()
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return reachable.is_set()


def load_hub_splits(
    task_name: str, hub_path: str, hub_name: str | None, required_fields: Sequence[str], local_hint: str
) -> dict[str, list[Located]]:
    """All splits of a Hub dataset as located dicts. `local_hint` is the `task.local_dir=...` to suggest."""
    fix = f"download the data and pass {local_hint} (a folder of JSONL files)"
    offline = hub_is_offline()
    if not offline and not hub_is_reachable():
        raise UserError(f"task {task_name!r}: the Hugging Face Hub is unreachable (no network); {fix}")
    import datasets  # slow to import; only Hub tasks need it

    try:
        dataset_dict = datasets.load_dataset(hub_path, hub_name)
    except Exception as e:  # datasets raises ConnectionError, FileNotFoundError, ValueError, ... here
        reason = "offline mode is on (HF_HUB_OFFLINE) and it is not cached" if offline else str(e)
        raise UserError(f"task {task_name!r}: cannot load {hub_path!r} from the Hub: {reason}; {fix}") from e
    splits: dict[str, list[Located]] = {}
    for split, dataset in dataset_dict.items():
        located = [(f"{hub_path} split {split!r} record {i}", dict(r)) for i, r in enumerate(dataset)]
        for where, record in located:
            check_fields(record, required_fields, where)
        splits[split] = located
    return splits
