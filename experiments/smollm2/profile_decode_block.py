"""Where one speculative block on the real target goes: the target's verification against the host work around it.

    .venv/bin/python experiments/smollm2/profile_decode_block.py [--tree k4-d3-n12+lookup8 | --gamma 3]
        [--prompts 4] [--serving bfloat16-compiled] [--temperature 0] [--draft-compile] [--name NAME] [--cprofile]

(after `make demo-real`). demo-real's AdaSPEC head, served as bench-real serves it (the target in `--serving`, the
head in bfloat16), decodes `--prompts` GSM8K test prompts of 128 new tokens once untimed and once timed. Every
call the loop makes is timed from wrappers on the objects the loop itself uses: the target's verification
(`verify_tree` / `step_with_features`) and cache compaction, the draft session's proposal (split into the head's
forwards and the rest: the tree's expansion, masks and the lookup graft), the acceptance, the session's
bookkeeping; "loop" is the block's wall time less all of those. Medians and totals per block go to stdout and to
bench/results/decode-block-profile[-NAME].json; `--cprofile` adds the Python functions with the most own time.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from adaspec.artefacts import paths
from adaspec.toolkit import checked_config

REAL = ["model=smollm2", "task=gsm8k", "task.local_dir=../shared/data/gsm8k", "task.n_train=7409", "task.n_val=64",
        "distill.data=target", "distill.teacher=cache", "distill.cache_mode=topk", "pretrain=none",
        "model.draft_kind=eagle3", "distill.ttt_passes=3", "stage=draft", "k=0.4"]
HEAD = "outputs/gsm8k/smollm2/seed0/draft-k0.4-eagle3-target-answers/final"


class Clock:
    """Seconds per named part, per block."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)

    def wrap(self, owner, name: str, part: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.current[part] += time.perf_counter() - started

        setattr(owner, name, timed)

    def end_block(self, wall: float) -> None:
        parts = dict(self.current)
        # the session's proposal includes the head's forwards: count them once
        if "propose" in parts:
            parts["propose (host)"] = parts.pop("propose") - parts.get("head forwards", 0.0)
        parts["loop"] = wall - sum(parts.values())
        parts["block"] = wall
        self.blocks.append(parts)
        self.current = defaultdict(float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", default="k4-d3-n12+lookup8")
    parser.add_argument("--gamma", type=int, default=None, help="a chain of gamma instead of --tree")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--serving", default="bfloat16-compiled")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--draft", default=HEAD)
    parser.add_argument("--name", default=None)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--draft-compile", action="store_true", help="the head's steps compiled (decode.draft_compile)")
    args = parser.parse_args()
    torch.set_num_threads(2)

    from transformers import AutoTokenizer

    from adaspec.data.encoding import prompt_ids, stop_token_id
    from adaspec.data.tasks import load_task
    from adaspec.decoding import FixedGamma, speculative
    from adaspec.decoding.serving import Served, parse_serving
    from adaspec.decoding.tree import TreeShape
    from adaspec.drafts import load_draft
    from adaspec.machine import describe_machine
    from adaspec.models.build import load_model

    cfg = checked_config(*REAL)
    target_folder = paths.final(paths.of(cfg).target_dir())
    tokenizer = AutoTokenizer.from_pretrained(str(target_folder))
    model = load_model(target_folder).eval()
    target = Served(model, parse_serving(args.serving, "--serving"))
    draft = load_draft(Path(args.draft), target=model).eval()
    draft.model.to(torch.bfloat16)
    if args.draft_compile:
        draft.compile_steps()
    shape = None if args.gamma else TreeShape.parse(args.tree)
    gamma = args.gamma or shape.depth
    fmt = cfg.task.prompt_format
    prompts = [torch.tensor([prompt_ids(tokenizer, e.prompt, fmt)]) for e in load_task(cfg.task)["test"][: args.prompts]]
    stop = stop_token_id(tokenizer, fmt)
    layers = list(draft.target_layers)
    if shape is not None:
        target.warm_up([shape.nodes + 1], feature_layers=layers, tree=True)
    else:
        target.warm_up([gamma + 1], feature_layers=layers)
    draft.warm_up([ids.shape[1] for ids in prompts])

    clock = Clock()
    for method, part in [("verify_tree", "target verification"), ("step_with_features", "target verification"),
                         ("keep_path", "target cache compaction"), ("crop", "target cache compaction")]:
        clock.wrap(target, method, part)
    for fn, part in [("accept_greedy", "acceptance"), ("accept_sampled", "acceptance"),
                     ("verify_greedy", "acceptance"), ("verify_block", "acceptance")]:
        clock.wrap(speculative, fn, part)
    start = draft.start

    def timed_start(prompt, width):
        session = start(prompt, width)
        for method, part in [("propose_tree", "propose"), ("propose", "propose"), ("keep_path", "session bookkeeping"),
                             ("rollback", "session bookkeeping"), ("read_target", "session bookkeeping")]:
            clock.wrap(session, method, part)
        clock.wrap(session, "_run", "head forwards")
        return session

    draft.start = timed_start
    runs = {}

    def decode(label: str):
        results = []
        for ids in prompts:
            clock.blocks.clear()
            results.append(timed_decode(ids))
            runs.setdefault(label, []).extend(clock.blocks)
        return results

    def timed_decode(ids):
        # the block function runs inside run_blocks: time each from the loop's own calls to it
        from adaspec.decoding import blocks as blocks_module

        run_blocks = blocks_module.run_blocks

        def timed_run_blocks(block, **kwargs):
            def timed_block(*a):
                started = time.perf_counter()
                out = block(*a)
                clock.end_block(time.perf_counter() - started)
                return out

            return run_blocks(timed_block, **kwargs)

        speculative.run_blocks = timed_run_blocks
        try:
            generator = torch.Generator().manual_seed(0)
            return speculative.speculative_generate(
                target, draft, ids, gamma_policy=FixedGamma(gamma), max_new_tokens=128, eos_token_id=stop,
                temperature=args.temperature, generator=generator, tree=shape)
        finally:
            speculative.run_blocks = run_blocks

    decode("warm-up")
    profiler = cProfile.Profile() if args.cprofile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    results = decode("timed")
    if profiler:
        profiler.disable()
    wall = time.perf_counter() - started
    blocks = runs["timed"]
    parts = sorted({p for b in blocks for p in b}, key=lambda p: -sum(b.get(p, 0.0) for b in blocks))
    tokens = sum(len(r.tokens) for r in results)
    table = {p: {"median_ms": 1e3 * statistics.median(b.get(p, 0.0) for b in blocks),
                 "mean_ms": 1e3 * statistics.fmean(b.get(p, 0.0) for b in blocks),
                 "share": sum(b.get(p, 0.0) for b in blocks) / sum(b["block"] for b in blocks)} for p in parts}
    print(f"{len(blocks)} blocks, {tokens} tokens, tau {tokens / len(blocks):.2f}, {tokens / wall:.1f} tokens/s")
    print("| part | median ms | mean ms | share of block time |\n|---|---|---|---|")
    for p, row in table.items():
        print(f"| {p} | {row['median_ms']:.2f} | {row['mean_ms']:.2f} | {100 * row['share']:.0f} % |")
    policy = f"tree-{shape.name}" if shape else f"fixed-{gamma}"
    out = Path("bench/results") / f"decode-block-profile{'-' + args.name if args.name else ''}.json"
    out.write_text(json.dumps({"command": "python experiments/smollm2/profile_decode_block.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v not in (None, False)),
        "machine": describe_machine(), "serving": args.serving, "policy": policy, "temperature": args.temperature,
        "prompts": len(prompts), "blocks": len(blocks), "tokens": tokens, "tokens_per_s": tokens / wall,
        "parts": table}, indent=1) + "\n")
    print(f"-> {out}")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
