"""How close a head training step runs to this CPU's matrix-product rate: the bound on issue 46's "3x faster".

    .venv/bin/python experiments/smollm2/head_step_flops.py [ref|draft] [steps] [-- extra overrides]

Composes `make demo-real`'s stage 2 (`ref`) or stage 3 (`draft`, k=0.4) as its recipe trains them now (batches of
8, grouped by length, bfloat16 autocast; `profile_head_step.py` sets the rest), and for each of `steps` training
batches (after a warm-up one): counts the floating-point operations of the step's forward and backward with
`torch.utils.flop_counter.FlopCounterMode` (matrix products and attention, which is where the arithmetic is; run
once more, untimed), then times the same step plain. Beside it, the rate of bfloat16 matrix products of the
head's own shapes on this machine (`torch.mm`, the best of several repeats). The step's FLOPs over its time,
against that rate, say how much faster the same arithmetic could run here: a speed-up beyond
`gemm rate / step rate` needs less arithmetic, not faster code. Writes bench/results/head-step-flops-<stage>.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).parent))
from profile_head_step import split_overrides, stage_for_steps  # noqa: E402

RECIPE = ["stage.batch_size=8", "stage.group_by_length=4", "task.n_train=7409"]  # the Makefile's HEAD_STAGE, EAGLE3


def gemm_rate(shapes: list[tuple[int, int, int]], repeats: int = 20) -> dict[str, float]:
    """GFLOP/s of `torch.mm` in bfloat16 at each (m, k, n), the best of `repeats` after a warm-up."""
    rates = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(k, n, dtype=torch.bfloat16)
        torch.mm(a, b)
        best = min(_seconds(lambda a=a, b=b: torch.mm(a, b)) for _ in range(repeats))
        rates[f"{m}x{k}x{n}"] = 2 * m * k * n / best / 1e9
    return rates


def _seconds(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(stage: str, steps: int, extra: list[str], compile_layer: bool = False) -> dict:
    overrides, module, batches, optimizer = stage_for_steps(stage, [*RECIPE, *extra])
    if compile_layer:  # what inductor's fused kernels would buy: the head's decoder layer compiled, shapes dynamic
        head = module.draft.model
        head.midlayer = torch.compile(head.midlayer, dynamic=True)

    def step(batch) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = (module.step(batch) if stage == "draft" else module.loss(batch))[0]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    chosen = [next(batches) for _ in range(steps + 1)]
    for batch in chosen[: 3 if compile_layer else 1]:  # warm-up (compiled: the graphs and their dynamic shapes)
        step(batch)
    log = []
    for i, batch in enumerate(chosen[1:], start=1):
        flops = None
        if not compile_layer:  # the counter does not see inside compiled graphs: counted on the eager code only
            counter = FlopCounterMode(display=False)
            with counter:
                step(batch)
            flops = counter.get_total_flops()
        else:  # the same untimed pass before the timed one
            step(batch)
        seconds = _seconds(lambda b=batch: step(b))
        log.append({"seconds": seconds, "flops": flops, "tokens": int(batch["attention_mask"].sum()),
                    "shape": list(batch["input_ids"].shape)})
        rate = "" if flops is None else f", {flops / 1e9:.1f} GFLOP, {flops / seconds / 1e9:.0f} GFLOP/s"
        print(f"step {i}: {seconds:.2f} s{rate}", flush=True)
    hidden, inter = module.draft.model.config.hidden_size, module.draft.model.config.intermediate_size
    support = module.draft.model.config.draft_vocab_size
    rows = 8 * 256  # about a batch's answer windows
    shapes = [(rows, 2 * hidden, hidden), (rows, hidden, inter), (rows, inter, hidden), (rows, hidden, support),
              (rows, support, hidden), (hidden, rows, support)]
    rates = gemm_rate(shapes)
    achieved = None if compile_layer else sum(s["flops"] for s in log) / sum(s["seconds"] for s in log) / 1e9
    return {"overrides": overrides, "steps": log, "step_gflop_per_s": achieved,
            "step_seconds_median": statistics.median(s["seconds"] for s in log),
            "tokens_per_s": sum(s["tokens"] for s in log) / sum(s["seconds"] for s in log),
            "gemm_gflop_per_s": rates, "best_gemm_gflop_per_s": max(rates.values()),
            "headroom": None if achieved is None else max(rates.values()) / achieved}


def main() -> None:
    args, extra = split_overrides(sys.argv[1:])
    compile_layer = "--compile" in args
    args = [a for a in args if a != "--compile"]
    stage = args[0] if args else "ref"
    steps = int(args[1]) if len(args) > 1 else 4
    from adaspec.machine import describe_machine

    result = {"command": "python experiments/smollm2/head_step_flops.py " + " ".join(sys.argv[1:]),
              "machine": describe_machine(), "compiled_decoder_layer": compile_layer,
              **measure(stage, steps, extra, compile_layer)}
    out = Path("bench/results") / f"head-step-flops-{stage}{'-compiled' if compile_layer else ''}.json"
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    rate = "" if result["step_gflop_per_s"] is None else f"{result['step_gflop_per_s']:.0f} GFLOP/s, "
    print(f"the step: {rate}{result['tokens_per_s']:.0f} tokens/s, median {result['step_seconds_median']:.2f} s; "
          f"bfloat16 matrix products of its shapes here: up to {result['best_gemm_gflop_per_s']:.0f} GFLOP/s; "
          f"wrote {out}")


if __name__ == "__main__":
    main()
