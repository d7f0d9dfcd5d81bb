"""Every timing names its CPU (adaspec.machine), and timings of different or unrecorded CPUs are marked when
shown together."""

from __future__ import annotations

from adaspec.machine import cpu_model, cpu_name, describe_machine, mixed_cpus, other_cpu, same_cpu

HERE = cpu_model()
ELSEWHERE = {"cpu": "Intel(R) Xeon(R) Platinum 8480+", "amx": True, "avx512_bf16": True}


def test_a_benchmark_names_the_cpu_and_its_bfloat16_units():
    machine = describe_machine()
    assert machine["cpu"] == HERE["cpu"] and machine["threads"] >= 1
    assert isinstance(machine["amx"], bool) and isinstance(machine["avx512_bf16"], bool)
    assert cpu_name(machine).startswith(HERE["cpu"]) and cpu_name(None) == "an unrecorded CPU"
    assert cpu_name(ELSEWHERE) == "Intel(R) Xeon(R) Platinum 8480+ (AMX)"


def test_timings_of_another_or_an_unrecorded_cpu_are_marked():
    assert other_cpu(describe_machine()) is None
    other = {**HERE, "cpu": ELSEWHERE["cpu"]}
    assert other_cpu(other).startswith(f"timed on {cpu_name(other)}, not on this machine's {cpu_name(HERE)}")
    assert "an unrecorded CPU" in other_cpu(None) and other_cpu({"platform": "Linux"}) is not None
    assert other_cpu({**HERE, "amx": not HERE["amx"]}) is not None  # the same name, other units: not comparable


def test_a_comparison_across_runs_is_marked_unless_one_recorded_cpu_timed_them_all():
    assert not same_cpu(None, None) and same_cpu(HERE, dict(HERE))
    assert mixed_cpus({"seed0": HERE, "costs.json": dict(HERE)}) is None
    line = mixed_cpus({"seed0": HERE, "costs.json": ELSEWHERE, "old.json": None})
    assert line.startswith("timings from different or unrecorded CPUs: seed0 on")
    assert f"costs.json on {cpu_name(ELSEWHERE)}" in line and "old.json on an unrecorded CPU" in line
