"""What each change to the decoding loop bought (issue 29, item 4): `make bench-real`'s greedy run of one trained
draft at one gamma, once per target serving, in the order the changes were made: float32 on transformers'
DynamicCache (the loop as it was: the cache grows by concatenation and a rejection crops it by slicing), the
preallocated static cache (written in place, a rejection moves its length back), bfloat16, compiled bfloat16
(gpt-fast's torch.compile over the static cache), and whatever else `--servings` names (e.g. int8 weights).

Each serving is one bench-real run in this process: speculative decoding and target-only decoding in the same
serving, interleaved per prompt, so `speedup_vs_same_serving` is that change's own speed-up, and `vs first` puts
every run's tokens/s against the first serving's speculative tokens/s. Each run is watched for other processes'
CPU use (`adaspec.evaluation.contention.Watch`); a contended run is marked. The loop has no host
synchronisation to remove on the CPU (tensors and the host share memory: `.item()` costs no device round trip),
so the cache and the serving are the changes measured. Run it alone on the machine; the draft is demo-real's by
default (`make demo-real` first).

    .venv/bin/python experiments/smollm2/loop_changes.py [--prompts 4] [--gamma 3]
        [--servings float32,float32-static,bfloat16,bfloat16-static,bfloat16-compiled] [bench-real overrides ...]

Writes bench/results/smollm2-loop-changes.json and .md (each run's own bench-real JSON under
outputs/bench/loop-changes/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adaspec.commands import bench_real
from adaspec.evaluation.contention import Watch
from adaspec.toolkit import markdown_table, write_json_atomically

DEMO_REAL = ["model=smollm2", "task=gsm8k", "task.local_dir=../shared/data/gsm8k", "task.n_train=500", "task.n_val=64",
             "distill.data=target", "distill.teacher=cache", "distill.cache_mode=topk", "pretrain=none",
             "model.draft_kind=eagle3", "distill.ttt_passes=3"]
SERVINGS = "float32,float32-static,bfloat16,bfloat16-static,bfloat16-compiled"
OUT = Path("bench/results/smollm2-loop-changes")
RUNS = Path("outputs/bench/loop-changes")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--gamma", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--servings", default=SERVINGS)
    parser.add_argument("--out", type=Path, default=OUT, help="<out>.json and <out>.md")
    parser.add_argument("overrides", nargs="*", help="bench-real's Hydra overrides (default: demo-real's heads)")
    return parser.parse_args(argv)


def one_serving(serving: str, args: argparse.Namespace) -> dict:
    argv = ["--name", serving, "--out", str(RUNS), "--prompts", str(args.prompts), "--gammas", str(args.gamma),
            "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads), "--temperatures", "0",
            "--no-adaptive", "--serving", serving, "--servings", serving, *(args.overrides or DEMO_REAL), "baseline=[]"]
    watch = Watch()
    payload = bench_real.main(argv)
    row = next(r for r in payload["rows"] if r["draft"] == "trained")
    return {"serving": serving, "command": payload["command"], "contention": watch.verdict(),
            "tokens_per_s": row["tokens_per_s"], "target_only/tokens_per_s": row["target_only/tokens_per_s"],
            "speedup_vs_same_serving": row["speedup_vs_same_serving"], "alpha": row["alpha"],
            "greedy_mismatches": row["greedy_mismatches"], "target_1_ms": 1000 * payload["costs"]["target_1_s"],
            "verify_ms": 1000 * payload["costs"]["target_verify_s"][args.gamma],
            "compile_seconds": payload["compile_seconds"]}


def table(runs: list[dict]) -> str:
    first = runs[0]["tokens_per_s"]
    columns = ["target serving", "target-only tokens/s", "speculative tokens/s", "vs same serving", "vs first",
               "alpha", "1-token step (ms)", "verification (ms)", "greedy mismatches", "machine"]
    rows = [[r["serving"], f"{r['target_only/tokens_per_s']:.1f}", f"{r['tokens_per_s']:.1f}",
             f"{r['speedup_vs_same_serving']:.2f}x", f"{r['tokens_per_s'] / first:.2f}x", f"{r['alpha']:.3f}",
             f"{r['target_1_ms']:.1f}", f"{r['verify_ms']:.1f}", str(r["greedy_mismatches"]),
             "busy" if r["contention"]["contended"] else "quiet"] for r in runs]
    return markdown_table(columns, rows)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    result = {"command": "python experiments/smollm2/loop_changes.py " + " ".join(argv), "gamma": args.gamma,
              "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "runs": []}
    for serving in [s for s in args.servings.split(",") if s]:
        result["runs"].append(one_serving(serving, args))
        write_json_atomically(args.out.with_suffix(".json"), result, sort_keys=True)  # after every serving
    text = table(result["runs"])
    args.out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return result


if __name__ == "__main__":
    main()
