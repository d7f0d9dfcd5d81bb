"""make paper ARGS="--tasks smollm2_mbpp" end to end at test sizes: the plan's every step (target, answers and
cache, stage 0, reference, the four arms, greedy and sampled evaluations with pass@1 in the sandbox) runs
through the runner on a tiny chat Llama, and the collected summary pairs every arm."""

from __future__ import annotations

from adaspec.data.tasks import held_out_training, load_task
from adaspec.paper.__main__ import collect
from adaspec.paper.plan import TASKS, paper_plan
from adaspec.paper.runner import compose_step, run_plan
from tests.conftest import SHARED_DATA
from tests.test_smollm2_pipeline import tiny_instruct_target


def test_the_mbpp_real_target_plan_runs_every_step_and_collects_every_comparison(tmp_path, one_torch_thread):
    task = TASKS["smollm2_mbpp"]
    extra = [
        f"model.target_path={tmp_path / 'instruct'}", f"paths.models={tmp_path / 'models'}",
        f"paths.root={tmp_path / 'outputs'}", f"task.local_dir={SHARED_DATA / 'mbpp'}",
        "task.n_train=8", "task.n_val=2", "task.n_test=2", "eval.n_prompts=2", "eval.gammas=[1,2]",
        "eval.timed_prompts=1", "decode.max_new_tokens=12", "distill.answer_max_new_tokens=200",
        "distill.cache_topk=8", "model.draft_vocab_size=96", "model.draft.hidden_size=16",
        "model.draft.num_hidden_layers=1", "model.draft.num_attention_heads=2", "model.draft.intermediate_size=32",
        "stage.batch_size=4", "stage.max_steps=2", "stage.max_epochs=2", "pretrain.max_chars=4000",
        "pretrain.task_prompts=8", "pretrain.n_val=2", "pretrain.batch_size=4",
        "trainer.enable_progress_bar=false",
    ]
    steps = paper_plan([task], [0])
    task_cfg = compose_step(steps[-1], extra).task  # it answers the training and the held-out prompts
    tiny_instruct_target(tmp_path / "instruct", load_task(task_cfg)["train"] + held_out_training(task_cfg, 2), steps=80)

    run_plan(steps, extra)

    summary, _ = collect([task], [0], extra, tmp_path / "results", sweeps=False)
    greedy, sampled = summary["smollm2_mbpp"], summary["smollm2_mbpp t=1"]
    assert greedy["score_metric"] == "mbpp/pass@1" and 0.0 <= greedy["target"]["mbpp/pass@1"]["mean"] <= 1.0
    assert set(greedy["drafts"]) == {
        "k0.4", "k1", "k0.4-matched", "k1-matched", "k0.4-optimal", "k1-optimal", "k0.33-domain"
    }
    assert {c["name"] for c in greedy["comparisons"]} >= {
        "(a) equal budget, k=0.4", "(b) vs (c) same forward passes, k=0.4", "(d) optimal epoch, k=0.4",
        "ablation: domain strategies, k=0.33",
    }
    assert all(d["train_seconds"]["mean"] > 0 for d in greedy["drafts"].values())
    assert set(sampled["drafts"]) == {"k0.4", "k1", "k0.4-matched", "k1-matched"}
    stage0 = tmp_path / "outputs" / "mbpp" / "smollm2" / "seed0" / "pretrain-draft" / "final" / "meta.json"
    assert stage0.is_file()
