"""Issue 50 (1, 4): `make serve-check` on the tiny pipeline: an EAGLE-3 head exported without its embedding copy
is loaded and served by vLLM's CPU build (built in .cache/vllm-venv on first use), with outputs equal to the
target's greedy decoding. Slow: vLLM's start-up alone takes about a minute on two cores."""

from __future__ import annotations

import json

import pytest

from adaspec.artefacts import paths
from adaspec.errors import UserError
from adaspec.training.pipeline import run_stage

# 8 layers: EAGLE-3's layers 2, N/2 and N-3 are distinct, as vLLM requires; a Llama target, as vLLM's EAGLE-3 wants;
# heads 64 wide: vLLM's CPU attention has no kernel for the tiny default's 16
TARGET = ["model.target.num_hidden_layers=8", "model.target.architecture=llama", "model.target.hidden_size=128",
          "model.target.intermediate_size=256"]
HEAD = ["model.draft_kind=eagle3", "stage.max_steps=20", "stage.monitor_every_n_steps=0", "pretrain=none", *TARGET]


@pytest.fixture
def tiny_head(tiny_cfg):
    """The config of a tiny target and its reference head, trained; skipped with vLLM's one line where its CPU build
    cannot be installed."""
    from adaspec.vllm_serving.venv import vllm_python

    try:
        vllm_python()
    except UserError as error:
        pytest.skip(str(error))
    run_stage(tiny_cfg("stage=target", "stage.max_steps=30", *TARGET))
    cfg = tiny_cfg("stage=ref", *HEAD)
    run_stage(cfg)
    return cfg


@pytest.mark.slow
def test_vllm_serves_the_exported_head_and_decodes_as_the_target(tiny_head, tmp_path):
    from adaspec.commands import serve_check

    cfg = tiny_head
    figures = tmp_path / "serve-check.json"
    status = serve_check.main(["--draft", str(paths.final(paths.of(cfg).ref_dir())), "--prompts", "4", "--gamma", "3",
                               "--max-new-tokens", "24", "--json", str(figures)])
    checked = json.loads(figures.read_text())
    assert checked["outputs_equal"] == 4  # vLLM's greedy outputs are the target's, prompt by prompt
    assert checked["vllm_counts"]["drafts"] > 0 and len(checked["vllm_counts"]["accepted_per_position"]) == 3
    assert status == (0 if checked["comparison"]["within_tolerance"] else 1)


@pytest.mark.slow
def test_bench_real_times_vllm_plain_and_with_the_head_against_the_same_target_only_run(tiny_head, tmp_path):
    from adaspec.commands import bench_real
    from tests.conftest import TINY

    cfg = tiny_head
    payload = bench_real.main(["--vllm", "--vllm-gammas", "2", "--prompts", "2", "--max-new-tokens", "12",
                               "--gammas", "2", "--temperatures", "0", "--no-adaptive", "--threads", "1",
                               "--out", str(tmp_path), "--draft", str(paths.final(paths.of(cfg).ref_dir())), *TINY,
                               f"paths.root={cfg.paths.root}", *HEAD])
    vllm = {(r["draft"], r["policy"]): r for r in payload["rows"] if r["draft"].startswith("vllm-")}
    assert set(vllm) == {(f"vllm-{d}", p) for d in ("float32", "bfloat16") for p in ("plain", "eagle3 fixed-2")}
    fastest = next(r for r in payload["rows"] if r["draft"] == "trained")["target_only/tokens_per_s"]
    for row in vllm.values():
        assert row["speedup_vs_target"] == pytest.approx(row["tokens_per_s"] / fastest)
        assert row["speedup_vs_target_95"][0] <= row["speedup_vs_target_95"][1]
    assert vllm[("vllm-float32", "plain")]["greedy_mismatches"] == 0
    assert vllm[("vllm-float32", "eagle3 fixed-2")]["vllm_counts"]["drafts"] > 0


def test_serve_check_refuses_a_folder_and_overrides_together_and_a_missing_head_in_one_line(tmp_path):
    from adaspec.commands import serve_check

    with pytest.raises(UserError, match="either --draft FOLDER or the overrides"):
        serve_check.main(["--draft", str(tmp_path), "model=smollm2"])
    with pytest.raises(UserError, match=f"no trained head in {tmp_path}"):
        serve_check.main(["--draft", str(tmp_path)])
