"""One bench-real row of several head seeds (a run each, or several drafts of one run, on the same prompts): its alpha
per seed and pooled over them, each with a 95 % bootstrap interval over the prompts.

    .venv/bin/python experiments/smollm2/alpha_over_seeds.py --policy tree-k4-d3-n12+lookup8+sample --temperature 1 \
        --draft-prefix "head seed" bench/results/smollm2-demo-real-sampled-seeds-t1-p40.json [more runs ...]

Takes, from every file, each row of `--temperature` and `--policy` whose draft starts with `--draft-prefix` (the
trained drafts, not prompt lookup's rows of the same policy). Pooled: the seeds' counts summed prompt by prompt, and
the prompts resampled as a whole (a resample draws prompt i for every seed at once): the seeds share their prompts,
so the prompts, not the seeds, are the independent draws. Needs rows with `accepted_by_prompt` (bench-real from
2026-12-07 on). Prints a markdown table.

`--against <prefix>` adds the difference of the pooled alphas, the picked drafts' minus those whose names start with
`<prefix>` (the same files, policy and temperature), with its paired 95 % interval: each resample draws the same
prompts for both, since both decoded them.

    .venv/bin/python experiments/smollm2/alpha_over_seeds.py --policy fixed-3 --temperature 1 \
        --draft-prefix "n4096 head seed" --against "head seed" bench/results/smollm2-demo-real-sampled-n4096-t1-p40.json

`--against-policy <policy>` compares with another policy's rows instead (the same drafts unless `--against` names
others), paired the same way: e.g. one tree shape against another for the same heads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from adaspec.commands.bench_real import alpha_interval, bootstrap_95, picked_alpha, pooled_alpha


def pick_rows(path: Path, policy: str, temperature: float, draft_prefix: str) -> list[tuple[str, dict]]:
    """(a name, the row) of each row of `path` that the options pick; exits with one line where none is usable."""
    rows = [r for r in json.loads(path.read_text())["rows"] if r.get("policy") == policy
            and r.get("temperature") == temperature and str(r.get("draft")).startswith(draft_prefix)]
    if not rows:
        sys.exit(f"{path}: no row of policy {policy!r} at temperature {temperature:g} whose draft starts with "
                 f"{draft_prefix!r}")
    if any("accepted_by_prompt" not in r for r in rows):
        sys.exit(f"{path}: its rows have no per-prompt counts (accepted_by_prompt); rerun its bench-real command")
    return [(f"{path.stem}: {r['draft']}", r) for r in rows]


def pooled(rows: list[dict]) -> tuple[list[int], list[int]]:
    counts = [(r["accepted_by_prompt"], r["rejected_by_prompt"]) for r in rows]
    if len({len(a) for a, _ in counts}) != 1:
        sys.exit("the runs decoded different numbers of prompts: pooling them prompt by prompt means nothing")
    return ([sum(a[i] for a, _ in counts) for i in range(len(counts[0][0]))],
            [sum(r[i] for _, r in counts) for i in range(len(counts[0][1]))])


def difference(first: tuple[list[int], list[int]], second: tuple[list[int], list[int]]) -> list[float]:
    """pooled alpha of `first` minus that of `second` (each: per-prompt accepted and rejected counts on the same
    prompts), and its 95 % bootstrap interval, the prompts resampled in pairs."""
    if len(first[0]) != len(second[0]):
        sys.exit("--against: the two drafts' rows decoded different numbers of prompts: no paired difference")
    low, high = bootstrap_95(len(first[0]), lambda picks: picked_alpha(*first, picks) - picked_alpha(*second, picks))
    return [pooled_alpha(*first) - pooled_alpha(*second), low, high]


def main(argv: list[str] | None = None) -> list[list]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--temperature", type=float, required=True)
    parser.add_argument("--draft-prefix", required=True, help="the trained drafts' names start with it")
    parser.add_argument("--against", help="also the pooled alpha's paired difference from the drafts named so")
    parser.add_argument("--against-policy", help="... or from the same drafts' (or --against's) rows of this policy")
    args = parser.parse_args(argv)
    picked = [pick for f in args.files for pick in pick_rows(f, args.policy, args.temperature, args.draft_prefix)]
    rows = [row for _, row in picked]
    table = []
    for name, row in picked:
        low, high = alpha_interval(row["accepted_by_prompt"], row["rejected_by_prompt"])
        table.append([name, len(row["accepted_by_prompt"]), row["alpha"], low, high])
    accepted, rejected = pooled(rows)
    low, high = alpha_interval(accepted, rejected)
    table.append([f"pooled over {len(rows)}", len(accepted), pooled_alpha(accepted, rejected), low, high])
    if args.against or args.against_policy:
        policy, prefix = args.against_policy or args.policy, args.against or args.draft_prefix
        others = [row for f in args.files for _, row in pick_rows(f, policy, args.temperature, prefix)]
        names = (f"{args.draft_prefix} {args.policy}", f"{prefix} {policy}") if args.against_policy else (
            args.draft_prefix, prefix)
        table.append([f"{names[0]} − {names[1]}, pooled over {len(rows)} and {len(others)}, paired by "
                      f"prompt", len(accepted), *difference((accepted, rejected), pooled(others))])
    print("| run | prompts | alpha | 95 % low | 95 % high |\n|---|---|---|---|---|")
    for name, n, alpha, lo, hi in table:
        print(f"| {name} | {n} | {alpha:.3f} | {lo:.3f} | {hi:.3f} |")
    return table


if __name__ == "__main__":
    main()
