"""The acceptance monitor inside real Lightning training runs: monitor/* columns in metrics.csv."""

from __future__ import annotations

import csv

from adaspec.artefacts import paths
from adaspec.callbacks.acceptance import prompt_ids
from adaspec.data.encoding import IGNORE, Encoded
from adaspec.training.stage_specs import stage_dir


def monitor_rows(cfg) -> tuple[list[str], list[dict[str, str]]]:
    with open(stage_dir(paths.of(cfg)) / "logs" / "metrics.csv") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), [r for r in reader if r.get("monitor/alpha")]


def test_monitor_logs_acceptance_every_n_steps_and_at_the_end(trained):
    expected_steps = {("ref",): [4], ("draft", "k=0.4"): [2, 4], ("draft", "k=1.0"): [4]}
    for (stage, *rest), steps in expected_steps.items():
        columns, rows = monitor_rows(trained(f"stage={stage}", *rest))
        assert {"monitor/alpha", "monitor/accept_rate", "monitor/tau"} <= set(columns)
        assert [f"monitor/reject_rate_at/{i}" for i in range(1, 6)] == [c for c in columns if "reject_rate_at" in c]
        assert [int(r["step"]) for r in rows] == steps
        for r in rows:
            assert 0.0 <= float(r["monitor/alpha"]) <= 1.0
            assert 0.0 <= float(r["monitor/accept_rate"]) <= 1.0
            assert float(r["monitor/tau"]) >= 1.0
            assert sum(float(r[f"monitor/reject_rate_at/{i}"]) for i in range(1, 6)) <= 1.0 + 1e-9
    columns, _ = monitor_rows(trained("stage=target"))
    assert "monitor/alpha" not in columns  # stage 1 has no draft


def test_prompt_ids_are_the_unlabelled_prefix():
    examples = [
        Encoded([5, 6, 7, 8], [IGNORE, IGNORE, 7, 8]),
        Encoded([1, 2], [IGNORE, IGNORE]),  # truncated inside the prompt: skipped
        Encoded([9, 3], [9, 3]),  # no prompt: skipped
        Encoded([4, 4, 1], [IGNORE, 4, 1]),
        Encoded([2, 2, 2], [IGNORE, 2, 2]),
    ]
    assert prompt_ids(examples, 2) == [[5, 6], [4]]
    assert prompt_ids(examples, 0) == []
