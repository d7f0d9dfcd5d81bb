"""Command-line mistakes: one line on stderr naming the key and the closest allowed names, exit status 2,
nothing written (adaspec.cli.hydra_entry)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException, OverrideParseException

from adaspec.cli import composition_error
from adaspec.config.schema import Selection
from tests.conftest import REPO, compose_config

pytestmark = pytest.mark.chaos("bad-input")


def run_entry(module: str, *overrides: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def error_of(*overrides: str) -> str:
    with pytest.raises((ConfigCompositionException, OverrideParseException)) as info:
        compose_config(*overrides)
    return composition_error(info.value)


@pytest.mark.parametrize(
    "override, line",
    [
        ("stgae=ref", "unknown config key `stgae`; did you mean `stage`? (allowed: "),
        ("stage.lrr=1e-3", "unknown config key `stage.lrr`; did you mean `stage.lr`? (allowed: name, lr, "),
        ("task.domain.digit_weigth=1", "did you mean `task.domain.digit_weight`?"),
        ("papr=gsm8k", "unknown config key `papr`; did you mean `paper`?"),
        (
            "stage=reff",
            "no config `stage=reff` in config group `stage`; did you mean `stage=ref`? (options: draft, ",
        ),
        ("paper=gsm", "did you mean `paper=gsm8k`? (options: gsm8k, gsm8k_matched, mbpp"),
        (
            "distill.selection=glob",
            f"config key `distill.selection`='glob' is invalid: must be one of {', '.join(Selection)}; "
            "did you mean `distill.selection=global`?",
        ),
        ("stage.lr=fast", "config key `stage.lr`='fast' is invalid: Value 'fast' of type 'str' could not be"),
        ("k=[", "cannot read the override `k=[`"),
    ],
)
def test_composition_errors_become_one_line(override, line):
    message = error_of(override)
    assert line in message and "\n" not in message


def test_unknown_key_without_a_close_match_lists_the_allowed_keys():
    message = error_of("stage.zzzz=1")
    assert "did you mean" not in message and "(allowed: name, lr, weight_decay" in message


def test_schemas_are_not_offered_as_group_options():
    assert "stage_schema" not in error_of("stage=reff")


def test_misspelt_group_at_the_entry_point_is_one_line_naming_it(tmp_path):
    proc = run_entry("adaspec.commands.train", "stgae=ref", f"paths.root={tmp_path / 'out'}")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: unknown config key `stgae`; did you mean `stage`?")
    assert not (tmp_path / "out").exists()


def test_misspelt_key_in_a_group_at_the_entry_point(tmp_path):
    proc = run_entry("adaspec.commands.train", "stage.lrr=1e-3", f"paths.root={tmp_path / 'out'}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: unknown config key `stage.lrr`; did you mean `stage.lr`? (allowed: name, lr, weight_decay, "
        "batch_size, max_epochs, max_steps, warmup_frac, min_lr_ratio, decay_end_frac, gradient_clip_val, "
        "accumulate_grad_batches, val_every_n_steps, checkpoint_every_n_steps, monitor_every_n_steps, "
        "monitor_prompts, tag, early_stop_patience, group_by_length)"
    ]


def test_bad_choice_at_the_evaluate_entry_point_names_the_allowed_values(tmp_path):
    proc = run_entry("adaspec.commands.evaluate", "distill.selection=glob", f"paths.root={tmp_path / 'out'}")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert f"`distill.selection`='glob' is invalid: must be one of {', '.join(Selection)};" in line


@pytest.mark.parametrize(
    "override, key",
    [
        ("trainer.devices=0", "`trainer.devices`=0"),
        ("gamma=100", "`gamma`=100 is invalid: must be an integer in 1..32"),
        ("model.draft.hidden_size=-4", "`model.draft.hidden_size`=-4"),
    ],
)
def test_bad_values_are_refused_before_anything_is_written(tmp_path, override, key):
    root = tmp_path / "outputs"
    proc = run_entry("adaspec.commands.train", "stage=ref", override, f"paths.root={root}")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: config key {key}")
    assert not root.exists(), "no stage folder and no Hydra log folder for a config that is not valid"


def test_hydra_full_error_keeps_hydras_own_report(tmp_path):
    proc = run_entry(
        "adaspec.commands.train", "stage.lrr=1e-3", f"paths.root={tmp_path}", env={"HYDRA_FULL_ERROR": "1"}
    )
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "Could not override 'stage.lrr'" in proc.stderr
