"""`python -m adaspec.commands.curves --run LABEL=FOLDER [...] --out DIR`: learning curves of trained stages.

Reads each stage folder's `logs/metrics.csv` (a run still training too: what it has logged so far) and writes
`DIR/curves.json` (every run's validation KL and greedy alpha by optimiser step, where each settled, its steps,
training seconds and tokens/s, the machine) and `DIR/curves.png` (adaspec.diagnostics.training_curves).
`make head-convergence` calls it on the head it trains.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from adaspec.errors import UserError, reported_as_one_line
from adaspec.machine import describe_machine
from adaspec.toolkit import write_json_atomically


def parse_run(text: str) -> tuple[str, Path]:
    label, sep, folder = text.rpartition("=")  # the last `=`: a label may say k=0.4
    if not sep or not label or not folder:
        raise UserError(f"--run {text!r}: expected LABEL=FOLDER (a stage folder holding logs/metrics.csv)")
    path = Path(folder)
    if not (path / "logs" / "metrics.csv").is_file():
        raise UserError(f"--run {text!r}: {path / 'logs' / 'metrics.csv'} does not exist; train the stage first")
    return label, path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True, help="LABEL=FOLDER, once per run")
    parser.add_argument("--out", type=Path, required=True, help="folder for curves.json and curves.png")
    parser.add_argument("--title", default="Learning curves")
    args = parser.parse_args(argv)
    with reported_as_one_line():
        runs = dict(parse_run(text) for text in args.run)
    from adaspec.diagnostics.training_curves import plot_training_curves, run_summary  # matplotlib: only here

    summaries = {label: run_summary(folder) for label, folder in runs.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomically(args.out / "curves.json", {"machine": describe_machine(), "runs": summaries})
    plot_training_curves(summaries, args.title, args.out / "curves.png")
    for label, run in summaries.items():
        kl, alpha = run["curves"]["val/kl"], run["curves"]["monitor/alpha"]
        print(f"{label}: {len(kl)} validations (last {kl[-1][1] if kl else 'none'} at step "
              f"{kl[-1][0] if kl else '-'}), {len(alpha)} monitor readings (last "
              f"{alpha[-1][1] if alpha else 'none'}); settled {run['settled_step']}")
    print(f"[adaspec] curves: {args.out / 'curves.json'}, {args.out / 'curves.png'}")


if __name__ == "__main__":
    main()
