"""The table of `sampled_answers.sh`'s arms: each reference head's acceptance greedy (40 prompts) and at
temperature 1 (20 prompts), gamma 3, chains, beside what its training logged.

    python experiments/smollm2/sampled_answers_summary.py [--n 1024]

Reads experiments/results/smollm2/sampled-answers/<arm>-n<N>/{greedy,t1,ref-metrics}.json for the arms that
have finished and writes summary.md beside them. The validation KL is each arm's on its own answers (the greedy
or the sampled answers to the same 64 problems), so it compares the heads only within an arm.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path("experiments/results/smollm2/sampled-answers")
ARMS = {"greedy": "the target's greedy answers", "sampled": "its answers sampled at temperature 1 (seed 0)"}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1024, help="training problems, as sampled_answers.sh's N")
    args = parser.parse_args()
    rows = {arm: arm_row(ROOT / f"{arm}-n{args.n}") for arm in ARMS}
    done = {arm: row for arm, row in rows.items() if row}
    if not done:
        raise SystemExit(f"no finished arm under {ROOT} for n={args.n}: run experiments/smollm2/sampled_answers.sh")
    columns = list(next(iter(done.values())))
    lines = [
        f"# demo-real's reference head on the first {args.n} GSM8K problems' answers: greedy against sampled",
        "",
        "One seed; acceptance of chains at gamma 3: greedy on 40 test prompts, temperature 1 on 20.",
        "Written by `experiments/smollm2/sampled_answers_summary.py`.",
        "",
        "| trained on | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for arm, row in done.items():
        cells = [f"{row[c]:.0f}" if c in ("steps", "train s") else f"{row[c]:.3f}" for c in columns]
        lines.append(f"| {ARMS[arm]} | " + " | ".join(cells) + " |")
    if len(done) == len(ARMS):
        diff = {c: done["sampled"][c] - done["greedy"][c] for c in ("greedy alpha", "t1 alpha", "t1 accept rate")}
        lines += ["", "Sampled − greedy: " + ", ".join(f"{c} {v:+.3f}" for c, v in diff.items()) + "."]
    (ROOT / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
