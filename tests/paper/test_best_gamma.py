"""experiments/smollm2/best_gamma.py: per seed, the gamma whose expected speed-up (from the evaluation's own
call costs) is highest, and the mean over seeds; a result without call costs names the --costs fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "experiments" / "smollm2" / "best_gamma.py"
AMD = {"cpu": "AMD EPYC", "amx": False}
COSTS = {"draft_1_s": {"k0.4": 0.1}, "target_1_s": 1.0, "target_verify_s": {"1": 1.0, "2": 1.0}}


def write_seed(folder: Path, seed: int, taus: dict[str, float], costs: dict | None = COSTS,
               machine: dict | None = None) -> None:
    draft = {"label": "AdaSPEC k=0.4", "speedup_vs_target": 0.9,
             "acceptance_vs_gamma": {"by_gamma": {g: {"tau": t} for g, t in taus.items()}}}
    results = {"drafts": {"k0.4": draft}, "machine": machine or AMD} | ({"costs": costs} if costs else {})
    (folder / f"seed{seed}").mkdir(parents=True)
    (folder / f"seed{seed}" / "main.json").write_text(json.dumps(results))


def run(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(folder)], cwd=REPO, capture_output=True, text=True)


def test_the_best_gamma_is_picked_per_seed_and_averaged(tmp_path):
    # seed 0: 1.5 / 1.1 = 1.364 at gamma 1 < 1.9 / 1.2 = 1.583 at gamma 2; seed 1: 1.364 > 1.6 / 1.2 = 1.333
    write_seed(tmp_path, 0, {"1": 1.5, "2": 1.9})
    write_seed(tmp_path, 1, {"1": 1.5, "2": 1.6})
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    table = json.loads((tmp_path / "best_gamma.json").read_text())
    draft = table["drafts"]["k0.4"]
    assert table["seeds"] == ["seed0", "seed1"]
    assert draft["best_gamma"] == [2, 1]
    assert draft["expected_speedup_at_best_gamma"]["mean"] == pytest.approx((1.9 / 1.2 + 1.5 / 1.1) / 2)
    assert "1: 1, 2: 1" in (tmp_path / "best_gamma.md").read_text()
    assert table["mixed_machines"] is None  # both seeds timed on one recorded CPU


def test_costs_from_another_cpu_are_marked(tmp_path):
    write_seed(tmp_path, 0, {"1": 1.5, "2": 1.9})
    costs = tmp_path / "bench.json"
    costs.write_text(json.dumps({"costs": COSTS, "machine": {"cpu": "Intel Xeon", "amx": True}}))
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--costs", str(costs)], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    mixed = json.loads((tmp_path / "best_gamma.json").read_text())["mixed_machines"]
    assert "seed0 on AMD EPYC (no AMX)" in mixed and f"{costs} on Intel Xeon (AMX)" in mixed
    assert "**Mixed machines**" in (tmp_path / "best_gamma.md").read_text()


def test_results_without_call_costs_name_the_option(tmp_path):
    write_seed(tmp_path, 0, {"1": 1.5}, costs=None)
    done = run(tmp_path)
    assert done.returncode != 0 and "--costs" in done.stderr
    assert not (tmp_path / "best_gamma.json").exists()
