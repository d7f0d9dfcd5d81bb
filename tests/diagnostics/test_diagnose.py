"""Diagnostics: the rules on hand-made numbers, and a whole report on a deliberately bad tiny run."""

from __future__ import annotations

import json

from adaspec.artefacts import paths
from adaspec.commands.diagnose import run_diagnosis
from adaspec.diagnostics import checks
from adaspec.diagnostics.cost_ratio import CostRatio
from adaspec.training.pipeline import run_stage


def test_rules_on_known_numbers():
    assert checks.reference_kl(0.1, 100).status == "ok"
    assert checks.reference_kl(0.5, 100).status == "fail"
    assert checks.loss_still_falling("ref", [1.0 - 0.01 * i for i in range(50)]).status == "warn"
    assert checks.loss_still_falling("ref", [1.0] * 50).status == "ok"
    assert checks.draft_agreement("d", 0.5, 10).status == "warn"
    assert checks.speedup("d", 0.3, 0.8).status == "fail"
    assert checks.best_gamma(0.9, 0.01) > checks.best_gamma(0.5, 0.01)
    precise = CostRatio(0.01, 0.0099, 0.0101, 0.0099, 0.0101, calls=64, threads=1, clock="thread CPU time")
    assert checks.gamma_choice("d", 0.9, precise, 1, 100).status == "warn"
    assert checks.memory(900, 1000).status == "warn" and checks.memory(100, 1000).status == "ok"


def test_report_flags_a_reference_trained_for_one_step(tiny_cfg):
    run_stage(tiny_cfg("stage=target", "stage.max_steps=30", "stage.lr=3e-3"))
    run_stage(tiny_cfg("stage=ref", "stage.max_steps=1"))
    run_stage(tiny_cfg("stage=draft", "k=0.4"))
    report = run_diagnosis(tiny_cfg("eval.draft_ks=[0.4,1.0]"))
    verdicts = {v["check"]: v for v in report["verdicts"]}
    ref = verdicts["reference KL to target (held-out answers)"]
    assert ref["status"] == "fail" and "stage 2" in ref["action"]
    assert verdicts["draft k=0.4: measured speed-up over the target alone"]["status"] == "skip"  # not evaluated
    assert verdicts["draft k=1"]["status"] == "skip"
    assert verdicts["stage 3: peak memory"]["status"] == "ok"
    folder = paths.of(tiny_cfg()).eval_dir().parent / "diagnose"
    assert json.loads((folder / "report.json").read_text())["verdicts"] == report["verdicts"]
    assert "| reference KL to target" in (folder / "report.md").read_text()
