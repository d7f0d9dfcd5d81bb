"""The cost curve: seconds of one forward of n new tokens over a cached context, per serving configuration.

A configuration is a model in a `Serving` (dtype, KV cache, eager or compiled) at a number of torch threads.
Each model prefills a `context`-token prompt once; a timed call is one `step` of n new tokens on top of it,
after which the cache is cropped back, so every call sees the same context. Repeats are interleaved: each
round times every configuration at every n, in a rotated order, so a slow drift of the machine hits them
alike. Reported per point: the median, the distribution-free 95 % interval of the median, and the median
over the configuration's own one-token median (what a verification of n - 1 proposals costs in steps).

Beside the curve, from the same process: the memory-bandwidth floor of one forward (the weights' bytes
over a measured read bandwidth: no forward can be faster) and compile times (excluded from every figure).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from adaspec.decoding.serving import Served
from adaspec.decoding.weight_only_int8 import WeightOnlyInt8Linear
from adaspec.diagnostics.cost_ratio import median_interval


@dataclass
class Configuration:
    name: str  # e.g. "target/bfloat16-compiled/t2"
    served: Served
    threads: int


def read_bandwidth_gbs(megabytes: int = 512, repeats: int = 5) -> float:
    """GB/s of one pass over a `megabytes` float32 tensor (a sum: every byte read once, nothing written)."""
    data = torch.ones(megabytes * 2**20 // 4)
    data.sum()  # first touch
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        data.sum()
        times.append(time.perf_counter() - started)
    return data.numel() * 4 / statistics.median(times) / 1e9


def weight_bytes(served: Served) -> int:
    """Bytes of the weights: the parameters, and the int8 layers' weights and scales (buffers)."""
    int8 = [b for m in served.model.modules() if isinstance(m, WeightOnlyInt8Linear) for b in m.buffers()]
    return sum(t.numel() * t.element_size() for t in [*served.model.parameters(), *int8])


@torch.inference_mode()
def measure_curve(configurations: list[Configuration], ns: list[int], context: int, repeats: int,
                  progress: bool = True) -> dict[str, dict]:
    """{configuration name: {"threads", "serving", "compile_seconds", "points": {n: {...}}}} (module docstring)."""
    caches = {}
    for config in configurations:
        torch.set_num_threads(config.threads)
        config.served.warm_up(ns)
        vocab = config.served.config.vocab_size
        prompt = torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(0))
        cache = config.served.new_cache(context + max(ns))
        config.served.prefill(prompt, cache)
        caches[config.name] = cache
    new = {n: torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n)) for n in ns}
    times: dict[str, dict[int, list[float]]] = {c.name: {n: [] for n in ns} for c in configurations}
    calls = [(c, n) for c in configurations for n in ns]
    for round_ in tqdm(range(repeats + 1), desc="cost curve", unit="round", disable=not progress):
        shift = round_ % len(calls)
        for config, n in calls[shift:] + calls[:shift]:
            torch.set_num_threads(config.threads)
            cache = caches[config.name]
            ids = new[n] % config.served.config.vocab_size
            started = time.perf_counter()
            config.served.step(ids, cache)
            elapsed = time.perf_counter() - started
            config.served.crop(cache, context)
            if round_ > 0:  # round 0 warms every configuration up
                times[config.name][n].append(elapsed)
    return {config.name: _summary(config, times[config.name]) for config in configurations}


def _summary(config: Configuration, times: dict[int, list[float]]) -> dict:
    one = statistics.median(times[min(times)])
    points = {}
    for n, values in times.items():
        low, high = median_interval(values)
        median = statistics.median(values)
        points[str(n)] = {"median_s": median, "low_s": low, "high_s": high, "relative_to_1": median / one,
                          "repeats": len(values)}
    return {"threads": config.threads, "serving": config.served.serving.name,
            "compile_seconds": {str(w): s for w, s in config.served.compile_seconds.items()},
            "weight_bytes": weight_bytes(config.served), "points": points}


def plot_curves(curves: dict[str, dict], floors: dict[str, float], path) -> None:
    """Cost against n per configuration (median and its 95 % interval), the bandwidth floors as lines."""
    import matplotlib  # optional at import time: only the benchmark draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, curve in curves.items():
        ns = [int(n) for n in curve["points"]]
        med = [curve["points"][str(n)]["median_s"] * 1e3 for n in ns]
        err = [[m - curve["points"][str(n)]["low_s"] * 1e3 for n, m in zip(ns, med, strict=True)],
               [curve["points"][str(n)]["high_s"] * 1e3 - m for n, m in zip(ns, med, strict=True)]]
        axes[0].errorbar(ns, med, yerr=err, marker="o", capsize=3, label=name)
        axes[1].plot(ns, [curve["points"][str(n)]["relative_to_1"] for n in ns], marker="o", label=name)
    for label, seconds in floors.items():
        axes[0].axhline(seconds * 1e3, linestyle=":", color="grey")
        axes[0].annotate(f"floor {label}", (1, seconds * 1e3), fontsize=7, color="grey")
    axes[0].set(xlabel="new tokens n", ylabel="ms per forward (log scale)", title="one forward over the cached context",
                yscale="log")  # one slow configuration would flatten the others on a linear axis
    axes[1].set(xlabel="new tokens n", ylabel="x one-token step", title="cost relative to n = 1")
    axes[1].axhline(1.0, color="grey", linewidth=0.5)
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
