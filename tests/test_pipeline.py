"""The three stages end to end at tiny sizes: artefacts, skipping, conflicts, missing inputs, resume."""

from __future__ import annotations

import csv
import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from adaspec.artefacts import paths
from adaspec.artefacts.store import read_meta
from adaspec.drafts import load_draft
from adaspec.errors import UserError
from adaspec.stages import STAGE_MODULES
from adaspec.stages.stage_run import StageRun
from adaspec.training.pipeline import run_stage
from tests.conftest import REPO, TINY
from tests.test_resume import checkpoint_step, kill_when_paused, start_training
from tests.wandb_log import history


def logged_columns(stage_folder):
    with open(stage_folder / "logs" / "metrics.csv") as fh:
        return set(next(csv.reader(fh)))


def test_three_stages_end_to_end(tiny_cfg):
    target = run_stage(tiny_cfg("stage=target"))
    ref = run_stage(tiny_cfg("stage=ref"))
    ada = run_stage(tiny_cfg("stage=draft", "k=0.4"))
    dspec = run_stage(tiny_cfg("stage=draft", "distill=distillspec"))

    assert ada.parent.name == "draft-k0.4" and dspec.parent.name == "draft-k1"
    for final in (target, ref, ada, dspec):
        names = set(os.listdir(final))
        assert {"model.safetensors", "tokenizer.json", "config.yaml", "metrics.json", "meta.json"} <= names
        metrics = json.loads((final / "metrics.json").read_text())
        assert metrics["steps"] == 4
        if platform.system() == "Linux":  # what training allocated, beside the resident-set peak
            assert 0 < metrics["peak_anonymous_mb"] <= metrics["peak_memory_mb"]
        assert "train/loss" in logged_columns(final.parent)
    assert {"train/threshold", "train/selected_frac", "train/delta_mean", "train/tokens_per_s", "train/lr"} <= (
        logged_columns(ada.parent)
    )
    # one tokenizer for all three models
    assert (target / "tokenizer.json").read_text() == (ada / "tokenizer.json").read_text()
    # the reference and both drafts started from the same initial weights
    init = read_meta(paths.final(paths.of(tiny_cfg()).draft_init_dir()))["weights"]
    assert read_meta(ref)["upstream"]["draft_init"] == init
    assert read_meta(ada)["upstream"]["draft_init"] == read_meta(dspec)["upstream"]["draft_init"] == init
    assert read_meta(ada)["upstream"]["ref"] == read_meta(ref)["weights"]

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(target))
    students = [STAGE_MODULES[s].build(StageRun.of(tiny_cfg(f"stage={s}")), tok, None).student for s in ("ref", "draft")]
    for a, b in zip(students[0].state_dict().values(), students[1].state_dict().values(), strict=True):
        assert torch.equal(a, b)

    # a finished stage with the same config is skipped; another config is refused, not overwritten
    stamp = (ada / "meta.json").stat().st_mtime_ns
    assert run_stage(tiny_cfg("stage=draft", "k=0.4")) == ada
    assert (ada / "meta.json").stat().st_mtime_ns == stamp
    with pytest.raises(UserError, match="overwrite=true"):
        run_stage(tiny_cfg("stage=draft", "k=0.4", "stage.lr=0.01"))
    assert (ada / "meta.json").stat().st_mtime_ns == stamp
    run_stage(tiny_cfg("stage=draft", "k=0.4", "stage.lr=0.01", "overwrite=true"))
    assert (ada / "meta.json").stat().st_mtime_ns != stamp


def test_drafts_of_another_size_share_the_target_in_folders_of_their_own(tiny_trained):
    """model.draft_name: a wider draft trains beside the preset's against the same target; a size change
    without a new name is refused, not written over the preset's reference."""
    wide = ("model.draft.hidden_size=96", "model.draft.intermediate_size=192", "model.draft_name=h96")
    preset_ref = paths.final(paths.of(tiny_trained("stage=ref")).ref_dir())
    stamp = (preset_ref / "meta.json").stat().st_mtime_ns
    ref = run_stage(tiny_trained("stage=ref", *wide))
    draft = run_stage(tiny_trained("stage=draft", "k=0.4", *wide))

    assert (ref.parent.name, draft.parent.name) == ("ref-h96", "draft-k0.4-h96")
    assert paths.of(tiny_trained(*wide)).draft_init_dir().name == "draft_init-h96"
    assert paths.of(tiny_trained(*wide)).pretrain_draft_dir().name == "pretrain-draft-h96"
    target = read_meta(paths.final(paths.of(tiny_trained()).target_dir()))["weights"]
    for final in (ref, draft):
        assert read_meta(final)["upstream"]["target"] == target
        assert "hidden_size: 96" in (final / "config.yaml").read_text()
        assert load_draft(final).model.config.hidden_size == 96
    assert read_meta(draft)["upstream"]["ref"] == read_meta(ref)["weights"]
    assert (preset_ref / "meta.json").stat().st_mtime_ns == stamp
    with pytest.raises(UserError, match="overwrite=true"):
        run_stage(tiny_trained("stage=ref", *wide[:2]))
    assert (preset_ref / "meta.json").stat().st_mtime_ns == stamp


