"""Is the machine busy? A guard around a timing run, so figures measured beside another job are never recorded.

`make bench-costs` reads two signals before and after the run: the CPU time other processes used during a
short window (in cores, from /proc), and a reference kernel (a fixed float32 matmul chain at the run's
threads) whose time must not drift. Either one over its limit marks the run as contended. On a machine without /proc the first
signal is missing (None) and the kernel alone decides.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

OTHERS_MAX_CORES = 0.25  # other processes may use at most this many cores in a window
# The kernel runs for a fixed time, not a fixed count: 25 calls (0.25 s) are too few to ride out the noise.
WARMUP_S, KERNEL_S = 0.5, 2.0
# The reference kernel may be at most this much slower (or faster) after the run. On this project's idle VM
# its median drifts 0.85-1.18x between two 2-second windows (hypervisor noise), while a second heavy process
# on the two cores slows it 2x or more; the other processes' CPU time is the finer signal.
KERNEL_MAX_DRIFT = 1.3


def _process_cpu_seconds(skip: int) -> float | None:
    """Total user + system CPU seconds of every process but `skip`, from /proc/<pid>/stat."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == skip:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def other_processes_cores(window_s: float = 1.0) -> float | None:
    """Cores that other processes kept busy over the next `window_s` seconds (None without /proc)."""
    before = _process_cpu_seconds(os.getpid())
    if before is None:
        return None
    time.sleep(window_s)
    after = _process_cpu_seconds(os.getpid())
    return max(0.0, (after - before) / window_s)


def reference_kernel_seconds(warmup_s: float = WARMUP_S, measure_s: float = KERNEL_S) -> float:
    """Median seconds of a fixed float32 matmul chain (about 10 ms on this project's 2-core machine), over
    `measure_s` seconds of calls after `warmup_s` seconds of untimed ones, at the current torch threads."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(384, 384, generator=gen), torch.randn(384, 384, generator=gen)
    times: list[float] = []
    warm_until = time.perf_counter() + warmup_s
    while not times or sum(times) < measure_s:
        started = time.perf_counter()
        x = a
        for _ in range(20):
            x = torch.tanh(x @ b)
        if started >= warm_until:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


@dataclass
class Reading:
    others_cores: float | None
    kernel_s: float
    load_average: float


def read() -> Reading:
    return Reading(other_processes_cores(), reference_kernel_seconds(), os.getloadavg()[0])


@dataclass
class Verdict:
    before: Reading
    after: Reading
    kernel_drift: float
    contended: bool
    why: str

    def as_dict(self) -> dict:
        return asdict(self)


def judge(before: Reading, after: Reading) -> Verdict:
    drift = after.kernel_s / before.kernel_s
    reasons = [f"other processes used {r.others_cores:.2f} cores {when} the run (limit {OTHERS_MAX_CORES})"
               for when, r in (("before", before), ("after", after))
               if r.others_cores is not None and r.others_cores > OTHERS_MAX_CORES]
    if not 1 / KERNEL_MAX_DRIFT <= drift <= KERNEL_MAX_DRIFT:
        reasons.append(f"the reference kernel took {drift:.2f}x as long after the run as before (limit "
                       f"{KERNEL_MAX_DRIFT}x)")
    return Verdict(before, after, drift, bool(reasons), "; ".join(reasons) or "quiet")


# Watch's reading of the machine's own speed, before and after the stretch: short, as every evaluation pays it
WATCH_WARMUP_S, WATCH_KERNEL_S = 0.1, 0.3


class Watch:
    """Other processes' CPU time over a stretch of this process's work (an evaluation's timed runs), judged by
    the cores the others kept busy on average; and the reference kernel's time before and after it, the
    machine's own speed, so that absolute timings of two runs (milliseconds per target step) are compared only
    where the kernel agrees: the same 2-core VM has measured the same step at 32 and at 78 ms on other days."""

    def __init__(self) -> None:
        self.kernel_before_s = reference_kernel_seconds(WATCH_WARMUP_S, WATCH_KERNEL_S)
        self.started, self.others_s = time.perf_counter(), _process_cpu_seconds(os.getpid())

    def verdict(self) -> dict:
        seconds = time.perf_counter() - self.started
        after = _process_cpu_seconds(os.getpid())
        cores = None if after is None or self.others_s is None else max(0.0, after - self.others_s) / seconds
        contended = cores is not None and cores > OTHERS_MAX_CORES
        why = (f"other processes used {cores:.2f} cores on average during the timed runs (limit "
               f"{OTHERS_MAX_CORES})" if contended else "quiet" if cores is not None else "unknown (no /proc)")
        kernel_ms = {"before": 1000 * self.kernel_before_s,
                     "after": 1000 * reference_kernel_seconds(WATCH_WARMUP_S, WATCH_KERNEL_S)}
        return {"others_cores": cores, "seconds": round(seconds, 1), "load_average": os.getloadavg()[0],
                "contended": contended, "why": why, "kernel_ms": kernel_ms}
