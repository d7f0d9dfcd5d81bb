"""make paper ARGS="--tasks smollm2_gsm8k_beyond" end to end at test sizes (issue 15): every arm (dataset
answers, on-policy, JSD from the top-K cache, the three together, the k schedule) trains through the runner
against the one reference, the evaluation finds every draft, and the summary compares each with arm (a)."""

from __future__ import annotations

import json

from adaspec import paths
from adaspec.artefacts import read_meta
from adaspec.data.tasks import held_out_training, load_task
from adaspec.paper.__main__ import collect
from adaspec.paper.plan import TASKS, paper_plan
from adaspec.paper.runner import compose_step, run_plan
from tests.conftest import SHARED_DATA
from tests.test_smollm2_pipeline import tiny_instruct_target


def test_the_beyond_the_paper_plan_trains_every_arm_against_one_reference(tmp_path, one_torch_thread):
    task = TASKS["smollm2_gsm8k_beyond"]
    extra = [
        f"model.target_path={tmp_path / 'instruct'}", f"paths.models={tmp_path / 'models'}",
        f"paths.root={tmp_path / 'outputs'}", f"task.local_dir={SHARED_DATA / 'gsm8k'}",
        "task.n_train=8", "task.n_val=2", "task.n_test=2", "eval.n_prompts=2", "eval.gammas=[1,2]",
        "eval.timed_prompts=1", "decode.max_new_tokens=12", "distill.answer_max_new_tokens=200",
        "distill.cache_topk=8", "model.draft_vocab_size=96", "model.draft.hidden_size=16",
        "model.draft.num_hidden_layers=1", "model.draft.num_attention_heads=2", "model.draft.intermediate_size=32",
        "stage.batch_size=4", "stage.max_steps=4", "pretrain.max_chars=4000", "pretrain.task_prompts=8",
        "pretrain.n_val=2", "pretrain.batch_size=4", "trainer.enable_progress_bar=false",
        "trainer.log_every_n_steps=1",
    ]
    steps = paper_plan([task], [0])
    task_cfg = compose_step(steps[-1], extra).task
    tiny_instruct_target(tmp_path / "instruct", load_task(task_cfg)["train"] + held_out_training(task_cfg, 2), 80)

    run_plan(steps, extra)

    configs = [compose_step(s, extra) for s in steps if s.kind == "train" and "stage=draft" in s.overrides]
    reference = read_meta(paths.final(paths.ref_dir(configs[0])))["weights"]
    for cfg in configs:
        final = paths.final(paths.draft_dir(cfg))
        assert read_meta(final)["upstream"]["ref"] == reference
        metrics = json.loads((final / "metrics.json").read_text())
        assert metrics["steps"] == 4
    summary, _ = collect([task], [0], extra, tmp_path / "results", sweeps=False)
    rows = summary["smollm2_gsm8k_beyond"]["drafts"]
    assert set(rows) == {f"k{k}-{tag}" for tag in ("dataset", "onpolicy", "jsd", "combined") for k in ("0.4", "1")} | {
        "k0.4", "k1", "k0.4-kschedule"}
    versus = [c for c in summary["smollm2_gsm8k_beyond"]["comparisons"] if c["second_label"] == "arm (a)"]
    assert len(versus) == 9 and all(c["second"] in ("k0.4", "k1") for c in versus)
