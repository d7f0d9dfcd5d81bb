"""make paper ARGS="--tasks smollm2_gsm8k_beyond" end to end at test sizes (issue 15): every arm (dataset
answers, on-policy, JSD from the top-K cache, the three together, the k schedule) trains through the runner
against the one reference, the evaluation finds every draft, and the summary compares each with arm (a)."""

from __future__ import annotations

import json

from adaspec import paths
from adaspec.artefacts import read_meta
from adaspec.paper.__main__ import collect
from adaspec.paper.plan import TASKS, paper_plan
from adaspec.paper.runner import compose_step, run_plan
from tests.paper.real_target_sizes import make_tiny_target, plan_overrides_at_test_size


def test_the_beyond_the_paper_plan_trains_every_arm_against_one_reference(tmp_path, one_torch_thread):
    task = TASKS["smollm2_gsm8k_beyond"]
    extra = [*plan_overrides_at_test_size(tmp_path, "gsm8k", max_steps=4), "trainer.log_every_n_steps=1"]
    steps = paper_plan([task], [0])
    make_tiny_target(tmp_path, steps, extra)

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
