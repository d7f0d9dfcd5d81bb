"""The embedded arith task: deterministic, arithmetically correct, train and test disjoint."""

from __future__ import annotations

import re

from adaspec.data import arith
from adaspec.data.prompts import FINAL_ANSWER
from adaspec.data.tasks import load_task
from tests.conftest import compose_config

NOTE = re.compile(r"<<(\d+)([-+*/])(\d+)=(\d+)>>")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a // b}


def problems(seed=7, n_train=300, n_test=50, **kw):
    kw = {"min_steps": 2, "max_steps": 4, "max_number": 30} | kw
    return arith.generate(n_train, n_test, seed=seed, **kw)


def test_same_seed_same_problems_other_seed_other_problems():
    assert problems(seed=7) == problems(seed=7)
    assert problems(seed=7)["train"] != problems(seed=8)["train"]


def test_every_calculator_note_and_final_answer_is_correct():
    for p in problems()["train"] + problems()["test"]:
        notes = NOTE.findall(p.answer)
        assert len(notes) >= 2
        previous = None
        for i, (a, op, b, c) in enumerate(notes):
            a, b, c = int(a), int(b), int(c)
            assert OPS[op](a, b) == c
            if op == "/":
                assert a % b == 0
            if i > 0:
                assert a == previous, "each step continues from the previous result"
            previous = c
        assert p.answer.endswith(f"#### {previous}") and p.value == previous


def test_steps_and_sizes_follow_the_config():
    for p in problems(min_steps=3, max_steps=3)["train"]:
        assert len(NOTE.findall(p.answer)) == 3
    assert {len(v) for v in problems(n_train=40, n_test=10).values()} == {40, 10}


def test_train_and_test_are_disjoint():
    splits = problems(n_train=1000, n_test=200)
    assert not {p.question for p in splits["train"]} & {p.question for p in splits["test"]}


def test_task_examples_use_the_gsm8k_template():
    splits = load_task(compose_config("task.arith.n_train=5", "task.arith.n_test=3").task)
    example = splits["train"][0]
    assert example.prompt.endswith("First think step by step and then answer the final number.\n")
    assert FINAL_ANSWER in example.target and "####" not in example.target
    assert example.target.rstrip().endswith(example.reference)
