"""Resume: a stage killed mid-epoch and resumed equals the uninterrupted run; a resume never continues or
rewrites a run of another config; a corrupted artefact is refused by name."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch.utils.data import DataLoader

from adaspec.artefacts import paths
from adaspec.artefacts.rules import require_artefact
from adaspec.data.resumable_shuffle import ResumableShuffle
from adaspec.errors import UserError
from adaspec.training.pipeline import run_stage
from tests.conftest import REPO, TINY

# 2 epochs of 13 batches; a checkpoint every 4 steps, so the kill lands mid-epoch
RUN = [
    *TINY,
    "stage=target",
    "task.arith.n_train=100",
    "stage.max_steps=-1",
    "stage.max_epochs=2",
    "stage.checkpoint_every_n_steps=4",
    "stage.val_every_n_steps=0",
]
# what the machine measured, not what training computed: they differ between any two runs
MEASURED_COLUMNS = (
    "train/tokens_per_s", "train/generation_s", "memory/anonymous_mb", "memory/validation_anonymous_mb"
)


# Runs the training command with one change, made here and not in the package: right after writing its first
# checkpoint the run touches a marker file and waits, so the test's SIGKILL lands mid-epoch, after that
# checkpoint, whatever the machine's speed (no sleep, no race with the end of the run).
PAUSE_AFTER_FIRST_CHECKPOINT = """
import os, runpy, signal, sys
from pathlib import Path
from adaspec.callbacks.step_checkpoint import StepCheckpoint

save = StepCheckpoint.on_train_batch_start

def save_then_wait(self, trainer, pl_module, batch, batch_idx):
    before = self.saved_step
    save(self, trainer, pl_module, batch, batch_idx)
    if self.saved_step != before:
        Path(os.environ["PAUSED_MARKER"]).touch()
        while True:
            signal.pause()

StepCheckpoint.on_train_batch_start = save_then_wait
sys.argv[0] = "adaspec.commands.train"
runpy.run_module("adaspec.commands.train", run_name="__main__")
"""

# The negative control of the resume tests: the training command with resume broken as a bug would break it,
# here and not in the package: the last checkpoint is never found, so `resume=true` silently trains from step 0.
RESUME_BROKEN = """
import runpy, sys
from adaspec.artefacts import paths

paths.last_checkpoint = lambda folder: folder / "checkpoints" / "never-written.ckpt"
sys.argv[0] = "adaspec.commands.train"
runpy.run_module("adaspec.commands.train", run_name="__main__")
"""


def start_training(*overrides: str, pause_marker: Path | None = None, resume_broken: bool = False) -> subprocess.Popen:
    """`python -m adaspec.commands.train <overrides>` in a process of its own; with `pause_marker`, paused after
    its first checkpoint (see PAUSE_AFTER_FIRST_CHECKPOINT); with `resume_broken`, see RESUME_BROKEN."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # PYTHONPATH: tests/conftest.py
    entry = ["-m", "adaspec.commands.train"]
    if pause_marker is not None:
        env["PAUSED_MARKER"] = str(pause_marker)
        entry = ["-c", PAUSE_AFTER_FIRST_CHECKPOINT]
    if resume_broken:
        entry = ["-c", RESUME_BROKEN]
    command = [sys.executable, *entry, *overrides]
    # stdout to a file: a pipe left unread could fill and block the run while the test waits for its marker
    out = tempfile.TemporaryFile("w+")
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.PIPE, text=True)
    process.stdout_file = out
    return process


def train(root: Path, *extra: str, pause_marker: Path | None = None, resume_broken: bool = False) -> subprocess.Popen:
    """This file's run (RUN) with its outputs under `root`."""
    return start_training(*RUN, f"paths.root={root}", *extra, pause_marker=pause_marker, resume_broken=resume_broken)


