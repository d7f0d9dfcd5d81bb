"""`make gpu-check` (`python -m adaspec.commands.gpu_check`): does the GPU path work on this machine, and how fast?

On a machine with a CUDA GPU it
1. trains the three stages of the embedded default (task=arith, model=tiny) for a few steps each with
   `trainer=gpu` (bf16-mixed autocast) and `model.attn_implementation=auto` (FlashAttention-2 when flash-attn is
   installed, else sdpa), and decodes a few test prompts with the target alone and with that draft (loaded in 8 bits
   through bitsandbytes when it is installed, bf16 otherwise);
2. trains an EAGLE-3 head on a small target (`model=small`, stages 1 and 2 with `model.draft_kind=eagle3`, the same
   few steps) and decodes the prompts greedily in bfloat16: the target alone eager and compiled (`decode.compile`:
   CUDA graphs over a static cache), and the head compiled too (`decode.draft_compile`) as a chain of gamma and as a
   tree (`--tree`), each with its speed-up over the fastest target-only row and how many prompts' outputs differ
   from the target's own greedy output in the same serving (bfloat16 near-ties; 0 expected).
It prints the mean step time of each stage and every decoding row, and writes them as JSON with `--json`.

Without a CUDA GPU it says so and exits 0, so it is safe to run anywhere; `--device cpu` runs the same check on the
CPU (inductor instead of CUDA graphs; what its test does).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

from adaspec.toolkit import checked_config, no_tokenizer_parallelism, tokenize_prompts, write_json_atomically

HEAD = ["model=small", "model.draft_kind=eagle3", "pretrain=none", "distill.ttt_passes=3"]


def gpu_available() -> bool:
    # torch and the models load only on a GPU machine; elsewhere the command says so at once
    import torch

    return torch.cuda.is_available()


def train_stages(root: Path, steps: int, extra: list[str], stages=("target", "ref", "draft")) -> tuple[object, dict]:
    """`stages` for `steps` steps each; (the last stage's config, {stage: metrics.json})."""
    # torch and the models load only when there is something to check
    from adaspec.training.pipeline import run_stage

    base = [
        "trainer.enable_progress_bar=false", "logger=none", f"paths.root={root}",
        f"stage.max_steps={steps}", f"stage.checkpoint_every_n_steps={steps}", "stage.monitor_prompts=0",
        "task.arith.n_train=1024", "model.attn_implementation=auto", *extra,
    ]
    results = {}
    cfg = None
    for stage in stages:
        cfg = checked_config(*base, f"stage={stage}")
        final = run_stage(cfg)
        results[stage] = json.loads((final / "metrics.json").read_text())
    return cfg, results


def first_test_prompts(layout, task, n_prompts: int, device: str):
    """The tokenizer of `layout`'s target and the first `n_prompts` test prompts of `task`, on `device`."""
    # torch and the models load only when there is something to check
    from transformers import AutoTokenizer

    from adaspec.artefacts import paths
    from adaspec.data.tasks import load_task

    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(layout.target_dir())))
    texts = [e.prompt for e in load_task(task)["test"][:n_prompts]]
    return tokenizer, tokenize_prompts(tokenizer, texts, device)


def tokens_per_s(generate, prompts, device: str) -> tuple[float, list[list[int]]]:
    """Tokens/s of `generate` over `prompts` after one untimed warm-up call, and its outputs."""
    # torch and the models load only when there is something to check
    import torch

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    generate(prompts[0])  # warm-up: kernels, allocator, graphs
    sync()
    started, outputs = time.perf_counter(), []
    for ids in prompts:
        outputs.append(generate(ids).tokens)
    sync()
    return sum(map(len, outputs)) / (time.perf_counter() - started), outputs


