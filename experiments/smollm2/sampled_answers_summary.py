"""The table of `sampled_answers.sh`'s arms: each reference head's acceptance greedy (40 prompts) and at
temperature 1 (20 prompts), gamma 3, chains, beside what its training logged.

    python experiments/smollm2/sampled_answers_summary.py [--n 1024] [--root FOLDER]

Reads {greedy,t1,ref-metrics}.json in experiments/results/smollm2/sampled-answers/
<arm>-n<N>[-seed<s>][-steps<k>][-lr<rate>][-passes<p>][-warm<w>]/ for the arms, seeds, step counts, learning rates,
training-time-test passes and one-pass warm-ups that have finished
and writes summary.md beside them, with each arm's paired differences from the greedy arm over the seeds both have
finished (95 % intervals from two seeds or more), and each run of other steps, rate, passes or warm-up from the
same arm at the recipe's (480 steps, 2e-3, 3 passes, no warm-up) and from the greedy arm at its own. The validation
KL is each arm's on its own answers (the greedy or the sampled answers to the same 64 problems; sampled-all's
include the unfinished ones), so it compares the heads only within an arm.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from adaspec.paper.stats import interval, mean_and_spread, paired_difference

ROOT = Path("experiments/results/smollm2/sampled-answers")
COMPARED = ("greedy alpha", "t1 alpha", "t1 accept rate")
ARMS = {
    "greedy": "the target's greedy answers",
    "sampled": "its answers sampled at temperature 1 (answer seed 0)",
    "sampled-all": "the same, the unfinished ones kept cut short",
}


def arm_row(folder: Path) -> dict[str, float] | None:
    files = {name: folder / f"{name}.json" for name in ("greedy", "t1", "ref-metrics")}
    if not all(f.exists() for f in files.values()):
        return None
    greedy, t1, metrics = (json.loads(f.read_text()) for f in files.values())
    head_greedy, head_t1 = greedy["drafts"]["ref"], t1["drafts"]["ref"]
    return {
        "greedy alpha": head_greedy["alpha"],
        "greedy tau": head_greedy["tau"],
        "t1 alpha": head_t1["alpha"],
        "t1 accept rate": head_t1["accept_rate"],
        "t1 tau": head_t1["tau"],
        "val KL (own answers)": metrics["val/kl"],
        "steps": metrics["steps"],
        "train s": metrics["train_seconds"],
    }


RECIPE_STEPS = 480
RECIPE_PASSES = 3
RECIPE = (RECIPE_STEPS, "", RECIPE_PASSES, 0)  # (steps, learning rate as sampled_answers.sh's LR, "" the
# recipe's 2e-3; passes of the training-time test; steps of one pass first)
Variant = tuple[int, str, int, int]


def arm_folders(root: Path, n: int) -> dict[tuple[str, Variant, int], Path]:
    """(arm, (steps, lr, passes, warm-up), seed) -> its folder, named as sampled_answers.sh names it: seed 0, the
    recipe's steps, learning rate, passes and warm-up without a suffix."""
    name = re.compile(rf"({'|'.join(map(re.escape, ARMS))})-n{n}(?:-seed(\d+))?(?:-steps(\d+))?(?:-lr(\S+?))?"
                      r"(?:-passes(\d+))?(?:-warm(\d+))?")
    found = {}
    for folder in root.iterdir():
        if folder.is_dir() and (match := name.fullmatch(folder.name)):
            arm, seed, steps, lr, passes, warmup = match.groups()
            variant = (int(steps or RECIPE_STEPS), lr or "", int(passes or RECIPE_PASSES), int(warmup or 0))
            found[arm, variant, int(seed or 0)] = folder
    return found


def variant_parts(variant: Variant) -> list[str]:
    steps, lr, passes, warmup = variant
    return (([] if steps == RECIPE_STEPS else [f"{steps} steps"]) + ([f"lr {lr}"] if lr else [])
            + ([] if passes == RECIPE_PASSES else [f"{passes} pass{'' if passes == 1 else 'es'}"])
            + ([f"the first {warmup} on one pass"] if warmup else []))


def arm_name(arm: str, variant: Variant) -> str:
    return ARMS[arm] + "".join(f", {part}" for part in variant_parts(variant))


def short_name(arm: str, variant: Variant) -> str:
    parts = variant_parts(variant)
    return arm + (f" ({', '.join(parts)})" if parts else "")


def differences(done: dict, arm: tuple[str, Variant], base: tuple[str, Variant]) -> list[str]:
    """`arm` − `base` (each (arm, (steps, lr, passes, warm-up))), paired by the seeds both have finished; nothing
    when none."""
    seeds = sorted(seed for a, variant, seed in done if (a, variant) == arm and (*base, seed) in done)
    if not seeds:
        return []
    lines = ["", f"{short_name(*arm)} − {short_name(*base)}, paired by seed ({', '.join(map(str, seeds))}; "
                 "mean ± std [95 % interval]):", ""]
    for c in COMPARED:
        d = paired_difference([done[(*arm, s)][c] for s in seeds], [done[(*base, s)][c] for s in seeds])
        lines.append(f"- {c}: {mean_and_spread(d, '+')}{interval(d, '+')}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1024, help="training problems, as sampled_answers.sh's N")
    parser.add_argument("--root", type=Path, default=ROOT, help="the arms' results folder")
    args = parser.parse_args()
    order = {arm: i for i, arm in enumerate(ARMS)}
    folders = sorted(arm_folders(args.root, args.n).items(), key=lambda kv: (kv[0][1], kv[0][2], order[kv[0][0]]))
    rows = {key: arm_row(folder) for key, folder in folders}
    done = {key: row for key, row in rows.items() if row}
    if not done:
        raise SystemExit(f"no finished arm under {args.root} for n={args.n}: run experiments/smollm2/sampled_answers.sh")
    columns = list(next(iter(done.values())))
    lines = [
        f"# demo-real's reference head on the first {args.n} GSM8K problems' answers: greedy against sampled",
        "",
        "Acceptance of chains at gamma 3: greedy on 40 test prompts, temperature 1 on 20; the seed is the head's.",
        "Written by `experiments/smollm2/sampled_answers_summary.py`.",
        "",
        "| trained on | seed | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for (arm, variant, seed), row in done.items():
        cells = [f"{row[c]:.0f}" if c in ("steps", "train s") else f"{row[c]:.3f}" for c in columns]
        lines.append(f"| {arm_name(arm, variant)} | {seed} | " + " | ".join(cells) + " |")
    for arm in list(ARMS)[1:]:
        lines += differences(done, (arm, RECIPE), ("greedy", RECIPE))
    varied = sorted({(a, variant) for a, variant, _ in done if variant != RECIPE})
    for arm, variant in varied:
        lines += differences(done, (arm, variant), (arm, RECIPE))
    for arm, variant in varied:  # the answers' effect at the varied runs' steps, rate, passes and warm-up too
        if arm != "greedy":
            lines += differences(done, (arm, variant), ("greedy", variant))
    (args.root / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
