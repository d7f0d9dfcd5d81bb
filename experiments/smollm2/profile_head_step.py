"""Where one training step of `make demo-real`'s EAGLE-3 head goes: seconds and peak memory per part.

    .venv/bin/python experiments/smollm2/profile_head_step.py [ref|draft] [steps] [-- extra overrides]

(after `make demo-real` has built the target, the answers, the teacher and feature caches and, for `draft`, the
reference head). It composes demo-real's stage 2 (`ref`) or stage 3 (`draft`, k=0.4) with its settings, takes the
training loader's first batches and runs the stage's own loss step by step, timing each part: the teacher's
top-k read, the feature-cache read, the projection, per training-time-test pass the decoder layer, the
8,192-way output and the divergence, then backward and the optimiser (stage 3 adds the reference head's passes
and the selection). Before timing, the parts' loss is checked equal to the stage module's own `loss` on the
same batch, so what is profiled is what trains.

Memory: the growth of the resident set over the part's start, sampled every half millisecond (glibc's mmap
threshold is pinned low so that freed tensors leave the resident set at once). Step 0 is a warm-up and is not
counted. Prints a markdown table and writes JSON to bench/results/head-step-profile-<stage>.json.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("MALLOC_MMAP_THRESHOLD_") != "65536":  # glibc reads it at start: run again with it set
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})

import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from adaspec.commands.bench_real import cpu_model  # noqa: E402
from adaspec.distill.tokens import answer_logits, answer_mask  # noqa: E402
from adaspec.models.eagle3 import KVCache, shift_features  # noqa: E402
from adaspec.pipeline import build_data, resolve_stage_config  # noqa: E402
from adaspec.stages import stage_module  # noqa: E402
from adaspec.stages.ref import TTT_DECAY  # noqa: E402
from adaspec.toolkit import checked_config  # noqa: E402

DEMO_REAL = ["model=smollm2", "task=gsm8k", "task.local_dir=../shared/data/gsm8k", "task.n_train=500",
             "task.n_val=64", "distill.data=target", "distill.teacher=cache", "distill.cache_mode=topk",
             "pretrain=none", "model.draft_kind=eagle3", "distill.ttt_passes=3", "stage.max_epochs=6",
             "trainer.precision=bf16-mixed"]
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Sampler(threading.Thread):
    """The resident set's maximum since the last `reset`, sampled every half millisecond."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.high = 0

    def reset(self) -> int:
        self.high = rss_bytes()
        return self.high

    def run(self) -> None:
        while True:
            self.high = max(self.high, rss_bytes())
            time.sleep(0.0005)


class Parts:
    def __init__(self, sampler: Sampler) -> None:
        self.sampler, self.seconds, self.peak = sampler, defaultdict(list), defaultdict(int)
        self.counting = False

    @contextmanager
    def part(self, name: str):
        base = self.sampler.reset()
        started = time.perf_counter()
        yield
        elapsed = time.perf_counter() - started
        grown = max(self.sampler.high, rss_bytes()) - base
        if self.counting:
            self.seconds[name].append(elapsed)
            self.peak[name] = max(self.peak[name], grown)


def head_divergence(module, head, batch, mask, signal, teacher, parts: Parts, who: str):
    """`ReferenceDistill.draft_divergence` of an EAGLE-3 head, written out part by part (its
    `Eagle3Head.unrolled` loop, same calls)."""
    model = head.model
    with parts.part(f"{who}: feature-cache read"):
        features = head._features(batch["input_ids"], batch["attention_mask"], None, batch.get("index"))
    with parts.part(f"{who}: projection (fc)"):
        features = model.project(shift_features(features).to(model.fc.weight.dtype))
    ids, keep_mask = batch["input_ids"], batch["attention_mask"]
    t = ids.shape[1]
    positions = torch.arange(t)
    embeds, cache = model.embed_tokens(ids), KVCache()
    keep = keep_mask.bool()[:, None, None, :]
    total = 0
    for k in range(int(module.distill_cfg.ttt_passes)):
        with parts.part(f"{who}: pass {k} mask"):
            blocks = [positions[None, :] <= positions[:, None] - k]
            blocks += [positions[None, :] == positions[:, None] - (k - m) for m in range(1, k + 1)]
            mask_k = torch.cat([b[None, None] & keep for b in blocks], dim=-1)
            mask_k[..., -t:] |= torch.eye(t, dtype=torch.bool)
        with parts.part(f"{who}: pass {k} decoder layer"):
            out = model.midlayer(embeds, features, positions, mask_k, cache)
        with parts.part(f"{who}: pass {k} 8192-way output"):
            logits = model.lm_head(model.norm(out))
        with parts.part(f"{who}: pass {k} divergence"):
            total = total + TTT_DECAY**k * teacher.divergence(signal, answer_logits(logits, mask))
        features = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
    return total


