"""`make bench` end to end at tiny sizes: every figure is produced and written as JSON."""

from __future__ import annotations

import json
import math

import pytest

from adaspec.commands import bench
from adaspec.diagnostics.checks import expected_speedup
from adaspec.errors import UserError
from tests.conftest import TINY


def test_bench_writes_decoding_and_training_figures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    payload = bench.main(
        ["--name", "t", "--models", "tiny", "--prompts", "2", "--max-new-tokens", "8", "--train-steps", "2",
         "--threads", "1", *TINY, f"paths.root={tmp_path / 'outputs'}"]
    )
    written = json.loads((tmp_path / "bench" / "results" / "t.json").read_text())
    assert written == json.loads(json.dumps(payload))
    row = written["decoding"][0]
    for key in ("target_only/tokens_per_s", "speculative/tokens_per_s", "hf_assisted/tokens_per_s",
                "speedup_vs_target", "speedup_vs_hf_assisted", "theoretical_speedup", "cost_ratio_c"):
        assert row[key] > 0 and math.isfinite(row[key]), key
    assert 0 <= row["alpha"] <= 1 and row["greedy_mismatches"] == 0
    train = written["training"][0]
    for key in ("live/step_s", "cached/step_s", "cached_ref_kl/step_s", "plain_ce/step_s", "sweep5/speedup"):
        assert train[key] > 0, key


def test_the_theoretical_speedup_is_the_expected_speedup_formula():
    assert expected_speedup(0.0, 5, 0.1) == 1 / 1.5
    assert math.isclose(expected_speedup(0.8, 4, 0.05), (1 - 0.8**5) / (0.2 * 1.2))
    assert expected_speedup(1.0, 3, 0.0) == 4


def test_bench_takes_flags_and_passes_key_value_arguments_to_hydra():
    args = bench.parse_args(["--models", "tiny,small", "--no-training", "task.arith.n_train=100", "seed=3"])
    assert args.models == ["tiny", "small"] and not args.training and args.gamma == 5
    assert args.overrides == ["task.arith.n_train=100", "seed=3"]
    with pytest.raises(UserError, match=r"'prompts=2'.*--prompts VALUE"):
        bench.parse_args(["prompts=2"])  # the key=value form bench took before
    with pytest.raises(UserError, match="--no-training"):
        bench.parse_args(["training=false"])
