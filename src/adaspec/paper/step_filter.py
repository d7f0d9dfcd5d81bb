"""Part of a plan (`paper --stages/--arms/--ks`): only the steps of some stages, of some arms' drafts and of
drafts at some k, e.g. the forward-KL drafts of the capacity experiment that a serving comparison times,
without its other losses and its evaluations."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from adaspec.errors import UserError
from adaspec.paper.plan import Step, TaskPlan

STAGES = ("pretrain_target", "target", "cache", "pretrain_draft", "ref", "draft", "eval")
OWN_ARM = "a"  # arm (a): the drafts of the task's own config; every other arm is its config's suffix (_nla: nla)


def parse_ks(text: str) -> tuple[float, ...]:
    """An option's list of k, `0.4,1` (`paper --ks`, `bench-real --ks`)."""
    try:
        return tuple(float(k) for k in text.split(",") if k)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers such as 0.4,1, got {text!r}") from None


def override(step: Step, key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in step.overrides if o.startswith(f"{key}=")), None)


def stage_of(step: Step) -> str:
    """A training step's stage (stage=...), else the step's kind: cache or eval."""
    return override(step, "stage") if step.kind in ("train", "pretrain") else step.kind


def arm_of(step: Step, task: TaskPlan) -> str | None:
    """The arm of a draft's step (its training, or the teacher cache an arm reads); None for other steps."""
    if override(step, "stage") != "draft":
        return None
    suffix = override(step, "paper").removeprefix(task.files)
    return suffix.lstrip("_") or OWN_ARM


def k_of(step: Step) -> float | None:
    k = override(step, "k")
    return None if k is None else float(k)


@dataclass(frozen=True)
class StepFilter:
    stages: tuple[str, ...] = ()  # each empty tuple: no filter on it
    arms: tuple[str, ...] = ()  # on the steps of drafts only
    ks: tuple[float, ...] = ()  # on the steps of drafts only

    def __bool__(self) -> bool:
        return bool(self.stages or self.arms or self.ks)

    def described(self) -> str:
        """The options as given, e.g. `--stages draft --ks 0.4,1`."""
        values = (("--stages", self.stages), ("--arms", self.arms), ("--ks", [f"{k:g}" for k in self.ks]))
        return " ".join(f"{option} {','.join(chosen)}" for option, chosen in values if chosen)

    def keeps(self, task: TaskPlan, step: Step) -> bool:
        arm, k = arm_of(step, task), k_of(step)
        return (
            (not self.stages or stage_of(step) in self.stages)
            and (not self.arms or arm is None or arm in self.arms)
            and (not self.ks or k is None or k in self.ks)
        )


def _refuse_absent(option: str, what: str, wanted, present: set, show=str) -> None:
    for value in wanted:
        if value not in present:
            raise UserError(f"{option}: no {what}{show(value)} in the plan of these tasks; "
                            f"{option[2:]}: {', '.join(map(show, sorted(present)))}")


def selected_steps(plan: list[tuple[TaskPlan, Step]], chosen: StepFilter) -> list[Step]:
    """The steps of `plan` (`task_steps`) that `chosen` keeps, in order. An arm or k that no step of the plan
    has is refused, naming those it has, and so is a filter that keeps no step."""
    _refuse_absent("--arms", "arm ", chosen.arms, {arm_of(s, t) for t, s in plan} - {None})
    _refuse_absent("--ks", "draft at k=", chosen.ks, {k_of(s) for _, s in plan} - {None}, show=lambda k: f"{k:g}")
    kept = [step for task, step in plan if chosen.keeps(task, step)]
    if plan and not kept:
        stages = {stage_of(s) for _, s in plan}
        raise UserError(f"{chosen.described()}: no step of the plan of these tasks is left; its stages: "
                        f"{', '.join(s for s in STAGES if s in stages)}")
    return kept
