"""The machine a timing was measured on: its CPU's model and whether it has AMX, beside the platform and threads.

This project's machines vary between sessions (Intel Sapphire Rapids with AMX on some days, AMD EPYC with
AVX-512 BF16 and no AMX on others) and a bfloat16 forward's cost differs several-fold between them, so every
benchmark JSON and every evaluation's results.json names the CPU, and timings recorded on another CPU are marked
when they are shown beside this machine's.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch


def cpu_model() -> dict[str, Any]:
    """The CPU's model name and its AMX and AVX-512 BF16 flags (None where /proc/cpuinfo is missing)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {"cpu": platform.processor() or "unknown", "amx": None, "avx512_bf16": None}
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "unknown")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return {"cpu": name, "amx": "amx_tile" in flags, "avx512_bf16": "avx512_bf16" in flags}


def describe_machine() -> dict[str, Any]:
    """What a benchmark JSON records of the machine it ran on."""
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), **cpu_model()}


def cpu_name(machine: dict[str, Any] | None) -> str:
    """`AMD EPYC (no AMX)`; `an unrecorded CPU` for results written before the CPU was recorded."""
    if not machine or not machine.get("cpu"):
        return "an unrecorded CPU"
    amx = {True: "AMX", False: "no AMX"}.get(machine.get("amx"), "AMX unknown")
    return f"{machine['cpu']} ({amx})"


def same_cpu(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Both recorded, with the same CPU model and AMX."""
    return bool(a and b and a.get("cpu") and a.get("cpu") == b.get("cpu") and a.get("amx") == b.get("amx"))


def mixed_cpus(machines: dict[str, dict[str, Any] | None]) -> str | None:
    """A line marking a comparison of timings from several runs (`machines`: each run's name and recorded
    machine) when they were not all measured on one recorded CPU; None when they were."""
    first = next(iter(machines.values()), None)
    if all(same_cpu(first, m) for m in machines.values()):
        return None
    return "timings from different or unrecorded CPUs: " + "; ".join(
        f"{name} on {cpu_name(m)}" for name, m in machines.items())


def other_cpu(recorded: dict[str, Any] | None) -> str | None:
    """A line saying that timings `recorded` on another CPU (or an unrecorded one) are not this machine's; None
    when they were measured on this CPU."""
    here = cpu_model()
    if same_cpu(recorded, here):
        return None
    return (f"timed on {cpu_name(recorded)}, not on this machine's {cpu_name(here)}: compare its timings only with "
            f"timings of that CPU")
