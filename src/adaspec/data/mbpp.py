"""MBPP: 974 short Python problems, each with a reference solution and three test asserts.

From the Hub (`task.hub_path`/`task.hub_name`, i.e. google-research-datasets/mbpp, config full) or,
with `task.local_dir=DIR`, from DIR/mbpp.jsonl (the file of google-research/mbpp), split by task_id
exactly as the Hub splits it.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from adaspec.data.example import Example
from adaspec.data.prompts import code_prompt, code_target
from adaspec.data.sources import Located, load_hub_splits, read_jsonl
from adaspec.errors import UserError

FIELDS = ("task_id", "text", "code", "test_list", "test_setup_code")
LOCAL_FILE = "mbpp.jsonl"
LOCAL_HINT = "task.local_dir=../shared/data/mbpp"
# Inclusive task_id ranges of the Hub's "full" config (and of the original paper).
SPLIT_TASK_IDS = {
    "prompt": range(1, 11),
    "test": range(11, 511),
    "validation": range(511, 601),
    "train": range(601, 975),
}


def checking_program(record: dict) -> str:
    """The code that checks a solution: the record's setup code, then its asserts."""
    setup = record["test_setup_code"].replace("\r\n", "\n").strip()
    asserts = "\n".join(record["test_list"])
    return f"{setup}\n{asserts}\n" if setup else f"{asserts}\n"


def to_example(located: Located) -> Example:
    where, record = located
    if not isinstance(record["test_list"], list) or not record["test_list"]:
        raise UserError(f"{where}: field 'test_list' must be a non-empty list of assert lines")
    return Example(
        prompt=code_prompt(record["text"], record["test_list"]),
        target=code_target(record["code"]),
        reference=checking_program(record),
        record=record,
    )


def split_by_task_id(records: list[Located], source: str) -> dict[str, list[Located]]:
    splits: dict[str, list[Located]] = {name: [] for name in SPLIT_TASK_IDS}
    for where, record in records:
        task_id = record["task_id"]
        split = next((name for name, ids in SPLIT_TASK_IDS.items() if task_id in ids), None)
        if split is None:
            raise UserError(f"{where}: task_id={task_id!r} is outside 1..974, the ids of {source}")
        splits[split].append((where, record))
    for split in splits.values():
        split.sort(key=lambda located: located[1]["task_id"])
    return splits


def load_mbpp(task: DictConfig) -> dict[str, list[Example]]:
    if task.local_dir:
        path = Path(task.local_dir) / LOCAL_FILE
        splits = split_by_task_id(read_jsonl(path, FIELDS), source=LOCAL_FILE)
    else:
        splits = load_hub_splits(task.name, task.hub_path, task.hub_name, FIELDS, LOCAL_HINT)
    return {split: [to_example(r) for r in splits.get(split, [])] for split in SPLIT_TASK_IDS}
