"""`make serve-check` (`python -m adaspec.commands.serve_check`): a trained EAGLE-3 head served by vLLM, checked
against the project's own decoding of the same head, prompts and gamma.

    python -m adaspec.commands.serve_check [--draft FOLDER | hydra overrides naming the head] [--k 0.4]
                                           [--prompts 20] [--gamma 5] [--max-new-tokens 128] [--json FILE]

It exports the head (`make export`, without the embedding copy: vLLM shares the target's), builds vLLM's CPU
build in `.cache/vllm-venv` on first use (`adaspec.vllm_serving.venv`), decodes the first test prompts greedily in
float32, one request at a time, with the project's prompt ids, and checks:
- vLLM's outputs equal the project's target-only greedy decoding, prompt by prompt;
- vLLM's mean acceptance length and per-position acceptance are within `counting.TOLERANCE` of the project's
  own for the same head, counted the same way (`adaspec.vllm_serving.counting`).
Exit status 0 when both hold, 1 when not, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from adaspec.errors import UserError, reported_as_one_line


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m adaspec.commands.serve_check", description=__doc__.splitlines()[0])
    parser.add_argument("--draft", type=Path, default=None, help="a trained head's folder (its final/)")
    parser.add_argument("--k", type=float, default=0.4, help="which head of the config: draft-k<k>")
    parser.add_argument("--prompts", type=int, default=20, help="the first N test prompts")
    parser.add_argument("--gamma", type=int, default=5, help="speculative tokens per draft")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None, help="also write the comparison to this JSON file")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides naming the head, e.g. model=smollm2 task=gsm8k")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.draft is not None and args.overrides:
        raise UserError("give either --draft FOLDER or the overrides naming the head, not both")
    # the models load only after the arguments are checked
    import torch
    from omegaconf import OmegaConf
    from tqdm import tqdm
    from transformers import AutoTokenizer

    from adaspec.data.encoding import prompt_ids, stop_token_id
    from adaspec.data.tasks import load_task
    from adaspec.decoding import FixedGamma, speculative_generate, target_generate
    from adaspec.drafts import load_draft
    from adaspec.export.exporter import default_target, export_draft, format_of, trained_folder
    from adaspec.machine import describe_machine
    from adaspec.models.build import load_model
    from adaspec.toolkit import write_json_atomically
    from adaspec.vllm_serving.counting import compare, counted_like_vllm
    from adaspec.vllm_serving.serve import serve

    folder = trained_folder(args.draft, args.overrides, "draft", args.k)
    if not (folder / "config.json").is_file():
        raise UserError(f"no trained head in {folder}: train it first (make demo-real) or pass --draft")
    cfg = OmegaConf.load(folder / "config.yaml")
    target_folder = default_target(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(target_folder))
    fmt = cfg.task.prompt_format
    prompts = [prompt_ids(tokenizer, e.prompt, fmt) for e in load_task(cfg.task)["test"][: args.prompts]]
    stop = stop_token_id(tokenizer, fmt)

    if format_of(folder) != "speculators":
        raise UserError(f"{folder} holds an independent draft; serve-check serves EAGLE-3 heads "
                        f"(model.draft_kind=eagle3)")
    target = load_model(target_folder).eval()
    head = load_draft(folder, target=target).eval()
    reference, ours = [], []
    for ids in tqdm(prompts, desc="serve-check: the project's decoding", unit="prompt"):
        ids = torch.tensor([ids])
        reference.append(target_generate(target, ids, max_new_tokens=args.max_new_tokens, eos_token_id=stop).tokens)
        ours.append(speculative_generate(target, head, ids, gamma_policy=FixedGamma(args.gamma),
                                         max_new_tokens=args.max_new_tokens, eos_token_id=stop))
    with tempfile.TemporaryDirectory(prefix="adaspec-serve-check-") as tmp:
        export = Path(tmp) / "export"
        export_draft(folder, export, target_folder=target_folder, speculative_tokens=args.gamma)
        served, spec, version = serve(target_folder, prompts, max_new_tokens=args.max_new_tokens,
                                      stop_token_id=stop, draft=export, gamma=args.gamma)
    equal = sum(a.tokens == b for a, b in zip(served, reference, strict=True))
    ours_counts = counted_like_vllm(ours, args.gamma)
    comparison = compare(ours_counts, spec)
    ok = equal == len(prompts) and comparison["within_tolerance"]
    mine, vllm = comparison["mean_acceptance_length"]
    print(f"[adaspec] serve-check: vLLM {version} served {folder} (gamma {args.gamma}, float32, greedy) "
          f"on {len(prompts)} prompts: outputs equal to the target's greedy decoding on {equal} of {len(prompts)}")
    print(f"[adaspec] serve-check: mean acceptance length: vLLM {vllm:.3f}, the project {mine:.3f} "
          f"({spec['drafts']} and {ours_counts['drafts']} drafts)")
    print("[adaspec] serve-check: accepted up to position i: vLLM "
          + " / ".join(f"{b:.3f}" for _, b in comparison["per_position"]) + ", the project "
          + " / ".join(f"{a:.3f}" for a, _ in comparison["per_position"]))
    print(f"[adaspec] serve-check: {'PASS' if ok else 'FAIL'} (tolerance: {comparison['tolerance']})")
    if args.json:
        write_json_atomically(args.json, {
            "command": "python -m adaspec.commands.serve_check " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": describe_machine(), "vllm": version, "head": str(folder), "target": str(target_folder),
            "gamma": args.gamma, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
            "outputs_equal": equal, "vllm_counts": spec, "project_counts": ours_counts,
            "comparison": comparison, "pass": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    with reported_as_one_line():
        sys.exit(main())