def decode_speed(layout, task, gamma: int, n_prompts: int, max_new_tokens: int, device: str = "cuda"
                 ) -> dict[str, float | str]:
    """Tokens/s of target-only and speculative decoding of the tiny pipeline on the first test prompts (greedy)."""
    # torch and the models load only when there is something to check
    import torch

    from adaspec.artefacts import paths
    from adaspec.decoding import FixedGamma, speculative_generate, target_generate
    from adaspec.decoding.quant import can_load_8bit
    from adaspec.drafts import load_draft
    from adaspec.models.attention import resolve_attn_implementation
    from adaspec.models.build import load_model

    target_path, draft_path = paths.final(layout.target_dir()), paths.final(layout.draft_dir())
    tokenizer, prompts = first_test_prompts(layout, task, n_prompts, device)
    target = load_model(target_path, "auto", dtype=torch.bfloat16).to(device).eval()
    draft = load_draft(draft_path, "auto", dtype=torch.bfloat16).to(device).eval()
    draft_kind = "bf16"
    if can_load_8bit() and device == "cuda":
        draft, draft_kind = draft.int8(torch.device(device), draft_path), "int8 (bitsandbytes)"
    eos = tokenizer.eos_token_id
    target_tps, _ = tokens_per_s(lambda ids: target_generate(target, ids, max_new_tokens=max_new_tokens,
                                                             eos_token_id=eos), prompts, device)
    spec_tps, _ = tokens_per_s(lambda ids: speculative_generate(
        target, draft, ids, gamma_policy=FixedGamma(gamma), max_new_tokens=max_new_tokens, eos_token_id=eos
    ), prompts, device)
    return {
        "attn_implementation": resolve_attn_implementation("auto", half_precision=True) if device == "cuda" else "sdpa",
        "draft": draft_kind,
        "target_tokens_per_s": round(target_tps, 1),
        "speculative_tokens_per_s": round(spec_tps, 1),
    }


