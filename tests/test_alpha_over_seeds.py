"""experiments/smollm2/alpha_over_seeds.py: one bench-real row of several head seeds, its alpha per seed and pooled
prompt by prompt; it takes the trained drafts' rows, not prompt lookup's of the same policy, and refuses rows it cannot
pool."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "experiments" / "smollm2" / "alpha_over_seeds.py"
POLICY = "tree-k4-d3-n12+lookup8+sample"


def head_row(seed: int, accepted: list[int], rejected: list[int], label: str = "head seed") -> dict:
    return {"temperature": 1.0, "policy": POLICY, "draft": f"{label} {seed}", "accepted_by_prompt": accepted,
            "rejected_by_prompt": rejected, "alpha": sum(accepted) / (sum(accepted) + sum(rejected))}


def bench(path: Path, *heads: dict) -> Path:
    n = len(heads[0]["accepted_by_prompt"])
    rows = [*heads,
            {"temperature": 1.0, "policy": POLICY, "draft": "prompt_lookup", "accepted_by_prompt": [1] * n,
             "rejected_by_prompt": [4] * n, "alpha": 0.2},
            {**heads[0], "temperature": 0.0, "accepted_by_prompt": [9] * n, "rejected_by_prompt": [1] * n}]
    path.write_text(json.dumps({"rows": rows}))
    return path


def load_script():
    spec = importlib.util.spec_from_file_location("alpha_over_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ALPHA_OVER_SEEDS = load_script()  # run in this process: a subprocess per call spends seconds importing torch


def run(*args) -> str:
    """The script's printed table; its one-line refusal raises SystemExit with that line."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ALPHA_OVER_SEEDS.main(["--policy", POLICY, "--temperature", "1", *map(str, args)])
    return out.getvalue()


def refusal(*args) -> str:
    with pytest.raises(SystemExit) as stopped:
        run(*args)
    assert isinstance(stopped.value.code, str) and "\n" not in stopped.value.code  # one line, exit status 1
    return stopped.value.code


def table(printed: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in printed.splitlines()[2:]]


def test_seeds_are_pooled_prompt_by_prompt(tmp_path):
    a = bench(tmp_path / "a.json", head_row(0, [6, 2, 4], [2, 2, 4]))  # 12 / 20 = 0.6
    b = bench(tmp_path / "b.json", head_row(1, [0, 4, 2], [2, 2, 0]))  # 6 / 10 = 0.6, from other prompts
    rows = table(run(a, b, "--draft-prefix", "head"))
    assert [r[0] for r in rows] == ["a: head seed 0", "b: head seed 1", "pooled over 2"]
    assert [float(r[2]) for r in rows] == pytest.approx([0.6, 0.6, 0.6], abs=5e-4)
    low, high = map(float, rows[1][3:5])
    pooled_low, pooled_high = map(float, rows[2][3:5])
    assert low < 0.6 < high  # the prompts differ within a seed ...
    # ... and summed prompt by prompt they are alike (6 of 10 each): resampling each seed's prompts on their own would
    # still spread it
    assert pooled_low == pooled_high == pytest.approx(0.6, abs=5e-4)
    # several seeds' drafts of one run are the same as runs of their own; prompt lookup's row is never taken
    one_run = bench(tmp_path / "one.json", head_row(0, [6, 2, 4], [2, 2, 4]), head_row(1, [0, 4, 2], [2, 2, 0]))
    rows = table(run(one_run, "--draft-prefix", "head"))
    assert [r[0] for r in rows] == ["one: head seed 0", "one: head seed 1", "pooled over 2"]
    assert [float(c) for c in rows[2][2:5]] == pytest.approx([0.6, 0.6, 0.6], abs=5e-4)


def test_rows_that_cannot_be_pooled_are_refused(tmp_path):
    a = bench(tmp_path / "a.json", head_row(0, [6, 2, 4], [2, 2, 4]))
    none = refusal(a, "--draft-prefix", "independent")
    assert "no row of policy" in none and "a.json" in none
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"rows": [{"temperature": 1.0, "policy": POLICY, "draft": "head", "alpha": 0.5}]}))
    refused = refusal(old, "--draft-prefix", "head")
    assert "accepted_by_prompt" in refused and "old.json" in refused
    shorter = bench(tmp_path / "shorter.json", head_row(1, [6, 2], [2, 2]))
    assert "different numbers of prompts" in refusal(a, shorter, "--draft-prefix", "head")


