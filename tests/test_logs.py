"""A stage's log as a newcomer reads it: every Lightning message once, no advertisement, no deprecation noise."""

from __future__ import annotations

import collections
import os
import subprocess
import sys

from tests.conftest import REPO, TINY


def test_a_stage_prints_each_lightning_message_once_and_no_advertisement(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    run = subprocess.run(
        [sys.executable, "-m", "adaspec.commands.train", "stage=target", *TINY, f"paths.root={tmp_path / 'outputs'}",
         "trainer.enable_progress_bar=false"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = (run.stdout + run.stderr).splitlines()
    # Hydra's format: "[time][logger][LEVEL] - message"; Lightning's own handler printed "INFO: message"
    messages = [line.split("] - ", 1)[1] for line in lines if "][lightning" in line and "] - " in line]
    assert any("GPU available" in m for m in messages)  # Lightning's messages still reach the log ...
    repeated = [m for m, n in collections.Counter(messages).items() if n > 1 and "weights_only" not in m]
    assert not repeated and not [line for line in lines if line.startswith("INFO: ")]  # ... once each
    text = "\n".join(lines)
    assert "litlogger" not in text and "LeafSpec" not in text
    assert "Loading weights" not in text and "Writing model shards" not in text