def finish(process: subprocess.Popen) -> str:
    """Wait for the run; what it printed, stdout then stderr."""
    _, err = process.communicate(timeout=600)
    process.stdout_file.seek(0)
    out = process.stdout_file.read()
    assert process.returncode == 0, err[-3000:]
    return out + err


def checkpoint_step(stage_folder: Path) -> int:
    """The optimiser step the last checkpoint was saved at."""
    return int(torch.load(stage_folder / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"])


def assert_resumed(stage_folder: Path, log: str, from_step: int, total: int) -> None:
    """The run that wrote `log` continued from the checkpoint's step `from_step` and trained only the rest."""
    metrics = json.loads((stage_folder / "final" / "metrics.json").read_text())
    assert from_step > 0 and f"resumed at step {from_step}: {total - from_step} steps to go" in log
    assert metrics["resumed_from_step"] == from_step
    assert metrics["steps_this_run"] == total - from_step and metrics["steps"] == total


def kill_when_paused(process: subprocess.Popen, marker: Path) -> None:
    """SIGKILL from outside once a run started with `pause_marker=marker` waits after its first checkpoint."""
    while not marker.exists():
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"the run ended (exit {process.returncode}) before its first checkpoint:\n{err[-3000:]}")
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate()


def metrics_rows(stage_folder: Path) -> list[dict[str, str]]:
    with open(stage_folder / "logs" / "metrics.csv", newline="") as fh:
        return [{k: v for k, v in row.items() if k not in MEASURED_COLUMNS} for row in csv.DictReader(fh)]


@pytest.mark.chaos("exact-resume")
def test_the_sampler_replays_the_shuffled_loader_from_any_batch():
    n, batch, seed = 37, 5, 3
    plain = DataLoader(list(range(n)), batch_size=batch, shuffle=True, generator=torch.Generator().manual_seed(seed))
    expected = [b.tolist() for _ in range(3) for b in plain]
    for skipped in (0, 3, 8, 9, 17):
        sampler = ResumableShuffle(n, seed)
        sampler.skip_batches(skipped, batch)
        loader = DataLoader(list(range(n)), batch_size=batch, sampler=sampler, generator=torch.Generator())
        got = [b.tolist() for _ in range(3) for b in loader][: len(expected) - skipped]
        assert got == expected[skipped:]


@pytest.mark.chaos("exact-resume")
def test_a_stage_killed_mid_epoch_resumes_to_the_uninterrupted_weights_and_log(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    finish(train(whole))
    stage = Path("arith/tiny/seed0/target")
    process = train(killed, pause_marker=tmp_path / "paused")
    kill_when_paused(process, tmp_path / "paused")
    assert process.returncode == -signal.SIGKILL
    assert not (killed / stage / "final").exists()
    from_step = checkpoint_step(killed / stage)
    log = finish(train(killed, "resume=true"))
    assert "dataloader is not resumable" not in log  # Lightning's warning: ours is (ResumableShuffle)
    assert_resumed(killed / stage, log, from_step, 26)

    a = load_file(whole / stage / "final" / "model.safetensors")
    b = load_file(killed / stage / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bit-identical
    rows = metrics_rows(whole / stage)
    assert metrics_rows(killed / stage) == rows  # one continuous log, every step once
    assert [int(r["step"]) for r in rows if r.get("train/loss")] == list(range(26))
    assert (killed / stage / "checkpoints" / "last.ckpt").is_file()  # written at the end of training too


@pytest.mark.chaos("exact-resume")
def test_a_resume_that_silently_restarts_from_step_0_is_caught(tmp_path):
    """The negative control of every resume test: with resume broken (RESUME_BROKEN) the weights and the log
    still equal the uninterrupted run's (it is deterministic), and only `assert_resumed` tells."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    finish(train(whole))
    stage = Path("arith/tiny/seed0/target")
    process = train(killed, pause_marker=tmp_path / "paused")
    kill_when_paused(process, tmp_path / "paused")
    from_step = checkpoint_step(killed / stage)
    log = finish(train(killed, "resume=true", resume_broken=True))
    a = load_file(whole / stage / "final" / "model.safetensors")
    b = load_file(killed / stage / "final" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a) and metrics_rows(killed / stage) == metrics_rows(whole / stage)
    with pytest.raises(AssertionError):
        assert_resumed(killed / stage, log, from_step, 26)
    assert json.loads((killed / stage / "final" / "metrics.json").read_text())["steps_this_run"] == 26


@pytest.mark.chaos("resume-config")
def test_resume_refuses_another_config_and_never_rewrites_a_finished_stage(tiny_cfg):
    cfg = tiny_cfg("stage=target")
    final = run_stage(cfg)
    before = {p.name: p.stat().st_mtime_ns for p in final.iterdir()}
    assert run_stage(tiny_cfg("stage=target", "resume=true")) == final  # same config: up to date
    with pytest.raises(UserError, match="exists and was trained with a different config"):
        run_stage(tiny_cfg("stage=target", "resume=true", "stage.lr=0.003"))
    assert {p.name: p.stat().st_mtime_ns for p in final.iterdir()} == before


@pytest.mark.chaos("resume-config")
def test_resume_refuses_an_interrupted_run_of_another_config(tiny_cfg):
    cfg = tiny_cfg("stage=target", "stage.lr=1e30", "stage.checkpoint_every_n_steps=1")
    with pytest.raises(UserError, match="non-finite"):
        run_stage(cfg)  # leaves checkpoints/last.ckpt behind, as a killed run would
    with pytest.raises(UserError, match="interrupted run in .* was trained with a different config"):
        run_stage(tiny_cfg("stage=target", "resume=true"))


@pytest.mark.chaos("exact-resume")
def test_stale_temporary_folders_are_removed_when_a_stage_starts(tiny_cfg):
    cfg = tiny_cfg("stage=target")
    stale = paths.of(cfg).target_dir() / ".final.tmp-abc123"
    stale.mkdir(parents=True)
    run_stage(cfg)
    assert not stale.exists()


@pytest.mark.chaos("corrupt-weights")
@pytest.mark.parametrize("damage", ["overwrite", "truncate"])
def test_a_corrupted_artefact_is_refused_naming_the_file(tiny_cfg, damage):
    cfg = tiny_cfg("stage=target")
    final = run_stage(cfg)
    weights = final / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "overwrite":
        data[len(data) // 2 : len(data) // 2 + 64] = os.urandom(64)
        weights.write_bytes(bytes(data))
    else:
        weights.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(UserError, match=r"model.safetensors is corrupted .* rerun `make stage1"):
        require_artefact(paths.of(cfg).target_dir(), "target", "evaluate", paths.of(cfg))
    with pytest.raises(UserError, match=r"model.safetensors is corrupted"):
        run_stage(tiny_cfg("stage=ref"))


def test_a_weight_file_added_after_training_or_an_older_artefact_is_still_checked(tiny_cfg):
    cfg = tiny_cfg("stage=target")
    final = run_stage(cfg)
    (final / "extra.safetensors").write_bytes(b"not trained")
    with pytest.raises(UserError, match=r"extra.safetensors was added to the artefact after training"):
        require_artefact(paths.of(cfg).target_dir(), "target", "evaluate", paths.of(cfg))
    (final / "extra.safetensors").unlink()
    # an artefact saved before per-file hashes: the combined weights hash still catches a change
    meta = json.loads((final / "meta.json").read_text())
    del meta["files"]
    (final / "meta.json").write_text(json.dumps(meta))
    require_artefact(paths.of(cfg).target_dir(), "target", "evaluate", paths.of(cfg))
    weights = final / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64] + os.urandom(64))
    with pytest.raises(UserError, match=r"the weights in .* are corrupted"):
        require_artefact(paths.of(cfg).target_dir(), "target", "evaluate", paths.of(cfg))
