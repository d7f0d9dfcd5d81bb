"""Is demo-real's EAGLE-3 head data- or steps-limited (issue 30)? Its held-out KL against optimizer steps for
the reference heads `head_answers.sh` trains, from their committed Lightning logs.

    python experiments/smollm2/head_data_curves.py [--out experiments/results/smollm2/head-data-val-kl.png]

The N=500 heads validate on the target's answers to training problems 500-563, the N=1000 head on 1000-1063:
compare its curve with the others' by shape, not by the last digit.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from matplotlib.figure import Figure

from adaspec.evaluation.curves import save_png

RESULTS = Path(__file__).resolve().parents[1] / "results" / "smollm2"
RUNS = {  # label: the run's metrics.csv (Lightning's CSV logger, copied from the head's logs/)
    "N=500, 6 epochs (demo-real), val 500-563": RESULTS / "demo-real-eagle3" / "ref-metrics.csv",
    "N=500, 12 epochs (steps control), val 500-563": RESULTS / "head-answers-n500-e12" / "ref-metrics.csv",
    "N=1000, 6 epochs, val 1000-1063": RESULTS / "head-answers-n1000" / "ref-metrics.csv",
}


def val_kl_curve(path: Path) -> tuple[list[int], list[float]]:
    """(step, val/kl) of every validation row, once per step (the last validation also logs at step + 1)."""
    points: dict[int, float] = {}
    with path.open() as rows:
        for row in csv.DictReader(rows):
            if row.get("val/kl"):
                step = int(row["step"])
                if step - 1 not in points:
                    points[step] = float(row["val/kl"])
    return list(points), list(points.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "head-data-val-kl.png")
    args = parser.parse_args()
    fig = Figure(figsize=(6.5, 4))
    ax = fig.add_subplot()
    for label, path in RUNS.items():
        steps, kl = val_kl_curve(path)
        ax.plot(steps, kl, marker="o", label=label)
        print(f"{label}: val/kl {kl[-1]:.3f} after {steps[-1] + 1} steps")
    ax.set(title="EAGLE-3 reference head: held-out KL(target || head)", xlabel="optimizer step",
           ylabel="val/kl (nats per answer token)")
    ax.grid(alpha=0.3)
    ax.legend()
    print(f"wrote {save_png(fig, args.out)}")


if __name__ == "__main__":
    main()
