"""`make bench-costs` on a tiny Llama: the cost curve's JSON (every configuration, every n, intervals around
medians, the floor), and the contention guard, which refuses a run made beside a busy process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from adaspec.commands import bench_costs
from adaspec.evaluation import contention
from tests.decoding.test_serving import tiny_llama

ARGS = ["--servings", "float32,bfloat16,float32-static,bfloat16-int8", "--threads", "1", "--ns", "1,2,4", "--repeats", "3",
        "--context", "16", "--no-draft", "--name", "tiny"]


@pytest.fixture(scope="module")
def target_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("target")
    tiny_llama(0, init_std=0.5).save_pretrained(folder)
    return folder


def run(folder, tmp_path, monkeypatch, *extra):
    monkeypatch.chdir(tmp_path)  # contended runs land in outputs/bench/ under the working directory
    try:
        return bench_costs.main([*ARGS, "--target", str(folder), "--out", str(tmp_path / "results"), *extra]), 0
    except SystemExit as stop:
        return json.loads((tmp_path / "outputs/bench/costs-tiny.json").read_text()), stop.code


def test_the_cost_curve_has_every_configuration_and_point(target_folder, tmp_path, monkeypatch):
    payload, code = run(target_folder, tmp_path, monkeypatch)
    written = tmp_path / ("outputs/bench" if payload["contention"]["contended"] else "results") / "costs-tiny.json"
    assert json.loads(written.read_text())["curves"] == json.loads(json.dumps(payload["curves"]))
    assert written.with_suffix(".png").stat().st_size > 0
    assert code == (bench_costs.EXIT_CONTENDED if payload["contention"]["contended"] else 0)
    assert set(payload["curves"]) == {"target/float32/t1", "target/bfloat16/t1", "target/float32-static/t1",
                                      "target/bfloat16-int8/t1"}
    for name, curve in payload["curves"].items():
        assert set(curve["points"]) == {"1", "2", "4"}
        assert curve["serving"] == name.split("/")[1] and curve["threads"] == 1
        assert curve["points"]["1"]["relative_to_1"] == 1.0
        for point in curve["points"].values():
            assert point["low_s"] <= point["median_s"] <= point["high_s"] and point["repeats"] == 3
    params = payload["target_parameters"]
    assert payload["curves"]["target/bfloat16/t1"]["weight_bytes"] == 2 * params
    int8_bytes = payload["curves"]["target/bfloat16-int8/t1"]["weight_bytes"]  # embeddings stay bfloat16
    assert params < int8_bytes < 2 * params
    assert payload["bandwidth_floor_s"]["int8 weights"] == pytest.approx(payload["bandwidth_floor_s"]["bfloat16"] / 2)
    assert payload["bandwidth_floor_s"]["float32"] == pytest.approx(2 * payload["bandwidth_floor_s"]["bfloat16"])
    assert payload["bandwidth_floor_s"]["float32"] == pytest.approx(4 * params / payload["read_bandwidth_gbs"] / 1e9)


def test_a_run_beside_a_busy_process_is_refused_as_a_result(target_folder, tmp_path, monkeypatch):
    busy = subprocess.Popen([sys.executable, "-c", "print('spinning', flush=True)\nwhile True: pass"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline().strip() == "spinning"  # the loop has begun before the run's watch starts
        payload, code = run(target_folder, tmp_path, monkeypatch)
    finally:
        busy.kill()
        busy.wait()
    assert code == bench_costs.EXIT_CONTENDED
    assert payload["contention"]["contended"] and "other processes used" in payload["contention"]["why"]
    assert not (tmp_path / "results" / "costs-tiny.json").exists()


def test_the_guard_judges_a_drifting_kernel_and_busy_cores():
    quiet = contention.Reading(others_cores=0.0, kernel_s=0.010, load_average=0.1)
    assert not contention.judge(quiet, quiet).contended
    slower = contention.Reading(others_cores=0.0, kernel_s=0.015, load_average=0.1)
    assert "1.50x" in contention.judge(quiet, slower).why
    busy = contention.Reading(others_cores=1.0, kernel_s=0.010, load_average=2.0)
    assert "1.00 cores before" in contention.judge(busy, quiet).why


def test_bad_servings_are_one_line(target_folder, tmp_path, monkeypatch):
    from adaspec.errors import UserError

    with pytest.raises(UserError, match="--servings: .*expected <dtype>"):
        run(target_folder, tmp_path, monkeypatch, "--servings", "float32-fast")
