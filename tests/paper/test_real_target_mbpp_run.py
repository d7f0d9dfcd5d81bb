"""make paper ARGS="--tasks smollm2_mbpp" end to end at test sizes: the plan's every step (target, answers and
cache, stage 0, reference, the four arms, greedy and sampled evaluations with pass@1 in the sandbox) runs
through the runner on a tiny chat Llama, and the collected summary pairs every arm."""

from __future__ import annotations

from tests.paper.real_target_sizes import run_plan_at_test_size


def test_the_mbpp_real_target_plan_runs_every_step_and_collects_every_comparison(tmp_path, one_torch_thread):
    _, _, summary = run_plan_at_test_size(tmp_path, "smollm2_mbpp", "mbpp", 2, "stage.max_epochs=2")
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
