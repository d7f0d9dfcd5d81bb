"""A seeded generator of GSM8K-style multi-step word problems.

Each problem chains `n_steps` arithmetic operations over a story; the answer explains every step
with a GSM8K calculator note (`<<a*b=c>>`) and ends with `#### N`, so the GSM8K prompt template and
exact-match score apply unchanged. All intermediate results are non-negative integers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NAMES = ["Ava", "Ben", "Carla", "Dev", "Emma", "Finn", "Gina", "Hugo", "Iris", "Jack", "Lena", "Omar"]
ITEMS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "shells", "coins", "cards", "eggs"]


@dataclass(frozen=True)
class ArithProblem:
    question: str
    answer: str  # GSM8K format: reasoning lines with <<expr=value>> notes, then "#### value"
    value: int


def _step(rng: random.Random, name: str, item: str, total: int, max_number: int) -> tuple[str, str, str, int]:
    """One operation applied to the running total: (question clause, expression symbol, operand, result)."""
    choices = ["add", "mul"]
    if total > 1:
        choices.append("sub")
    divisors = [d for d in range(2, min(total, 10) + 1) if total % d == 0]
    if divisors:
        choices.append("div")
    op = rng.choice(choices)
    if op == "add":
        n = rng.randint(1, max_number)
        return f"Then {name} buys {n} more {item}.", "+", str(n), total + n
    if op == "sub":
        n = rng.randint(1, total - 1)
        return f"Then {name} gives away {n} {item}.", "-", str(n), total - n
    if op == "mul":
        n = rng.randint(2, 5)
        return f"Then the number of {item} {name} has grows {n} times.", "*", str(n), total * n
    n = rng.choice(divisors)
    return f"Then {name} splits the {item} into {n} equal groups and keeps one group.", "/", str(n), total // n


def make_problem(rng: random.Random, min_steps: int, max_steps: int, max_number: int) -> ArithProblem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    boxes, per_box = rng.randint(2, 9), rng.randint(2, max_number)
    total = boxes * per_box
    question = [f"{name} has {boxes} boxes with {per_box} {item} in each box."]
    lines = [f"{name} starts with {boxes}*{per_box} = <<{boxes}*{per_box}={total}>>{total} {item}."]
    for _ in range(rng.randint(min_steps, max_steps) - 1):
        clause, sym, operand, new_total = _step(rng, name, item, total, max_number)
        question.append(clause)
        lines.append(f"Now {name} has {total}{sym}{operand} = <<{total}{sym}{operand}={new_total}>>{new_total} {item}.")
        total = new_total
    question.append(f"How many {item} does {name} have now?")
    lines.append(f"#### {total}")
    return ArithProblem(" ".join(question), "\n".join(lines), total)


def generate(
    n_train: int, n_test: int, *, min_steps: int, max_steps: int, max_number: int, seed: int
) -> dict[str, list[ArithProblem]]:
    """Disjoint train and test problems (no question appears in both), deterministic per seed."""
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[ArithProblem]] = {"train": [], "test": []}
    for split, n in (("test", n_test), ("train", n_train)):
        attempts = 0
        while len(splits[split]) < n:
            attempts += 1
            if attempts > 50 * (n + 10):
                raise ValueError(f"cannot generate {n} distinct {split} problems; raise task.arith.max_number")
            problem = make_problem(rng, min_steps, max_steps, max_number)
            if problem.question not in seen:
                seen.add(problem.question)
                splits[split].append(problem)
    return splits
