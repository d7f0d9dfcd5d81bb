"""Where one training step of `make demo-real`'s EAGLE-3 head goes: seconds and peak memory per part.

    .venv/bin/python experiments/smollm2/profile_head_step.py [ref|draft] [steps] [-- extra overrides]

(after `make demo-real` has built the target, the answers, the teacher and feature caches and, for `draft`, the
reference head). It composes demo-real's stage 2 (`ref`) or stage 3 (`draft`, k=0.4) with its settings, takes the
training loader's first batches and runs the stage module's own loss on each (what Lightning's step runs, under
the same bfloat16 autocast), then backward and AdamW. Parts are timed from hooks on the head's modules and on
the teacher, so the code profiled is the code that trains: the teacher's top-k read, the feature-cache read,
the projection (fc), per training-time-test pass the decoder layer, the output layer (norm and the 8,192-way
lm_head) and the divergence; stage 3 also the reference head's. "other forward" is the rest of the forward
(masks, gathers, the selection).

Seconds: medians over `steps` steps after one warm-up step. Memory, from a second process started with glibc's
mmap threshold pinned low (freed tensors then leave the resident set at once, at some cost in time, which is
why the seconds come from this one): the growth of the resident set during the part, sampled every half
millisecond, its maximum over the steps. Prints a markdown table; writes bench/results/head-step-profile-<stage>
[-<name>].json (`--name`).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import torch

MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
DEMO_REAL = ["model=smollm2", "task=gsm8k", "task.local_dir=../shared/data/gsm8k", "task.n_train=500",
             "task.n_val=64", "distill.data=target", "distill.teacher=cache", "distill.cache_mode=topk",
             "pretrain=none", "model.draft_kind=eagle3", "distill.ttt_passes=3", "stage.max_epochs=6",
             "trainer.precision=bf16-mixed"]
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Sampler(threading.Thread):
    """The resident set's maximum since the last `reset`, sampled every half millisecond (memory runs only). A
    reset starts a new epoch; a sample taken in an older one is dropped, so one part's peak never leaks into the
    next part's."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.epoch, self.high = 0, (0, 0)

    def reset(self) -> int:
        now = rss_bytes()
        self.epoch += 1
        self.high = (self.epoch, now)
        return now

    def peak(self) -> int:
        epoch, high = self.high
        return max(high if epoch == self.epoch else 0, rss_bytes())

    def run(self) -> None:
        while True:
            epoch, sample = self.epoch, rss_bytes()
            seen, high = self.high
            if seen == epoch == self.epoch:
                self.high = (epoch, max(high, sample))
            time.sleep(0.0005)


class Parts:
    """Seconds per part and step (summed over a part's calls in the step), and each part's peak memory growth."""

    def __init__(self, sampler: Sampler | None) -> None:
        self.sampler, self.open = sampler, {}
        self.step: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []
        self.peak: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)  # calls per label in this step: the pass index

    def start(self, name: str) -> None:
        self.open[name] = (time.perf_counter(), self.sampler.reset() if self.sampler else 0)

    def stop(self, name: str) -> None:
        started, base = self.open.pop(name)
        self.step[name] += time.perf_counter() - started
        if self.sampler:
            self.peak[name] = max(self.peak[name], self.sampler.peak() - base)

    def next_step(self, keep: bool) -> None:
        if keep:
            self.steps.append(dict(self.step))
        self.step, self.calls = defaultdict(float), defaultdict(int)

    def numbered(self, label: str) -> str:
        """`label` with the pass number of this call in the step (`student: pass 1 decoder layer`)."""
        k = self.calls[label]
        self.calls[label] += 1
        return label.replace("{k}", str(k))


def hook_head(head, who: str, parts: Parts) -> None:
    """Time the head's projection, each pass's decoder layer and its output layer (norm and lm_head)."""
    model = head.model
    names = {}

    def around(module, label: str, first=None, last=None):
        first, last = first or module, last or module

        def pre(*_):
            names[label] = parts.numbered(label)
            parts.start(names[label])

        def post(*_):
            parts.stop(names[label])

        first.register_forward_pre_hook(pre)
        last.register_forward_hook(post)

    around(model.fc, f"{who}: projection (fc)")
    around(model.midlayer, f"{who}: pass {{k}} decoder layer")
    around(None, f"{who}: pass {{k}} output layer (norm, 8192-way lm_head)", first=model.norm, last=model.lm_head)


def timed_method(owner, method: str, label: str, parts: Parts) -> None:
    """Replace `owner.method` by a timed call of itself (this process only: a profile, not a test)."""
    inner = getattr(owner, method)

    def timed(*args, **kwargs):
        name = parts.numbered(label)
        parts.start(name)
        try:
            return inner(*args, **kwargs)
        finally:
            parts.stop(name)

    setattr(owner, method, timed)


