"""experiments/smollm2/sampled_answers_summary.py: the table of sampled_answers.sh's finished runs, each arm's
paired differences from the greedy arm, and each longer run's (or other learning rate's, or other number of
training-time-test passes') from its own arm at the recipe's and from the greedy arm at its own; an unfinished run
is left out, and a folder with none names the script that makes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = REPO / "experiments" / "smollm2" / "sampled_answers_summary.py"


def write_run(root: Path, name: str, greedy: float, t1: float, steps: int = 480, finished: bool = True) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "greedy.json").write_text(json.dumps({"drafts": {"ref": {"alpha": greedy, "tau": 2.0}}}))
    (folder / "ref-metrics.json").write_text(json.dumps({"val/kl": 3.0, "steps": steps, "train_seconds": 100.0}))
    if finished:
        (folder / "t1.json").write_text(
            json.dumps({"drafts": {"ref": {"alpha": t1, "accept_rate": t1 / 2, "tau": 1.5}}}))


def summarise(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], cwd=REPO, capture_output=True,
                          text=True)


def summary_lines(root: Path) -> list[str]:
    done = summarise(root)
    assert done.returncode == 0, done.stderr
    return (root / "summary.md").read_text().splitlines()


def difference(lines: list[str], heading: str, metric: str) -> str:
    """The `metric` line under the first heading that starts with `heading`."""
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    return next(line for line in lines[start:] if line.startswith(f"- {metric}:"))


def sampled_all_rows(lines: list[str]) -> list[str]:
    """The first cell of each table row of the every-sampled-answer arm."""
    return [line.split(" | ")[0] for line in lines if line.startswith("| the same")]


def test_a_longer_run_is_compared_with_the_greedy_arm_at_its_own_steps(tmp_path):
    write_run(tmp_path, "greedy-n1024", greedy=0.55, t1=0.40)
    write_run(tmp_path, "sampled-all-n1024", greedy=0.53, t1=0.47)
    write_run(tmp_path, "greedy-n1024-steps1440", greedy=0.60, t1=0.45, steps=1440)
    write_run(tmp_path, "sampled-all-n1024-steps1440", greedy=0.58, t1=0.52, steps=1440)
    lines = summary_lines(tmp_path)
    assert difference(lines, "sampled-all (1440 steps) − greedy (1440 steps)", "t1 alpha") == "- t1 alpha: +0.070"
    assert difference(lines, "sampled-all (1440 steps) − sampled-all,", "t1 alpha") == "- t1 alpha: +0.050"
    assert difference(lines, "greedy (1440 steps) − greedy,", "greedy alpha") == "- greedy alpha: +0.050"
    assert difference(lines, "sampled-all − greedy,", "greedy alpha") == "- greedy alpha: -0.020"


def test_without_the_greedy_arm_at_those_steps_there_is_no_such_difference(tmp_path):
    # the negative control of the test above: the same runs less the greedy arm's longer one
    write_run(tmp_path, "greedy-n1024", greedy=0.55, t1=0.40)
    write_run(tmp_path, "sampled-all-n1024", greedy=0.53, t1=0.47)
    write_run(tmp_path, "sampled-all-n1024-steps1440", greedy=0.58, t1=0.52, steps=1440)
    lines = summary_lines(tmp_path)
    assert not any(line.startswith("sampled-all (1440 steps) − greedy") for line in lines)
    assert any(line.startswith("sampled-all (1440 steps) − sampled-all,") for line in lines)


def test_a_run_at_another_learning_rate_is_named_and_compared_with_its_arm_at_the_recipes(tmp_path):
    write_run(tmp_path, "greedy-n1024", greedy=0.55, t1=0.40)
    write_run(tmp_path, "sampled-all-n1024", greedy=0.53, t1=0.47)
    write_run(tmp_path, "sampled-all-n1024-lr4e-3", greedy=0.56, t1=0.50)
    write_run(tmp_path, "sampled-all-n1024-steps1440-lr4e-3", greedy=0.60, t1=0.55, steps=1440)
    lines = summary_lines(tmp_path)
    rows = sampled_all_rows(lines)
    assert rows == ["| the same, the unfinished ones kept cut short",
                    "| the same, the unfinished ones kept cut short, lr 4e-3",
                    "| the same, the unfinished ones kept cut short, 1440 steps, lr 4e-3"]
    assert difference(lines, "sampled-all (lr 4e-3) − sampled-all,", "t1 alpha") == "- t1 alpha: +0.030"
    assert difference(lines, "sampled-all (1440 steps, lr 4e-3) − sampled-all,", "t1 alpha") == "- t1 alpha: +0.080"
    # negative control: without the arm at the recipe's rate there is nothing to compare the rate with
    (tmp_path / "sampled-all-n1024" / "t1.json").unlink()
    assert not any(line.startswith("sampled-all (lr 4e-3) −") for line in summary_lines(tmp_path))


def test_a_run_with_fewer_passes_is_named_and_compared_with_its_arm_at_three(tmp_path):
    write_run(tmp_path, "greedy-n1024", greedy=0.55, t1=0.40)
    write_run(tmp_path, "sampled-all-n1024", greedy=0.53, t1=0.47)
    write_run(tmp_path, "sampled-all-n1024-steps720-passes2", greedy=0.55, t1=0.49, steps=720)
    write_run(tmp_path, "sampled-all-n1024-lr4e-3-passes2", greedy=0.54, t1=0.48)
    lines = summary_lines(tmp_path)
    rows = sampled_all_rows(lines)
    assert rows == ["| the same, the unfinished ones kept cut short",
                    "| the same, the unfinished ones kept cut short, lr 4e-3, 2 passes",
                    "| the same, the unfinished ones kept cut short, 720 steps, 2 passes"]
    assert difference(lines, "sampled-all (720 steps, 2 passes) − sampled-all,", "t1 alpha") == "- t1 alpha: +0.020"
    assert difference(lines, "sampled-all (lr 4e-3, 2 passes) − sampled-all,", "t1 alpha") == "- t1 alpha: +0.010"


def test_a_run_warmed_up_on_one_pass_is_named_and_compared_with_its_arm(tmp_path):
    write_run(tmp_path, "sampled-all-n1024", greedy=0.53, t1=0.47)
    write_run(tmp_path, "sampled-all-n1024-steps840-warm540", greedy=0.56, t1=0.50, steps=840)
    lines = summary_lines(tmp_path)
    rows = sampled_all_rows(lines)
    assert rows[1] == "| the same, the unfinished ones kept cut short, 840 steps, the first 540 on one pass"
    assert difference(lines, "sampled-all (840 steps, the first 540 on one pass) − sampled-all,",
                      "t1 alpha") == "- t1 alpha: +0.030"


def test_an_unfinished_run_is_left_out_and_an_empty_folder_is_refused(tmp_path):
    write_run(tmp_path, "greedy-n1024", greedy=0.55, t1=0.40)
    write_run(tmp_path, "sampled-all-n1024-seed1", greedy=0.53, t1=0.47, finished=False)
    rows = [line for line in summary_lines(tmp_path) if line.startswith("| the ")]
    assert [row.split(" | ")[1] for row in rows] == ["0"]  # greedy, seed 0 alone

    empty = tmp_path / "empty"
    empty.mkdir()
    done = summarise(empty)
    assert done.returncode != 0
    assert str(empty) in done.stderr and "sampled_answers.sh" in done.stderr
