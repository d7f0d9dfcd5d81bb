"""Issue 30 (4): experiments/smollm2/capacity_drafts.sh trains only what capacity_serving.sh times (each size's
stage 0, forward-KL reference and forward-KL drafts, taken from the paper plan), and capacity_serving.sh benches
every finished one, falling back to demo-real's heads when the capacity experiment has none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "experiments" / "smollm2"


def run(script: str, *args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    environment = os.environ | {"DRY_RUN": "1", "PYTHON": sys.executable} | env  # PYTHONPATH: tests/conftest.py
    return subprocess.run(["bash", str(SCRIPTS / script), *args], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=600)


def test_capacity_drafts_takes_the_forward_kl_steps_of_the_plan_and_resumes_each_training():
    result = run("capacity_drafts.sh", "3", "h256")
    assert result.returncode == 0, result.stderr
    steps = result.stdout.splitlines()
    trained = [s for s in steps if "commands.train" in s]
    assert [s.split(" stage=")[1].split()[0] for s in trained] == ["target", "pretrain_draft", "ref", "draft", "draft"]
    assert all(s.endswith(" resume=true") for s in trained)
    drafts = [s for s in trained if "stage=draft" in s]
    assert [s.split(" k=")[1].split()[0] for s in drafts] == ["0.4", "1"]
    sized = [s for s in trained if "stage=target" not in s]
    assert all("model.draft_name=h256x6" in s and "seed=3" in s for s in sized)
    assert all("paper=smollm2_gsm8k_capacity " in s for s in sized)  # never the _nla / _lk arms
    assert not any("commands.evaluate" in s for s in steps)
    assert any(s.startswith("python -m adaspec.commands.cache paper=smollm2_gsm8k_capacity") for s in steps)

    only_distillspec = run("capacity_drafts.sh", "3", "h256", KS="1").stdout.splitlines()
    assert only_distillspec == [s for s in steps if " k=0.4 " not in s]


def test_capacity_drafts_names_the_sizes_when_given_one_the_plan_lacks():
    result = run("capacity_drafts.sh", "0", "h512")
    assert result.returncode == 2
    assert "no size h512 in the plan; sizes: h128 h256 h384" in result.stderr
    assert result.stdout == ""


def test_a_planner_that_fails_stops_capacity_drafts_with_its_own_status(tmp_path):
    """Not taken for a size the plan lacks (the planner here is a program that exits 3)."""
    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho planner failed >&2\nexit 3\n")
    failing.chmod(0o755)
    result = run("capacity_drafts.sh", "0", "h256", PYTHON=str(failing))
    assert result.returncode == 3 and "planner failed" in result.stderr and "no size" not in result.stderr


def finished(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text("{}")


def test_capacity_serving_benches_every_finished_draft_and_demo_reals_heads_when_the_capacity_run_has_none(tmp_path):
    seed0 = tmp_path / "outputs/capacity-real/gsm8k/smollm2/seed0"
    finished(seed0 / "draft-k1-target-answers/final")
    finished(seed0 / "draft-k0.4-target-answers/final")
    finished(seed0 / "draft-k1-h384x8-target-answers/final")
    (seed0 / "draft-k0.4-h256x6-target-answers/final").mkdir(parents=True)  # interrupted: no meta.json
    demo = tmp_path / "outputs/gsm8k/smollm2/seed0"
    finished(demo / "draft-k0.4-eagle3-target-answers/final")
    finished(demo / "ref-eagle3-target-answers/final")

    command = run("capacity_serving.sh", "0", "2", "--draft-dtype", "bfloat16", cwd=tmp_path, KS="1").stdout.split()
    drafts = [command[i + 1].split("=")[0] for i, word in enumerate(command) if word == "--draft"]
    assert drafts == ["h128-k1", "h384-k1", "demo-real-head-k0.4", "demo-real-head-k1"]
    assert f"demo-real-head-k1={demo.relative_to(tmp_path)}/ref-eagle3-target-answers/final" in command
    assert command[command.index("--name") + 1] == "capacity-seed0-g2" and command[command.index("--gammas") + 1] == "2"
    assert command.index("--draft-dtype") < command.index("paper=smollm2_gsm8k_capacity")
    assert command[-2:] == ["seed=0", "baseline=[prompt_lookup]"]  # prompt lookup: a row of its own

    everything = run("capacity_serving.sh", "0", cwd=tmp_path).stdout.split()
    assert "h128-k0.4=" + str(seed0.relative_to(tmp_path) / "draft-k0.4-target-answers/final") in everything
    finished(seed0 / "draft-k0.4-eagle3-target-answers/final")  # the capacity run's own head comes first
    own = run("capacity_serving.sh", "0", cwd=tmp_path).stdout
    assert "head-k0.4=" in own and "demo-real-head" not in own


def test_capacity_serving_says_what_to_run_when_nothing_is_finished(tmp_path):
    result = run("capacity_serving.sh", "0", cwd=tmp_path)
    assert result.returncode == 1
    assert "run experiments/smollm2/capacity_drafts.sh 0" in result.stderr
