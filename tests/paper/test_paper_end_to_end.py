"""`make paper` end to end at tiny sizes: every experiment config composes, trains, evaluates and is
collected, so the configs in experiments/paper/ cannot rot; and a rerun skips everything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, SHARED_DATA, TINY

pytestmark = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason="needs ../shared/data (GSM8K and MBPP files)"
)

# TINY without its arith-only keys, plus the paper run's data, pretraining corpus and evaluation cut down
PAPER_TINY = [o for o in TINY if not o.startswith(("task.arith", "stage.checkpoint", "stage.monitor"))] + [
    "stage.max_steps=2",
    "task.n_train=24",
    "pretrain.max_chars=20000",
    "pretrain.n_val=4",
    "eval.n_prompts=2",
    "decode.max_new_tokens=8",
]


def run_paper(tmp_path, *args: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "adaspec.commands.paper",
        "--seeds",
        "0",
        "1",
        "--results",
        str(tmp_path / "results"),
        *args,
        f"paths.root={tmp_path / 'out'}",
        *PAPER_TINY,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)


def test_paper_runs_every_experiment_config_and_collects_it(tmp_path):
    done = run_paper(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = tmp_path / "results"
    summary = json.loads((results / "summary.json").read_text())
    sweeps = summary.pop("sweeps")
    assert set(summary) == set(sweeps) == {"gsm8k", "mbpp"}
    assert [row["k"] for row in sweeps["gsm8k"]["k"]] == [0.1, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert len(sweeps["mbpp"]["gamma"]) == 6 * 2  # gamma 1,2,3,5,8 and adaptive x AdaSPEC, DistillSpec
    gsm8k, mbpp = summary["gsm8k"], summary["mbpp"]
    assert gsm8k["seeds"] == [0, 1] and set(gsm8k["drafts"]) == {"k0.4", "k1", "k0.4-matched", "k1-matched"}
    assert set(mbpp["drafts"]) == {"k0.33", "k0.4", "k1", "k0.33-matched", "k1-matched"}
    names = [c["name"] for c in gsm8k["comparisons"]]
    assert names == [
        "(a) equal budget, k=0.4",
        "(b) vs (c) same forward passes, k=0.4",
        "(b) vs (a) DistillSpec: the official budgets, k=0.4",
    ]
    diff = gsm8k["comparisons"][0]["difference"]["accept_rate"]
    seed_values = [
        json.loads((results / "gsm8k" / f"seed{s}" / "main.json").read_text())["drafts"] for s in (0, 1)
    ]
    expected = [d["k0.4"]["accept_rate"] - d["k1"]["accept_rate"] for d in seed_values]
    assert diff["values"] == pytest.approx(expected) and len(diff["ci95"]) == 2
    assert "mbpp/pass@1" in mbpp["target"]
    from adaspec.sandbox.isolation import isolation_summary

    main = {task: json.loads((results / task / "seed0" / "main.json").read_text()) for task in ("gsm8k", "mbpp")}
    assert main["mbpp"]["code_sandbox"] == isolation_summary() and main["gsm8k"]["code_sandbox"] is None
    for task in ("gsm8k", "mbpp"):
        assert (results / f"{task}_k_sweep.png").stat().st_size > 0
        assert (results / f"{task}_gamma_sweep.png").stat().st_size > 0
        assert (
            len(list((results / task / "seed0").glob("*-gsweep.json"))) == 6
        )  # gamma 1,2,3,5,8 + adaptive
    assert "| gsm8k | AdaSPEC k=0.4 (matched) |" in (results / "summary.md").read_text()

    out = tmp_path / "out"
    matched = json.loads((out / "gsm8k/tiny/seed1/draft-k1-matched/final/metrics.json").read_text())
    plain = json.loads((out / "gsm8k/tiny/seed1/draft-k1/final/metrics.json").read_text())
    assert matched["steps"] == plain["steps"] == 2  # the matched arm: same steps, bigger batches
    init = json.loads((out / "mbpp/tiny/seed1/draft_init/final/meta.json").read_text())
    assert "pretrain_draft" in init["upstream"]  # MBPP's drafts start from stage 0

    again = run_paper(tmp_path)  # resumable: everything exists, nothing is trained or evaluated again
    assert again.returncode == 0, again.stderr[-3000:]
    log = [json.loads(line) for line in (out / "paper_log.jsonl").read_text().splitlines()]
    steps = len(log) // 2
    first_run_skipped = [entry["step"] for entry in log[:steps] if not entry["ran"]]
    assert len(first_run_skipped) == 4  # the k sweep's k=0.4 and 1.0 drafts are arm (a)'s, trained before
    assert all("stage=draft seed=0 k=" in step for step in first_run_skipped)
    assert not any(entry["ran"] for entry in log[steps:])
    assert json.loads((results / "wall_times.json").read_text()).keys() == {"gsm8k", "mbpp"}

    logged = run_paper(tmp_path, "--collect-only", "logger=wandb")  # W&B offline (tests/conftest.py)
    assert logged.returncode == 0, logged.stderr[-3000:]
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))

    # on another machine the run root is gone: the collection keeps what an earlier one copied, and says so
    before = json.loads((results / "summary.json").read_text())
    out.rename(tmp_path / "out-elsewhere")
    kept = run_paper(tmp_path, "--collect-only", "--no-sweeps")
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert "kept from an earlier collection" in kept.stdout
    after = json.loads((results / "summary.json").read_text())
    assert after["mbpp"]["seeds"] == [0, 1] and after["mbpp"]["drafts"] == before["mbpp"]["drafts"]
    # ... but never under settings the kept evaluation did not have
    other = run_paper(tmp_path, "--collect-only", "--no-sweeps", "decode.gamma=4")
    assert other.returncode != 0 and "was collected from an evaluation with other settings" in other.stderr
    assert "decode.gamma: 5 -> 4" in other.stderr
