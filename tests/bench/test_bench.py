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
    for key in ("target_only/tokens_per_s", "hf_assisted/tokens_per_s", "cost_ratio_c"):
        assert row[key] > 0 and math.isfinite(row[key]), key  # measured: no value is known in advance
    assert 0 <= row["alpha"] <= 1 and row["greedy_mismatches"] == 0 and row["gamma"] == 5
    # greedy and exact, so every method emitted the same tokens: speed-ups are ratios of the rates
    assert row["speedup_vs_target"] == pytest.approx(row["speculative/tokens_per_s"] / row["target_only/tokens_per_s"])
    assert row["speedup_vs_hf_assisted"] == pytest.approx(row["speculative/tokens_per_s"] / row["hf_assisted/tokens_per_s"])
    alpha, c = row["alpha"], row["cost_ratio_c"]  # Leviathan's formula, written out
    tokens = (1 - alpha**6) / (1 - alpha) if alpha < 1 else 6
    assert row["theoretical_speedup"] == pytest.approx(tokens / (5 * c + 1))
    assert row["speedup_share_of_theory"] == pytest.approx(row["speedup_vs_target"] / row["theoretical_speedup"])
    train = written["training"][0]
    assert train["plain_ce/step_s"] > 0
    for name in ("live", "cached", "cached_ref_kl"):
        assert train[f"{name}/cost_vs_plain_ce"] == pytest.approx(train[f"{name}/step_s"] / train["plain_ce/step_s"])
    assert train["sweep5/live_s"] == pytest.approx(5 * train["sweep5/steps_each"] * train["live/step_s"])
    assert train["sweep5/speedup"] == pytest.approx(train["sweep5/live_s"] / train["sweep5/cached_s"])


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