def head_speed(layout, task, gamma: int, n_prompts: int, max_new_tokens: int, tree: str, device: str,
               compile_steps: bool = True) -> dict[str, dict]:
    """The head trained on `layout`'s target: greedy bfloat16 rows {name: {tokens_per_s, speedup, mismatches}}."""
    # torch and the models load only when there is something to check
    import torch

    from adaspec.artefacts import paths
    from adaspec.decoding import FixedGamma, speculative_generate, target_generate
    from adaspec.decoding.serving import Served, Serving
    from adaspec.decoding.tree import TreeShape
    from adaspec.drafts import load_draft
    from adaspec.models.build import load_model

    tokenizer, prompts = first_test_prompts(layout, task, n_prompts, device)
    eos, shape = tokenizer.eos_token_id, TreeShape.parse(tree)
    model = load_model(paths.final(layout.target_dir()), "auto", dtype=torch.bfloat16).to(device).eval()
    eager = Served(copy.deepcopy(model), Serving("bfloat16"))
    compiled = Served(model, Serving("bfloat16", "static", compile_steps))
    head = load_draft(paths.final(layout.ref_dir()), target=model, dtype=torch.bfloat16).to(device).eval()
    if compile_steps:
        head.compile_steps()
        compiled.warm_up([1, gamma + 1])
        compiled.warm_up([gamma + 1], feature_layers=head.target_layers)
        compiled.warm_up([shape.nodes + 1], feature_layers=head.target_layers, tree=True)
        head.warm_up([ids.shape[1] for ids in prompts])

    def alone(served):
        return lambda ids: target_generate(served, ids, max_new_tokens=max_new_tokens, eos_token_id=eos)

    def speculative(tree_shape):
        return lambda ids: speculative_generate(compiled, head, ids, gamma_policy=FixedGamma(gamma),
                                                max_new_tokens=max_new_tokens, eos_token_id=eos, tree=tree_shape)

    rows = {"target eager": alone(eager), "target " + compiled.serving.name: alone(compiled),
            f"head chain gamma {gamma}": speculative(None), f"head tree {shape.name}": speculative(shape)}
    measured = {name: tokens_per_s(generate, prompts, device) for name, generate in rows.items()}
    fastest = max(tps for name, (tps, _) in measured.items() if name.startswith("target"))
    reference = measured["target " + compiled.serving.name][1]
    return {name: {"tokens_per_s": round(tps, 1), "speedup": round(tps / fastest, 3),
                   "mismatches": sum(a != b for a, b in zip(outputs, reference, strict=True))}
            for name, (tps, outputs) in measured.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per stage")
    parser.add_argument("--prompts", type=int, default=8, help="test prompts to decode")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--tree", default="k4-d4-n16", help="the head's tree shape (decode.tree's names)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: the same check on the CPU, eager unless --compile (what the test runs)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="compiled target and head steps (default: on a GPU)")
    parser.add_argument("--head-overrides", nargs="*", default=[], help="overrides for the head's run only")
    parser.add_argument("--outputs", type=Path, default=None, help="keep the artefacts here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. trainer.precision=32")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not gpu_available():
        print("gpu-check: no CUDA GPU on this machine (torch.cuda.is_available() is False); nothing to check "
              "(--device cpu runs the same check on the CPU).")
        return 0
    no_tokenizer_parallelism()
    # torch and the models load only when there is something to check
    import torch

    from adaspec.artefacts import paths
    from adaspec.decoding.quant import can_load_8bit
    from adaspec.errors import UserError
    from adaspec.machine import cpu_name, describe_machine
    from adaspec.models.attention import flash_attn_installed

    on_gpu = args.device == "cuda"
    compile_steps = on_gpu if args.compile is None else args.compile
    name = torch.cuda.get_device_name(0) if on_gpu else cpu_name(describe_machine())
    print(f"gpu-check: {name}, torch {torch.__version__}, flash-attn {'yes' if flash_attn_installed() else 'no'}, "
          f"bitsandbytes 8-bit {'yes' if can_load_8bit() else 'no'}")
    trainer = ["trainer=gpu"] if on_gpu else ["trainer=cpu"]
    with tempfile.TemporaryDirectory(prefix="adaspec-gpu-check-") as tmp:
        root = args.outputs or Path(tmp) / "outputs"
        try:
            cfg, results = train_stages(root, args.steps, [*trainer, *args.overrides])
            speed = decode_speed(paths.of(cfg), cfg.task, int(cfg.decode.gamma), args.prompts, args.max_new_tokens,
                                 args.device)
            head_cfg, head_results = train_stages(root, args.steps, [*trainer, *HEAD, *args.overrides,
                                                                     *args.head_overrides], ("target", "ref"))
            heads = head_speed(paths.of(head_cfg), head_cfg.task, int(head_cfg.decode.gamma), args.prompts,
                               args.max_new_tokens, args.tree, args.device, compile_steps)
        except UserError as err:
            print(f"gpu-check: error: {err}", file=sys.stderr)
            return 2
    stages = {stage: metrics for stage, metrics in results.items()} | {
        f"{stage} (model=small, EAGLE-3 head)": metrics for stage, metrics in head_results.items()}
    for stage, metrics in stages.items():
        per_step = metrics["train_seconds"] / max(1, metrics["steps"])
        print(f"gpu-check: stage {stage}: {metrics['steps']} steps, {per_step * 1000:.1f} ms/step "
              f"(incl. the first, warm-up step), {metrics.get('train/tokens_per_s', float('nan')):.0f} tokens/s")
    print(f"gpu-check: attention {speed['attn_implementation']}, draft {speed['draft']}")
    print(f"gpu-check: decode: target alone {speed['target_tokens_per_s']} tokens/s, "
          f"speculative {speed['speculative_tokens_per_s']} tokens/s")
    print(f"gpu-check: model=small with its EAGLE-3 head, greedy, bfloat16, {'compiled' if compile_steps else 'eager'}:")
    for row, figures in heads.items():
        print(f"gpu-check:   {row}: {figures['tokens_per_s']} tokens/s, {figures['speedup']}x the fastest "
              f"target-only row, {figures['mismatches']} of {args.prompts} outputs differ from the target's")
    if args.json:
        write_json_atomically(args.json, {"device": name, "torch": torch.__version__, "compiled": compile_steps,
                                          "stages": {s: {"steps": m["steps"], "train_seconds": m["train_seconds"]}
                                                     for s, m in stages.items()},
                                          "tiny": speed, "small_head": heads, "command": sys.argv})
    return 0


if __name__ == "__main__":
    sys.exit(main())
