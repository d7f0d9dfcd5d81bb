"""make paper ARGS="--tasks smollm2_gsm8k_beyond" end to end at test sizes (issue 15): every arm (dataset
answers, on-policy, JSD from the top-K cache, the three together, the k schedule) trains through the runner
against the one reference, the evaluation finds every draft, and the summary compares each with arm (a)."""

from __future__ import annotations

from adaspec.artefacts import paths
from adaspec.artefacts.store import read_meta, read_metrics
from adaspec.paper.runner import compose_step
from tests.paper.real_target_sizes import run_plan_at_test_size


def test_the_beyond_the_paper_plan_trains_every_arm_against_one_reference(tmp_path, one_torch_thread):
    steps, extra, summary = run_plan_at_test_size(
        tmp_path, "smollm2_gsm8k_beyond", "gsm8k", 4, "trainer.log_every_n_steps=1"
    )
    configs = [compose_step(s, extra) for s in steps if s.kind == "train" and "stage=draft" in s.overrides]
    reference = read_meta(paths.final(paths.of(configs[0]).ref_dir()))["weights"]
    for cfg in configs:
        final = paths.final(paths.of(cfg).draft_dir())
        assert read_meta(final)["upstream"]["ref"] == reference
        assert read_metrics(final)["steps"] == 4
    rows = summary["smollm2_gsm8k_beyond"]["drafts"]
    assert set(rows) == {f"k{k}-{tag}" for tag in ("dataset", "onpolicy", "jsd", "combined") for k in ("0.4", "1")} | {
        "k0.4", "k1", "k0.4-kschedule"}
    versus = [c for c in summary["smollm2_gsm8k_beyond"]["comparisons"] if c["second_label"] == "arm (a)"]
    assert len(versus) == 9 and all(c["second"] in ("k0.4", "k1") for c in versus)