def main() -> None:
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[: args.index("--")] if "--" in args else args
    stage = args[0] if args else "ref"
    steps = int(args[1]) if len(args) > 1 else 4
    overrides = [f"stage={stage}", *(["k=0.4"] if stage == "draft" else []), *DEMO_REAL, *extra]
    torch.set_num_threads(os.cpu_count() or 1)
    cfg, splits = resolve_stage_config(checked_config(*overrides))
    data, _, _ = build_data(cfg, splits)
    module = stage_module(cfg).from_config(cfg, data.tokenizer, data)
    module.on_fit_start()
    data.setup("fit")
    batches = iter(data.train_dataloader())
    optimizer = torch.optim.AdamW(module.student.parameters(), lr=cfg.stage.lr, weight_decay=cfg.stage.weight_decay)
    sampler = Sampler()
    sampler.start()
    parts = Parts(sampler)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    tokens, steps_s, checked = [], [], None
    for step in range(steps + 1):
        batch = next(batches)
        parts.counting = step > 0
        if step == 0:  # the parts compute the stage's own loss
            with autocast, torch.no_grad():
                reference_loss = float(module.loss(batch)[0])
        started = time.perf_counter()
        with autocast:
            mask = answer_mask(batch["labels"])
            with parts.part("teacher top-k read"), torch.no_grad():
                signal = module.teacher.signal(batch, mask)
            kl = head_divergence(module, module.draft, batch, mask, signal, module.teacher, parts, "student")
            if stage == "draft":
                with torch.no_grad():
                    kl_ref = head_divergence(module, module.reference, batch, mask, signal, module.teacher, parts,
                                             "reference")
                with parts.part("selection"):
                    from adaspec.distill.selection import select  # stage 3 only

                    record = select(str(module.distill_cfg.selection), kl.detach() - kl_ref, module.k, mask,
                                    module.selection_state)
                    loss = torch.where(record.selected, kl, 0.0).sum() / max(float(record.selected.sum()), 1.0)
            else:
                loss = kl.mean()
        if step == 0:
            checked = {"stage_loss": reference_loss, "profiled_loss": float(loss)}
            assert abs(reference_loss - float(loss)) <= 1e-3 * max(1.0, abs(reference_loss)), checked
        with parts.part("backward"):
            loss.backward()
        with parts.part("optimiser"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if step > 0:
            steps_s.append(time.perf_counter() - started)
            tokens.append(int(batch["attention_mask"].sum()))
        print(f"step {step}: {time.perf_counter() - started:.2f} s, {int(batch['attention_mask'].sum())} tokens, "
              f"batch {tuple(batch['input_ids'].shape)}, {int(mask.sum())} answer tokens", flush=True)
    rows = {name: {"seconds": statistics.median(s), "peak_mb": parts.peak[name] / 2**20}
            for name, s in parts.seconds.items()}
    result = {
        "command": "python experiments/smollm2/profile_head_step.py " + " ".join(sys.argv[1:]),
        "overrides": overrides, "steps": steps, "check": checked,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), **cpu_model()},
        "step_seconds_median": statistics.median(steps_s), "tokens_per_s": sum(tokens) / sum(steps_s),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "parts": rows,
    }
    out = Path("bench/results") / f"head-step-profile-{stage}.json"
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    total = sum(r["seconds"] for r in rows.values())
    print("| part | seconds (median) | share | peak memory growth (MB) |\n|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['seconds']:.3f} | {r['seconds'] / total:.0%} | {r['peak_mb']:.0f} |")
    print(f"step {result['step_seconds_median']:.2f} s median, {result['tokens_per_s']:.0f} tokens/s, "
          f"peak RSS {result['peak_rss_mb']:.0f} MB; wrote {out}")


if __name__ == "__main__":
    main()