def stage_for_steps(stage: str, extra: list[str]):
    """demo-real's stage 2 (`ref`) or stage 3 (`draft`, k=0.4) with `extra` overrides, ready to step by hand: (its
    overrides, the stage module, the training loader's batches, AdamW over the student as the stage configures it)."""
    from adaspec.stages import stage_module
    from adaspec.stages.stage_run import StageRun
    from adaspec.toolkit import checked_config
    from adaspec.training.pipeline import build_data, resolve_stage_config

    overrides = [f"stage={stage}", *(["k=0.4"] if stage == "draft" else []), *DEMO_REAL, *extra]
    torch.set_num_threads(os.cpu_count() or 1)
    cfg, splits = resolve_stage_config(checked_config(*overrides))
    run = StageRun.of(cfg)
    data, _, _ = build_data(run, splits)
    module = stage_module(run).build(run, data.tokenizer, data)
    module.on_fit_start()
    data.setup("fit")
    optimizer = torch.optim.AdamW(module.student.parameters(), lr=cfg.stage.lr, weight_decay=cfg.stage.weight_decay)
    return overrides, module, iter(data.train_dataloader()), optimizer


def profile(stage: str, steps: int, extra: list[str], memory: bool) -> dict:
    overrides, module, batches, optimizer = stage_for_steps(stage, extra)
    sampler = Sampler() if memory else None
    if sampler:
        sampler.start()
    parts = Parts(sampler)
    hook_head(module.draft, "student", parts)
    if stage == "draft" and module.reference is not None:
        hook_head(module.reference, "reference", parts)
    timed_method(module.teacher, "signal", "teacher top-k read", parts)
    timed_method(module.teacher, "divergence", "divergence, pass {k} (student, then reference)", parts)
    if module.draft.feature_cache is not None:
        timed_method(module.draft.feature_cache, "batch", "feature-cache read", parts)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    tokens, step_seconds, log = [], [], []
    for step in range(steps + 1):
        batch = next(batches)
        started = time.perf_counter()
        parts.start("forward")
        with autocast:
            loss = (module.step(batch) if stage == "draft" else module.loss(batch))[0]
        parts.stop("forward")
        parts.start("backward")
        loss.backward()
        parts.stop("backward")
        parts.start("optimiser")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        parts.stop("optimiser")
        elapsed = time.perf_counter() - started
        parts.next_step(keep=step > 0)
        if step > 0:
            step_seconds.append(elapsed)
            tokens.append(int(batch["attention_mask"].sum()))
        log.append({"seconds": elapsed, "tokens": int(batch["attention_mask"].sum()),
                    "shape": list(batch["input_ids"].shape), "loss": float(loss)})
        print(f"step {step}: {elapsed:.2f} s, {log[-1]['tokens']} tokens, batch {tuple(batch['input_ids'].shape)}, "
              f"loss {float(loss):.4f}", flush=True)
    names = list(parts.steps[0])
    seconds = {name: statistics.median(s.get(name, 0.0) for s in parts.steps) for name in names}
    inner = sum(v for n, v in seconds.items() if n not in ("forward", "backward", "optimiser"))
    seconds["other forward"] = max(0.0, seconds.pop("forward") - inner)
    return {
        "overrides": overrides, "steps": steps, "log": log, "seconds": seconds,
        "peak_mb": {name: v / 2**20 for name, v in parts.peak.items()},
        "step_seconds_median": statistics.median(step_seconds), "tokens_per_s": sum(tokens) / sum(step_seconds),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the script's own arguments, the Hydra overrides after `--`)."""
    return (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])


def main() -> None:
    args, extra = split_overrides(sys.argv[1:])
    memory, name = "--memory" in args, None
    if "--name" in args:
        name = args[args.index("--name") + 1]
        args.remove("--name"), args.remove(name)
    args = [a for a in args if a != "--memory"]
    stage = args[0] if args else "ref"
    steps = int(args[1]) if len(args) > 1 else 3
    if memory:  # the child process of a timing run: print its JSON only
        print("MEMORY " + json.dumps(profile(stage, steps, extra, memory=True)))
        return
    timing = profile(stage, steps, extra, memory=False)
    child = subprocess.run([sys.executable, __file__, stage, str(steps), "--memory", "--", *extra],
                           env={**os.environ, **MEMORY_ENV}, capture_output=True, text=True, check=True)
    mem = json.loads(next(line for line in child.stdout.splitlines() if line.startswith("MEMORY "))[7:])
    from adaspec.machine import describe_machine  # the CPU's name and its AMX / AVX-512 BF16 flags

    result = {
        "command": "python experiments/smollm2/profile_head_step.py " + " ".join(sys.argv[1:]),
        "machine": describe_machine(),
        # the memory run's own peak RSS is not kept: Linux carries a parent's peak into the child it forks
        "timing": timing, "memory_run": {k: mem[k] for k in ("peak_mb", "log")},
    }
    out = Path("bench/results") / (f"head-step-profile-{stage}" + (f"-{name}" if name else "") + ".json")
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    total = sum(timing["seconds"].values())
    print("| part | seconds (median) | share | peak memory growth (MB) |\n|---|---|---|---|")
    for part, seconds in timing["seconds"].items():
        peak = mem["peak_mb"].get(part)
        print(f"| {part} | {seconds:.3f} | {seconds / total:.0%} | {'' if peak is None else f'{peak:.0f}'} |")
    print(f"step {timing['step_seconds_median']:.2f} s median, {timing['tokens_per_s']:.0f} tokens/s, the process's "
          f"peak RSS {timing['peak_rss_mb']:.0f} MB (models and caches included); wrote {out}")


if __name__ == "__main__":
    main()