def test_against_gives_the_paired_difference_of_two_kinds_of_head(tmp_path):
    """Heads of another recipe ("n4096 head seed") against the default ones on the same prompts: every prompt judges 10
    tokens for both and the new heads accept one more on each, so the difference is 0.1 in every resample of the
    prompts drawn in pairs (resampled apart, the prompts' spread would widen it); "head seed" never picks the others."""
    path = bench(tmp_path / "both.json", head_row(0, [6, 3, 5], [4, 7, 5]), head_row(1, [6, 3, 5], [4, 7, 5]),
                 head_row(0, [7, 4, 6], [3, 6, 4], label="n4096 head seed"),
                 head_row(1, [7, 4, 6], [3, 6, 4], label="n4096 head seed"))
    rows = table(run(path, "--draft-prefix", "n4096 head seed", "--against", "head seed"))
    assert [r[0] for r in rows][:3] == ["both: n4096 head seed 0", "both: n4096 head seed 1", "pooled over 2"]
    assert rows[3][0] == "n4096 head seed − head seed, pooled over 2 and 2, paired by prompt"
    assert [float(c) for c in rows[3][1:5]] == pytest.approx([3, 0.1, 0.1, 0.1], abs=5e-4)
    alone = table(run(path, "--draft-prefix", "head seed"))
    assert [r[0] for r in alone] == ["both: head seed 0", "both: head seed 1", "pooled over 2"]
    assert float(alone[2][2]) == pytest.approx(14 / 30, abs=5e-4)
    fewer = bench(tmp_path / "fewer.json", head_row(0, [6, 3], [4, 7]), head_row(0, [7, 4, 6], [3, 6, 4], label="new"))
    assert "different numbers of prompts" in refusal(fewer, "--draft-prefix", "new", "--against", "head seed")
    assert "no row of policy" in refusal(fewer, "--draft-prefix", "new", "--against", "independent")


def test_against_policy_gives_the_paired_difference_of_two_shapes_for_the_same_heads(tmp_path):
    """One tree shape against another, both decoded by the same heads on the same prompts: here the other shape accepts
    one token fewer of every 10 on every prompt, so the difference is 0.1 in every paired resample; a policy that no
    row has is refused with one line."""
    other_shape = "tree-k4-d3-n12+lookup8+sample-all"
    heads = [head_row(0, [6, 3, 5], [4, 7, 5]), head_row(1, [6, 3, 5], [4, 7, 5])]
    lower = [{**row, "policy": other_shape, "accepted_by_prompt": [5, 2, 4], "rejected_by_prompt": [5, 8, 6]}
             for row in heads]
    path = bench(tmp_path / "shapes.json", *heads, *lower)
    rows = table(run(path, "--draft-prefix", "head seed", "--against-policy", other_shape))
    assert [r[0] for r in rows][:3] == ["shapes: head seed 0", "shapes: head seed 1", "pooled over 2"]
    assert rows[3][0] == f"head seed {POLICY} − head seed {other_shape}, pooled over 2 and 2, paired by prompt"
    assert [float(c) for c in rows[3][1:5]] == pytest.approx([3, 0.1, 0.1, 0.1], abs=5e-4)
    assert "no row of policy 'fixed-3'" in refusal(path, "--draft-prefix", "head seed", "--against-policy", "fixed-3")


BENCH_SEEDS = REPO / "experiments" / "smollm2" / "bench_head_seeds.sh"
HEAD = "{root}/gsm8k/smollm2/seed{seed}/draft-k0.4-eagle3-warm540-target-answers-t1-s0-b64-unfinished/final"


def test_bench_head_seeds_names_a_missing_head_and_the_command_that_trains_it(tmp_path):
    """Run where no head was trained (an empty folder for the repository root), it stops before bench-real with one
    line naming the missing folder's seed and the training command; an unknown kind of run gets the usage."""
    missing = subprocess.run(["bash", str(BENCH_SEEDS), "greedy"], cwd=tmp_path, capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "seed0/draft-k0.4-eagle3-warm540" in missing.stderr and "make demo-real ARGS=seed=0" in missing.stderr
    assert not (tmp_path / "experiments").exists()  # nothing written
    # a head of another recipe, under a root of its own: the command names the root
    (tmp_path / HEAD.format(root="outputs", seed=0)).mkdir(parents=True)
    (tmp_path / HEAD.format(root="outputs", seed=0) / "model.safetensors").touch()
    other = subprocess.run(["bash", str(BENCH_SEEDS), "t1", "head seed=outputs", "n4096 head seed=outputs/n4096"],
                           cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "SEEDS": "0"})
    assert other.returncode == 1 and other.stderr.count("\n") == 1
    assert other.stderr.startswith(HEAD.format(root="outputs/n4096", seed=0))
    assert "ARGS='seed=0 paths.root=outputs/n4096'" in other.stderr
    usage = subprocess.run(["bash", str(BENCH_SEEDS), "t2"], cwd=tmp_path, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr
