"""What a head training step costs with 1, 2 or 3 passes of EAGLE-3's training-time test, in one process.

    .venv/bin/python experiments/smollm2/head_passes_cost.py [steps] [-- extra overrides]

Composes `make demo-real`'s stage 2 as its recipe trains now (batches of 8 grouped by length, bfloat16 autocast;
`head_step_flops.RECIPE`, `profile_head_step.DEMO_REAL`) with the extra overrides (e.g. the sampled answers' data),
then for each of `steps` training batches (after a warm-up) times the full step (forward, backward, AdamW) once
per pass count, rotating the order from batch to batch so that no count always runs first. Prints and writes
bench/results/head-passes-cost.json: the median seconds and tokens/s per pass count, and each count's median ratio
to 3 passes over the same batches. The loss is the stage's own (`module.loss`), with `distill.ttt_passes` set for
each timing.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from head_step_flops import RECIPE  # noqa: E402
from profile_head_step import split_overrides, stage_for_steps  # noqa: E402

PASSES = (1, 2, 3)


def main() -> None:
    args, extra = split_overrides(sys.argv[1:])
    steps = int(args[0]) if args else 6
    overrides, module, batches, optimizer = stage_for_steps("ref", [*RECIPE, *extra])

    def step(batch, passes: int) -> float:
        module.distill_cfg.ttt_passes = passes
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = module.loss(batch)[0]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    warm = next(batches)
    for passes in PASSES:
        step(warm, passes)
    seconds: dict[int, list[float]] = {p: [] for p in PASSES}
    tokens = []
    for i in range(steps):
        batch = next(batches)
        tokens.append(int(batch["attention_mask"].sum()))
        order = PASSES[i % 3:] + PASSES[: i % 3]
        for passes in order:
            seconds[passes].append(step(batch, passes))
        print(f"batch {i}: {tokens[-1]} tokens, " + ", ".join(f"{p} passes {seconds[p][-1]:.2f} s" for p in PASSES),
              flush=True)
    from adaspec.machine import describe_machine

    result = {
        "command": "python experiments/smollm2/head_passes_cost.py " + " ".join(sys.argv[1:]),
        "machine": describe_machine(), "overrides": overrides, "tokens": tokens,
        "seconds": {str(p): s for p, s in seconds.items()},
        "median_seconds": {str(p): statistics.median(s) for p, s in seconds.items()},
        "tokens_per_s": {str(p): sum(tokens) / sum(s) for p, s in seconds.items()},
        "median_ratio_to_3": {str(p): statistics.median(a / b for a, b in zip(s, seconds[3], strict=True))
                              for p, s in seconds.items()},
    }
    out = Path("bench/results/head-passes-cost.json")
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(", ".join(f"{p} passes: {result['tokens_per_s'][str(p)]:.0f} tokens/s, "
                    f"{result['median_ratio_to_3'][str(p)]:.2f}x the 3-pass step" for p in PASSES) + f"; wrote {out}")


if __name__ == "__main__":
    main()
