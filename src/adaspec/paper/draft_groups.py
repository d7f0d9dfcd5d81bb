"""The finished drafts of a draft group, which `bench-real --draft-group` serves side by side against one set of
target-only runs: a function of the outputs folder tree alone, so which folders are benched is tested without
a bench."""

from __future__ import annotations

from pathlib import Path

from adaspec.artefacts.paths import format_k, schedule_suffix
from adaspec.paper.plan import CAPACITY, CAPACITY_GROUP, TaskPlan

DRAFT_GROUPS = ("capacity",)
# <paths.root>/<task>/<model> of experiments/paper/smollm2_gsm8k_capacity.yaml, and of make demo-real
CAPACITY_RUN = Path("capacity-real/gsm8k/smollm2")
DEMO_REAL_RUN = Path("gsm8k/smollm2")
ANSWERS = "-target-answers"  # both distil the target's own answers (distill.data=target)
# make demo-real's heads: warmed up on one pass (its default since 2026-12-07), then those from before
DEMO_REAL_SCHEDULES = (schedule_suffix(540), schedule_suffix(0))


def finished(folder: Path) -> bool:
    return (folder / "meta.json").is_file()


def _draft_name(task: TaskPlan) -> str:
    return next((o.split("=", 1)[1] for o in task.draft_overrides if o.startswith("model.draft_name=")), "")


def capacity_sizes() -> list[tuple[str, str]]:
    """(size, folder suffix) of each independent draft of the capacity plan: ("h128", ""), ("h256", "-h256x6"), ..."""
    return [(task.name.removeprefix(f"{CAPACITY_GROUP}_"), f"-{name}" if (name := _draft_name(task)) else "")
            for task in CAPACITY if "model.draft_kind=eagle3" not in task.draft_overrides]


def capacity_run(seed: int, outputs: Path = Path("outputs")) -> Path:
    return outputs / CAPACITY_RUN / f"seed{seed}"


def capacity_drafts(seed: int, ks: tuple[float, ...], outputs: Path = Path("outputs")) -> dict[str, Path]:
    """The capacity experiment's finished forward-KL drafts of `seed` by row name: each size's at `ks`
    (`h256-k1`), then the EAGLE-3 heads at k=0.4 and 1, the experiment's own where it has its k=0.4 head, else
    make demo-real's AdaSPEC k=0.4 head and its reference (which stage 3 at k=1 reproduces bit for bit), its
    current recipe's where finished, else its recipe's before. A folder without meta.json is unfinished and left out."""
    run = capacity_run(seed, outputs)
    sizes = {f"{size}-k{format_k(k)}": run / f"draft-k{format_k(k)}{suffix}{ANSWERS}" / "final"
             for size, suffix in capacity_sizes() for k in ks}
    own_heads = {f"head-k{format_k(k)}": run / f"draft-k{format_k(k)}-eagle3{ANSWERS}" / "final" for k in (0.4, 1)}
    demo = outputs / DEMO_REAL_RUN / "seed0"
    demo_recipes = [{"demo-real-head-k0.4": demo / f"draft-k0.4-eagle3{schedule}{ANSWERS}" / "final",
                     "demo-real-head-k1": demo / f"ref-eagle3{schedule}{ANSWERS}" / "final"}
                    for schedule in DEMO_REAL_SCHEDULES]
    demo_heads = next((h for h in demo_recipes if finished(h["demo-real-head-k0.4"])), demo_recipes[0])
    heads = own_heads if finished(own_heads["head-k0.4"]) else demo_heads
    return {name: folder for name, folder in (sizes | heads).items() if finished(folder)}
