"""GSM8K: grade-school math word problems with worked answers ending in "#### <number>".

From the Hub (`task.hub_path`/`task.hub_name`, i.e. openai/gsm8k, config main) or, with
`task.local_dir=DIR`, from DIR/train.jsonl and DIR/test.jsonl (the files of openai/grade-school-math).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from adaspec.data.example import Example
from adaspec.data.prompts import math_prompt, math_target
from adaspec.data.sources import Located, load_hub_splits, read_jsonl
from adaspec.errors import UserError

FIELDS = ("question", "answer")
SPLITS = ("train", "test")
ANSWER_MARK = "####"
LOCAL_HINT = "task.local_dir=../shared/data/gsm8k"


def final_number(answer: str, where: str) -> str:
    """The number after the last '####', without thousands separators: '#### 1,200' -> '1200'."""
    if ANSWER_MARK not in answer:
        raise UserError(f"{where}: the answer has no final '{ANSWER_MARK} <number>' line")
    return answer.rsplit(ANSWER_MARK, 1)[1].strip().replace(",", "")


def to_example(located: Located) -> Example:
    where, record = located
    return Example(
        prompt=math_prompt(record["question"]),
        target=math_target(record["answer"]),
        reference=final_number(record["answer"], where),
        record=record,
    )


def load_gsm8k(task: DictConfig) -> dict[str, list[Example]]:
    if task.local_dir:
        folder = Path(task.local_dir)
        splits = {split: read_jsonl(folder / f"{split}.jsonl", FIELDS) for split in SPLITS}
    else:
        splits = load_hub_splits(task.name, task.hub_path, task.hub_name, FIELDS, LOCAL_HINT)
    return {split: [to_example(r) for r in splits.get(split, [])] for split in SPLITS}
