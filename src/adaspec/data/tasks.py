"""Tasks: load a task's records and turn them into prompt/target examples.

Every task returns the same shape, `{"train": [...], "test": [...]}` of `Example`, so the rest of
the pipeline never asks which task it runs.
"""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

from adaspec.data import arith
from adaspec.data.example import Example
from adaspec.data.gsm8k import load_gsm8k
from adaspec.data.mbpp import load_mbpp
from adaspec.data.prompts import math_prompt, math_target
from adaspec.errors import UserError


def load_arith(task: DictConfig) -> dict[str, list[Example]]:
    a = task.arith
    splits = arith.generate(
        a.n_train, a.n_test, min_steps=a.min_steps, max_steps=a.max_steps, max_number=a.max_number, seed=a.seed
    )
    return {
        split: [Example(math_prompt(p.question), math_target(p.answer), str(p.value)) for p in problems]
        for split, problems in splits.items()
    }


LOADERS: dict[str, Callable[[DictConfig], dict[str, list[Example]]]] = {
    "arith": load_arith,
    "gsm8k": load_gsm8k,
    "mbpp": load_mbpp,
}


def load_task(task: DictConfig) -> dict[str, list[Example]]:
    """All splits of the task named by `task.name`, cut to `task.n_train` / `task.n_test` when set."""
    if task.name not in LOADERS:
        raise UserError(f"task.name={task.name!r} is unknown: choose one of {sorted(LOADERS)}")
    splits = LOADERS[task.name](task)
    if task.n_train is not None:
        splits["train"] = splits["train"][: task.n_train]
    if task.n_test is not None:
        splits["test"] = splits["test"][: task.n_test]
    for split in ("train", "test"):
        if not splits.get(split):
            raise UserError(f"task {task.name!r} has no {split} examples (check task.n_{split} and the data)")
    return splits


def first_training_examples(task: DictConfig, count: int, key: str = "pretrain.task_prompts") -> list[Example]:
    """The first `count` examples of the task's whole training split (task.n_train does not cut it); `key`
    names the setting that asked for them in the error."""
    examples = LOADERS[task.name](task)["train"]
    if len(examples) < count:
        raise UserError(f"{key}={count}: task {task.name!r} has {len(examples)} training examples")
    return examples[:count]


def held_out_training(task: DictConfig, count: int) -> list[Example]:
    """The `count` training examples right after the first `task.n_train`: prompts no stage trains on,
    for validating a stage whose training answers are not the dataset's (distill.data=target)."""
    if task.n_train is None:
        raise UserError(
            "distill.data=target validates on the target's answers to training prompts held out after the "
            "first task.n_train; set task.n_train (e.g. task.n_train=500)"
        )
    held_out = LOADERS[task.name](task)["train"][task.n_train : task.n_train + count]
    if len(held_out) < count:
        raise UserError(
            f"task.n_train={task.n_train} leaves {len(held_out)} of the task.n_val={count} held-out training "
            f"examples that distill.data=target validates on; lower task.n_train or task.n_val"
        )
    return held_out
