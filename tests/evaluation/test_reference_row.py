"""eval.reference: DistillSpec at the reference's budget is the reference itself, so the evaluation can
report the reference as the DistillSpec row instead of training it a second time as stage 3 at k = 1."""

from __future__ import annotations

import pytest

from adaspec.artefacts.store import read_meta
from adaspec.errors import UserError
from adaspec.evaluation.run import run_evaluation
from adaspec.training.pipeline import run_stage

FAST = ["eval.n_prompts=3", "decode.max_new_tokens=16", "eval.num_threads=1", "eval.compare_hf_assisted=false"]


# demo-real's head settings: three passes of the training-time test under bfloat16 autocast
HEAD = ["model.draft_kind=eagle3", "distill.ttt_passes=3", "trainer.precision=bf16-mixed", "stage.max_steps=6",
        "stage.monitor_every_n_steps=0"]


@pytest.mark.parametrize("draft", [[], HEAD], ids=["independent", "eagle3-head-bf16"])
def test_distillspec_at_the_references_budget_is_the_reference_bit_for_bit_and_its_row(tiny_cfg, draft):
    run_stage(tiny_cfg("stage=target"))
    ref = run_stage(tiny_cfg("stage=ref", *draft))
    distillspec = run_stage(tiny_cfg("stage=draft", "k=1.0", *draft))
    assert read_meta(distillspec)["weights"] == read_meta(ref)["weights"]
    # ... not so at another k, which selects tokens
    assert read_meta(run_stage(tiny_cfg("stage=draft", "k=0.4", *draft)))["weights"] != read_meta(ref)["weights"]

    results = run_evaluation(tiny_cfg(*FAST, *draft, "eval.reference=true"), progress=False)
    rows = results["drafts"]
    assert {n for n, r in rows.items() if r["path"]} == {"k0.4", "k1", "ref"}  # beside the training-free rows
    assert rows["ref"]["label"] == "DistillSpec (the reference)"
    assert rows["ref"]["path"] == str(ref)
    for metric in ("alpha", "accept_rate", "tau", "reject_rate_at/1", "acceptance_vs_gamma"):
        assert rows["ref"][metric] == rows["k1"][metric]  # greedy: the same weights accept the same tokens


def test_a_reference_missing_or_from_another_target_is_named(tiny_cfg):
    only_reference = [*FAST, "eval.draft_ks=[]", "eval.reference=true"]
    run_stage(tiny_cfg("stage=target"))
    with pytest.raises(UserError, match="make stage2"):
        run_evaluation(tiny_cfg(*only_reference), progress=False)
    run_stage(tiny_cfg("stage=ref"))
    run_stage(tiny_cfg("stage=target", "stage.lr=0.01", "overwrite=true"))
    with pytest.raises(UserError, match="reference .* another target"):
        run_evaluation(tiny_cfg(*only_reference), progress=False)
