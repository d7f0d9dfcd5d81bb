"""A real-target paper plan run at test sizes: the overrides that shrink every step, on a tiny chat target."""

from __future__ import annotations

from pathlib import Path

from adaspec.commands.paper import collect
from adaspec.data.tasks import held_out_training, load_task
from adaspec.paper.plan import TASKS, paper_plan
from adaspec.paper.runner import compose_step, run_plan
from tests.conftest import shared_data
from tests.test_smollm2_pipeline import tiny_instruct_target

N_TRAIN, N_VAL = 8, 2


def plan_overrides_at_test_size(tmp: Path, task: str, max_steps: int) -> list[str]:
    """Every step of a smollm2_* plan on a tiny target in `tmp`/instruct, its outputs below `tmp`."""
    return [
        f"model.target_path={tmp / 'instruct'}", f"paths.models={tmp / 'models'}",
        f"paths.root={tmp / 'outputs'}", f"task.local_dir={shared_data(task)}",
        f"task.n_train={N_TRAIN}", f"task.n_val={N_VAL}", "task.n_test=2", "eval.n_prompts=2", "eval.gammas=[1,2]",
        "eval.timed_prompts=1", "decode.max_new_tokens=12", "distill.answer_max_new_tokens=200",
        "distill.cache_topk=8", "model.draft_vocab_size=96", "model.draft.hidden_size=16",
        "model.draft.num_hidden_layers=1", "model.draft.num_attention_heads=2", "model.draft.intermediate_size=32",
        "stage.batch_size=4", f"stage.max_steps={max_steps}", "pretrain.max_chars=4000",
        f"pretrain.task_prompts={N_TRAIN}", "pretrain.n_val=2", "pretrain.batch_size=4",
        "trainer.enable_progress_bar=false",
    ]


def run_plan_at_test_size(tmp: Path, name: str, data: str, max_steps: int, *more: str):
    """Every step of `make paper ARGS="--tasks <name> --seeds 0"` on a tiny chat target trained on the
    training and held-out prompts it will answer (so that it stops); (steps, overrides, collected summary)."""
    steps = paper_plan([TASKS[name]], [0])
    extra = [*plan_overrides_at_test_size(tmp, data, max_steps), *more]
    task = compose_step(steps[-1], extra).task
    tiny_instruct_target(tmp / "instruct", load_task(task)["train"] + held_out_training(task, N_VAL), steps=80)
    run_plan(steps, extra)
    summary, _ = collect([TASKS[name]], [0], extra, tmp / "results", sweeps=False)
    return steps, extra, summary
