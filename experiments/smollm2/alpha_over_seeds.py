"""One row of several bench-real runs (a head seed each, the same prompts), its alpha per run and pooled over runs,
each with a 95 % bootstrap interval over the prompts.

    .venv/bin/python experiments/smollm2/alpha_over_seeds.py --policy tree-k4-d3-n12+lookup8+sample --temperature 1 \
        bench/results/smollm2-demo-real-sampled-seed{0,1,2}-t1-alpha.json [--draft-prefix "sampled answers"]

Picks, in each file, the one row of `--temperature` and `--policy` whose draft starts with `--draft-prefix` (the
trained draft, not prompt lookup's rows of the same policy). Pooled: the runs' counts summed prompt by prompt, and
the prompts resampled as a whole (a resample draws prompt i for every run at once): the runs share their prompts, so
the prompts, not the runs, are the independent draws. Needs rows with `accepted_by_prompt` (bench-real from
2026-12-07 on). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from adaspec.commands.bench_real import alpha_interval


def pick_row(path: Path, policy: str, temperature: float, draft_prefix: str) -> dict:
    rows = [r for r in json.loads(path.read_text())["rows"] if r.get("policy") == policy
            and r.get("temperature") == temperature and str(r.get("draft")).startswith(draft_prefix)]
    if len(rows) != 1:
        sys.exit(f"{path}: {len(rows)} rows of policy {policy!r} at temperature {temperature:g} whose draft starts with "
                 f"{draft_prefix!r}; give --policy / --draft-prefix that pick one")
    if "accepted_by_prompt" not in rows[0]:
        sys.exit(f"{path}: its rows have no per-prompt counts (accepted_by_prompt); rerun its bench-real command")
    return rows[0]


def pooled(rows: list[dict]) -> tuple[list[int], list[int]]:
    counts = [(r["accepted_by_prompt"], r["rejected_by_prompt"]) for r in rows]
    if len({len(a) for a, _ in counts}) != 1:
        sys.exit("the runs decoded different numbers of prompts: pooling them prompt by prompt means nothing")
    return ([sum(a[i] for a, _ in counts) for i in range(len(counts[0][0]))],
            [sum(r[i] for _, r in counts) for i in range(len(counts[0][1]))])


def main(argv: list[str] | None = None) -> list[list]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--temperature", type=float, required=True)
    parser.add_argument("--draft-prefix", default="")
    args = parser.parse_args(argv)
    rows = [pick_row(f, args.policy, args.temperature, args.draft_prefix) for f in args.files]
    table = []
    for path, row in zip(args.files, rows, strict=True):
        low, high = alpha_interval(row["accepted_by_prompt"], row["rejected_by_prompt"])
        table.append([path.stem, len(row["accepted_by_prompt"]), row["alpha"], low, high])
    accepted, rejected = pooled(rows)
    low, high = alpha_interval(accepted, rejected)
    table.append([f"pooled over {len(rows)}", len(accepted), sum(accepted) / (sum(accepted) + sum(rejected)), low, high])
    print("| run | prompts | alpha | 95 % low | 95 % high |\n|---|---|---|---|---|")
    for name, n, alpha, lo, hi in table:
        print(f"| {name} | {n} | {alpha:.3f} | {lo:.3f} | {hi:.3f} |")
    return table


if __name__ == "__main__":
    main()
