"""Learning curves (`python -m adaspec.commands.curves`, `make head-convergence`) read from a real stage's log: every
validation during training at the steps it followed, the monitor's readings, the saved weights' final validation
left out, and where a curve settles."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from adaspec.artefacts import paths
from adaspec.commands.curves import main as curves_main
from adaspec.commands.curves import parse_run
from adaspec.config.rules import validate
from adaspec.diagnostics.training_curves import drawn_curves, plot_training_curves, read_curves, settled_step
from adaspec.training.pipeline import run_stage


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, tiny_upstream_root):
    """A tiny stage 3 that validates every 2 steps, measures acceptance every 4, and stops early (absurd lr)."""
    import shutil

    from tests.conftest import TINY, compose_config

    root = tmp_path_factory.mktemp("curves") / "outputs"
    shutil.copytree(tiny_upstream_root, root)
    cfg = validate(compose_config(*TINY, f"paths.root={root}", "stage=draft", "k=0.4", "stage.lr=0.5",
                                  "stage.warmup_frac=0", "stage.max_epochs=6", "stage.max_steps=-1",
                                  "stage.val_every_n_steps=2", "stage.early_stop_patience=2",
                                  "stage.monitor_every_n_steps=4", "stage.monitor_prompts=2"))
    run_stage(cfg)
    return paths.of(cfg).draft_dir()


def test_validations_sit_at_the_steps_they_followed_and_the_final_one_is_left_out(stopped_run):
    metrics = json.loads((paths.final(stopped_run) / "metrics.json").read_text())
    curves = read_curves(stopped_run, finished=True)
    steps = [step for step, _ in curves["val/kl"]]
    assert steps == list(range(2, metrics["steps"] + 1, 2))  # every 2 optimiser steps, up to where it stopped
    best_step, best = min(curves["val/kl"], key=lambda p: p[1])
    assert metrics["early_stop/best_step"] == best_step and metrics["early_stop/best_val_kl"] == best
    assert curves["val/kl"][-1][1] > best  # the run went on after its best: the last point is not the kept weights'
    # negative control: read as unfinished, the saved weights' validation (the best KL again) ends the curve
    unfinished = read_curves(stopped_run, finished=False)["val/kl"]
    assert unfinished[:-1] == curves["val/kl"] and unfinished[-1][1] == pytest.approx(best)
    alphas = curves["monitor/alpha"]
    assert [s for s, _ in alphas][:-1] == list(range(4, metrics["steps"] + 1, 4)) and alphas[-1][0] == metrics["steps"]
    assert all(0 <= a <= 1 for _, a in alphas)


def test_settled_step_is_the_first_within_the_share_of_the_best():
    kl = [[10, 9.0], [20, 6.0], [30, 5.05], [40, 5.0], [50, 5.2]]
    assert settled_step(kl, higher_is_better=False, share=0.02) == 30
    assert settled_step(kl, higher_is_better=False, share=0.0) == 40  # control: no tolerance, the best itself
    assert settled_step([[10, 0.3], [20, 0.5], [30, 0.49]], higher_is_better=True, share=0.05) == 20
    assert settled_step([], higher_is_better=True) is None


def test_the_command_writes_json_and_png_and_names_a_missing_log(stopped_run, tmp_path, capsys):
    curves_main(["--run", f"tiny={stopped_run}", "--out", str(tmp_path / "out")])
    payload = json.loads((tmp_path / "out" / "curves.json").read_text())
    assert payload["runs"]["tiny"]["finished"] and payload["runs"]["tiny"]["curves"]["val/kl"]
    assert (tmp_path / "out" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = tmp_path / "nowhere"
    done = subprocess.run([sys.executable, "-m", "adaspec.commands.curves", "--run", f"x={missing}",
                           "--out", str(tmp_path / "out2")], capture_output=True, text=True)
    assert done.returncode == 2 and not (tmp_path / "out2").exists()
    assert done.stderr.strip().splitlines() == [
        f"error: --run 'x={missing}': {missing / 'logs' / 'metrics.csv'} does not exist; train the stage first"]


def test_a_label_may_carry_an_equals_sign(tmp_path):
    """`--run "AdaSPEC k=0.4=FOLDER"`: the folder follows the last `=`; split at the first, it would be `0.4=FOLDER`."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.csv").write_text("epoch,step\n")
    assert parse_run(f"AdaSPEC k=0.4={tmp_path}") == ("AdaSPEC k=0.4", tmp_path)


def test_a_panel_only_for_the_curves_some_run_logged(tmp_path):
    without_monitor = {"curves": {"val/kl": [[80, 4.6], [160, 3.7]], "monitor/alpha": []}}
    with_monitor = {"curves": {"val/kl": [[20, 9.2]], "monitor/alpha": [[50, 0.49]]}}
    assert drawn_curves({"a": without_monitor}) == ["val/kl"]
    assert drawn_curves({"a": without_monitor, "b": with_monitor}) == ["val/kl", "monitor/alpha"]
    assert drawn_curves({"a": {"curves": {"val/kl": [], "monitor/alpha": []}}}) == ["val/kl"]
    for runs in ({"a": without_monitor}, {"a": without_monitor, "b": with_monitor}):
        assert plot_training_curves(runs, "t", tmp_path / f"{len(runs)}.png").stat().st_size > 0