def test_a_target_fine_tuned_on_more_problems_than_the_drafts_distil_on(tiny_cfg, tmp_path, capsys):
    """task.target_n_train: stage 1 alone reads that many training records, and counts it in its identity
    (another value is refused, not mixed up with the first target); the stages after it read task.n_train."""
    first = ("task.n_train=16", "stage.max_steps=-1", "stage.max_epochs=1")
    run_stage(tiny_cfg("stage=target", *first, "task.target_n_train=40"))
    run_stage(tiny_cfg("stage=ref", *first, "task.target_n_train=40"))
    printed = capsys.readouterr().out
    assert "for 5 steps on 40 examples" in printed  # stage 1: 40 records at batch 8
    assert "for 2 steps on 16 examples" in printed  # stage 2: task.n_train's 16
    with pytest.raises(UserError, match="overwrite=true"):
        run_stage(tiny_cfg("stage=target", *first, "task.target_n_train=48"))
    with pytest.raises(UserError, match="task.target_n_train=5000: task 'arith' has 64 training examples"):
        run_stage(tiny_cfg("stage=target", *first, "task.target_n_train=5000", f"paths.root={tmp_path / 'other'}"))


def test_global_selection_sets_and_logs_a_threshold(tiny_cfg):
    run_stage(tiny_cfg("stage=target"))
    run_stage(tiny_cfg("stage=ref"))
    final = run_stage(tiny_cfg("stage=draft", "distill.selection=global", "distill.threshold_ema=0"))
    with open(final.parent / "logs" / "metrics.csv") as fh:
        logged = list(csv.DictReader(fh))
    rows = [r for r in logged if r.get("train/selected_frac")]
    # Without the moving average the shared threshold changes only where a calibration or reset is logged. Each
    # step selects with the last one logged at an earlier step (step 0: the calibration before training),
    # unless its batch left the band: then with the batch's own cut, logged as the reset at that step.
    refreshes = [(int(r["step"]), float(r["train/threshold_refresh"])) for r in logged if r.get("train/threshold_refresh")]
    assert refreshes and refreshes[0][0] == 0 and len(rows) == 4
    shared = 0
    for row in rows:
        step, used = int(row["step"]), float(row["train/threshold"])
        in_force = ([value for at, value in refreshes if at < step] or [refreshes[0][1]])[-1]
        reset_here = [value for at, value in refreshes[1:] if at == step]
        uses_shared = used == pytest.approx(in_force, rel=1e-6)
        own_cut = bool(reset_here) and used == pytest.approx(reset_here[-1], rel=1e-6)
        assert uses_shared or own_cut, (step, used, refreshes)
        shared += uses_shared
    assert shared >= 1
    # a fixed threshold selects about k of the tokens, not exactly k
    assert 0.0 < sum(float(r["train/selected_frac"]) for r in rows) / len(rows) < 1.0


@pytest.mark.parametrize("stage, missing", [("ref", "make stage1"), ("draft", "make stage1")])
def test_missing_upstream_names_the_command(tiny_cfg, stage, missing):
    with pytest.raises(UserError, match=missing):
        run_stage(tiny_cfg(f"stage={stage}"))


def test_draft_without_reference_names_stage2(tiny_cfg):
    run_stage(tiny_cfg("stage=target"))
    with pytest.raises(UserError, match="make stage2"):
        run_stage(tiny_cfg("stage=draft"))


def test_killed_stage_resumes_to_the_same_step_count(tiny_cfg, tmp_path):
    overrides = ["stage.max_steps=60", "stage.checkpoint_every_n_steps=5"]
    cfg = tiny_cfg("stage=target", *overrides)
    marker = tmp_path / "paused"
    process = start_training(*TINY, f"paths.root={tmp_path / 'outputs'}", "stage=target", *overrides,
                             pause_marker=marker)
    kill_when_paused(process, marker)
    assert (paths.of(cfg).target_dir() / "checkpoints" / "last.ckpt").is_file()
    assert not (paths.final(paths.of(cfg).target_dir()) / "meta.json").exists()

    with pytest.raises(UserError, match="resume=true"):
        run_stage(cfg)
    from_step = checkpoint_step(paths.of(cfg).target_dir())
    final = run_stage(tiny_cfg("stage=target", *overrides, "resume=true"))
    metrics = json.loads((final / "metrics.json").read_text())
    assert metrics["steps"] == 60 and from_step == 5  # the first checkpoint (every 5 steps)
    assert metrics["resumed_from_step"] == from_step and metrics["steps_this_run"] == 60 - from_step


def test_wandb_logger_runs_offline_beside_the_csv_log(tiny_cfg):
    final = run_stage(tiny_cfg("stage=target", "logger=wandb", "stage.max_steps=2"))
    runs = list((final.parent / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # W&B received the values metrics.csv holds, at the same steps
    logged = {int(r["trainer/global_step"]): r["train/loss"] for r in history(runs[0]) if "train/loss" in r}
    with open(final.parent / "logs" / "metrics.csv") as fh:
        csv_losses = {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(fh) if r["train/loss"]}
    assert logged == csv_losses and sorted(logged) == [0, 1]


def test_multirun_sweep_over_k_shares_one_target_and_reference(tiny_cfg, tmp_path):
    run_stage(tiny_cfg("stage=target"))
    ref = run_stage(tiny_cfg("stage=ref"))
    overrides = [*TINY, f"paths.root={tmp_path / 'outputs'}", "stage.monitor_every_n_steps=0"]
    proc = subprocess.run(
        [sys.executable, "-m", "adaspec.commands.train", "-m", "stage=draft", "k=0.2,0.6", *overrides],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for k in ("0.2", "0.6"):
        final = paths.final(paths.of(tiny_cfg("stage=draft")).draft_dir(float(k)))
        assert read_meta(final)["upstream"]["ref"] == read_meta(ref)["weights"]
