"""`make gpu-check` (`python -m adaspec.commands.gpu_check`): does the GPU path work on this machine, and how fast?

On a machine with a CUDA GPU it runs the three training stages of the embedded default (task=arith,
model=tiny) for a few steps each with `trainer=gpu` (bf16-mixed autocast) and
`model.attn_implementation=auto` (FlashAttention-2 when flash-attn is installed, else sdpa) in a
temporary outputs folder, then decodes a few test prompts with the target alone and with speculative
decoding, the draft loaded in 8 bits through bitsandbytes when it is installed (bf16 otherwise). It
prints the mean step time of each stage and the decoding speed in tokens/s.

Without a CUDA GPU it says so and exits 0, so it is safe to run anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from adaspec.toolkit import checked_config, no_tokenizer_parallelism, tokenize_prompts


def gpu_available() -> bool:
    # torch and the models load only on a GPU machine; elsewhere the command says so at once
    import torch

    return torch.cuda.is_available()


def train_stages(root: Path, steps: int, extra: list[str]) -> tuple[object, dict[str, dict]]:
    """Stages 1-3 for `steps` steps each; {stage: metrics.json}."""
    # torch and the models load only on a GPU machine; elsewhere the command says so at once
    from adaspec.pipeline import run_stage

    base = [
        "trainer=gpu", "trainer.enable_progress_bar=false", "logger=none", f"paths.root={root}",
        f"stage.max_steps={steps}", f"stage.checkpoint_every_n_steps={steps}", "stage.monitor_prompts=0",
        "task.arith.n_train=1024", "model.attn_implementation=auto", *extra,
    ]
    results = {}
    cfg = None
    for stage in ("target", "ref", "draft"):
        cfg = checked_config(*base, f"stage={stage}")
        final = run_stage(cfg)
        results[stage] = json.loads((final / "metrics.json").read_text())
    return cfg, results


def decode_speed(cfg, n_prompts: int, max_new_tokens: int, device: str = "cuda") -> dict[str, float | str]:
    """Tokens/s of target-only and speculative decoding on the first test prompts (greedy)."""
    # torch and the models load only on a GPU machine; elsewhere the command says so at once
    import torch
    from transformers import AutoTokenizer

    from adaspec import paths
    from adaspec.data.tasks import load_task
    from adaspec.decoding import FixedGamma, speculative_generate, target_generate
    from adaspec.decoding.quant import can_load_8bit
    from adaspec.drafts import load_draft
    from adaspec.models.attention import resolve_attn_implementation
    from adaspec.models.build import load_model

    target_path, draft_path = paths.final(paths.target_dir(cfg)), paths.final(paths.draft_dir(cfg))
    tokenizer = AutoTokenizer.from_pretrained(str(target_path))
    target = load_model(target_path, "auto", dtype=torch.bfloat16).to(device).eval()
    draft = load_draft(draft_path, "auto", dtype=torch.bfloat16).to(device).eval()
    draft_kind = "bf16"
    if can_load_8bit() and device == "cuda":
        draft, draft_kind = draft.int8(torch.device(device), draft_path), "int8 (bitsandbytes)"
    prompts = tokenize_prompts(tokenizer, [e.prompt for e in load_task(cfg.task)["test"][:n_prompts]], device)
    eos = tokenizer.eos_token_id

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def timed(generate) -> float:
        generate(prompts[0])  # warm-up: kernels, allocator
        sync()
        started, tokens = time.perf_counter(), 0
        for ids in prompts:
            tokens += len(generate(ids).tokens)
        sync()
        return tokens / (time.perf_counter() - started)

    target_tps = timed(lambda ids: target_generate(target, ids, max_new_tokens=max_new_tokens, eos_token_id=eos))
    spec_tps = timed(lambda ids: speculative_generate(
        target, draft, ids, gamma_policy=FixedGamma(cfg.decode.gamma), max_new_tokens=max_new_tokens, eos_token_id=eos
    ))
    return {
        "attn_implementation": resolve_attn_implementation("auto", half_precision=True) if device == "cuda" else "sdpa",
        "draft": draft_kind,
        "target_tokens_per_s": round(target_tps, 1),
        "speculative_tokens_per_s": round(spec_tps, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per stage")
    parser.add_argument("--prompts", type=int, default=8, help="test prompts to decode")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--outputs", type=Path, default=None, help="keep the artefacts here (default: a temp dir)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. model=small")
    args = parser.parse_args(argv)
    if not gpu_available():
        print("gpu-check: no CUDA GPU on this machine (torch.cuda.is_available() is False); nothing to check.")
        return 0
    no_tokenizer_parallelism()
    # torch and the models load only on a GPU machine; elsewhere the command says so at once
    import torch

    from adaspec.decoding.quant import can_load_8bit
    from adaspec.errors import UserError
    from adaspec.models.attention import flash_attn_installed

    print(f"gpu-check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"flash-attn {'yes' if flash_attn_installed() else 'no'}, bitsandbytes 8-bit {'yes' if can_load_8bit() else 'no'}")
    with tempfile.TemporaryDirectory(prefix="adaspec-gpu-check-") as tmp:
        root = args.outputs or Path(tmp) / "outputs"
        try:
            cfg, results = train_stages(root, args.steps, args.overrides)
            speed = decode_speed(cfg, args.prompts, args.max_new_tokens)
        except UserError as err:
            print(f"gpu-check: error: {err}", file=sys.stderr)
            return 2
    for stage, metrics in results.items():
        per_step = metrics["train_seconds"] / max(1, metrics["steps"])
        print(f"gpu-check: stage {stage}: {metrics['steps']} steps, {per_step * 1000:.1f} ms/step "
              f"(incl. the first, warm-up step), {metrics.get('train/tokens_per_s', float('nan')):.0f} tokens/s")
    print(f"gpu-check: attention {speed['attn_implementation']}, draft {speed['draft']}")
    print(f"gpu-check: decode: target alone {speed['target_tokens_per_s']} tokens/s, "
          f"speculative {speed['speculative_tokens_per_s']} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
