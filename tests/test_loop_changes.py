"""experiments/smollm2/loop_changes.py on a tiny trained pair: one bench-real run per target serving, each with its
own same-serving speed-up, the table against the first serving, and the machine's state per run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from adaspec.pipeline import run_stage
from tests.conftest import TINY

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "smollm2" / "loop_changes.py"


def load_script():
    spec = importlib.util.spec_from_file_location("loop_changes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_serving_is_one_run_against_its_own_target_only_decoding(tiny_trained, tmp_path, monkeypatch):
    cfg = tiny_trained("stage=draft", "k=0.4")
    run_stage(cfg)
    monkeypatch.chdir(tmp_path)  # each run's bench-real JSON goes to outputs/bench/loop-changes/ under it
    out = tmp_path / "loop"
    result = load_script().main(["--prompts", "2", "--gamma", "2", "--max-new-tokens", "8", "--threads", "1",
                                 "--servings", "float32,float32-static,bfloat16", "--out", str(out),
                                 *TINY, f"paths.root={cfg.paths.root}"])
    assert [r["serving"] for r in result["runs"]] == ["float32", "float32-static", "bfloat16"]
    for run in result["runs"]:
        own = json.loads((tmp_path / "outputs/bench/loop-changes" / f"{run['serving']}.json").read_text())
        row = next(r for r in own["rows"] if r["draft"] == "trained")
        assert own["serving"] == {"target": run["serving"], "draft_dtype": "float32", "target_only": [run["serving"]]}
        assert {r["draft"] for r in own["rows"]} == {"trained"}  # no baselines: one draft, one gamma
        assert run["speedup_vs_same_serving"] == row["speedup_vs_same_serving"] == row["speedup_vs_target"]
        assert run["contention"]["why"] and run["verify_ms"] > 0
    assert result["runs"][0]["greedy_mismatches"] == result["runs"][1]["greedy_mismatches"] == 0  # float32: exact
    table = out.with_suffix(".md").read_text().splitlines()
    assert len(table) == 2 + 3 and "| 1.00x |" in table[2]  # the first serving against itself
