"""`python -m adaspec.commands.evaluate` end to end on a tiny trained pipeline, and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adaspec.artefacts import paths
from adaspec.errors import UserError, reported_as_one_line
from adaspec.evaluation.run import run_evaluation
from tests.conftest import REPO
from tests.wandb_log import summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FAST = ["eval.n_prompts=3", "decode.max_new_tokens=16", "eval.num_threads=1"]


def test_evaluation_end_to_end(trained, capsys):
    cfg = trained(*FAST, "decode.draft_quant=int8", "logger=wandb")
    run_evaluation(cfg, progress=False)
    printed = capsys.readouterr().out
    folder = paths.of(cfg).eval_dir() / "greedy-g5"
    text = (folder / "results.json").read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON
    results = json.loads(text)

    assert results["metric"] == "gsm8k/exact_match" and results["n_prompts"] == 3
    assert results["config"]["eval"]["n_prompts"] == 3 and results["config"]["decode"]["draft_quant"] == "int8"
    assert {"torch", "transformers", "python", "adaspec"} <= set(results["versions"])
    target = results["target"]
    assert 0.0 <= target["gsm8k/exact_match"] <= 1.0
    assert target["tokens_per_s"] == pytest.approx(target["new_tokens"] / target["wall_time_s"])
    assert set(results["drafts"]) == {"k0.4", "k0.4-int8", "k1", "k1-int8", "prompt_lookup"}
    lookup = results["drafts"]["prompt_lookup"]  # the training-free baseline row (baseline=[prompt_lookup])
    assert lookup["draft"] == {"kind": "prompt_lookup", "parameters": 0, "max_ngram_size": 3, "min_ngram_size": 1}
    assert lookup["greedy_mismatches"] == 0 and lookup["hf_assisted/greedy_mismatches"] == 0
    assert lookup["acceptance_vs_gamma"]["replay_mismatches"] == 0
    assert lookup["speedup_vs_hf_assisted"] == pytest.approx(lookup["hf_assisted/wall_time_s"] / lookup["wall_time_s"])
    assert lookup["draft_calls"] <= 5 * lookup["blocks"] and lookup["train_seconds"] == 0
    for name, row in results["drafts"].items():
        if name == "prompt_lookup":
            continue
        assert 0.0 <= row["alpha"] <= 1.0 and 0.0 <= row["accept_rate"] <= row["alpha"] + 1e-12
        assert row["tau"] >= 1.0
        rejects = [row[f"reject_rate_at/{i}"] for i in range(1, 6)]
        assert all(0.0 <= r <= 1.0 for r in rejects) and sum(rejects) <= 1.0 + 1e-9
        assert row["target_calls"] == row["blocks"] and row["new_tokens"] == target["new_tokens"]
        assert row["blocks"] <= row["draft_calls"] <= 5 * row["blocks"]  # gamma 5: one to five proposals a block
        assert row["tokens_per_s"] == pytest.approx(row["new_tokens"] / row["wall_time_s"])
        # one serving configuration: the fastest target-only run is the run in the same configuration
        assert row["speedup_vs_target"] == pytest.approx(target["wall_time_s"] / row["wall_time_s"])
        assert row["speedup_vs_same_serving"] == row["speedup_vs_target"]
        assert row["train_seconds"] == json.loads((Path(row["path"]) / "metrics.json").read_text())["train_seconds"] > 0
        assert row["greedy_mismatches"] == 0  # float32 speculative greedy == target-only greedy
        assert row["gsm8k/exact_match"] == target["gsm8k/exact_match"]
        if name.endswith("int8"):
            assert row["draft_quant"] == "int8" and row["speedup_vs_hf_assisted"] is None
        else:
            assert row["hf_assisted/greedy_mismatches"] == 0  # so HF emitted the target's tokens, as many
            assert row["hf_assisted/tokens_per_s"] == pytest.approx(target["new_tokens"] / row["hf_assisted/wall_time_s"])
            assert row["speedup_vs_hf_assisted"] == pytest.approx(row["hf_assisted/wall_time_s"] / row["wall_time_s"])
        sweep = row["acceptance_vs_gamma"]
        assert sweep["method"] == "replay" and sweep["replay_mismatches"] == 0
        assert set(sweep["by_gamma"]) == {"1", "2", "3", "5", "8"}
        assert sweep["by_gamma"]["5"]["alpha"] == pytest.approx(row["alpha"])  # replay == measured at gamma 5
        assert all(0.0 <= s["alpha"] <= 1.0 and s["tau"] >= 1.0 for s in sweep["by_gamma"].values())
        speedups = row["expected_speedup_by_gamma"]  # from the sweep's tau and the measured call costs
        costs = results["costs"]
        assert speedups["5"] == pytest.approx(sweep["by_gamma"]["5"]["tau"] * costs["target_1_s"] / (
            5 * costs["draft_1_s"][name] + costs["target_verify_s"]["5"]))
        assert row["expected_speedup_at_best_gamma"] == max(speedups.values()) == speedups[str(row["best_gamma"])]

    table = (folder / "results.md").read_text()
    for column in ("alpha", "accept_rate", "tau", "speedup_vs_target", "speedup_vs_hf_assisted", "tokens/s",
                   "gsm8k/exact_match", "AdaSPEC k=0.4", "DistillSpec k=1 int8", "prompt lookup", "best gamma"):
        assert column in table
    assert table in printed  # printed at the end
    for png in ("reject_rate_curve.png", "alpha_vs_gamma.png"):
        assert (folder / png).read_bytes().startswith(PNG_MAGIC)
    assert not list(folder.glob(".*.tmp"))  # atomic writes leave no temporary files
    runs = list((folder / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    logged = summary(runs[0])  # W&B holds the values results.json holds
    for name, row in results["drafts"].items():
        assert logged[f"{name}/alpha"] == row["alpha"] and logged[f"{name}/tau"] == row["tau"]
    assert logged["target/gsm8k/exact_match"] == target["gsm8k/exact_match"]


def test_timed_runs_beside_a_busy_process_are_marked_in_the_results(trained, capsys):
    """The evaluation watches the other processes' CPU time over its timed runs: a job sharing the cores marks
    the results (acceptance stands; tokens/s and speed-ups are flagged), in results.json, results.md and aloud."""
    from adaspec.evaluation.run import results_dir

    cfg = trained(*FAST, "eval.name=busy")
    busy = subprocess.Popen([sys.executable, "-c", "print('spinning', flush=True)\nwhile True: pass"],
                            stdout=subprocess.PIPE, text=True)
    try:
        # the loop has begun before the watch starts. Once, on a loaded CI runner (the reference kernel 35 ms
        # before, 77 after), the watch saw the cores quiet; the child's start-up was the one step not waited for
        assert busy.stdout.readline().strip() == "spinning"
        results = run_evaluation(cfg, progress=False)
    finally:
        busy.kill()
        busy.wait()
    verdict = results["contention"]
    assert verdict["contended"], verdict
    assert "other processes used" in verdict["why"]
    assert "WARNING: other processes used" in capsys.readouterr().out
    report = (results_dir(paths.of(cfg), cfg.decode, cfg.eval.name) / "results.md").read_text()
    assert "**Timings contended**" in report
    # the machine's own speed beside it: the reference kernel's time before and after the runs, reported
    assert set(verdict["kernel_ms"]) == {"before", "after"}
    assert f"took {verdict['kernel_ms']['before']:.1f} ms before the timed runs" in report


def test_sampling_with_an_adaptive_policy(trained):
    cfg = trained(*FAST, "eval.draft_ks=[0.4]", "decode=adaptive", "decode.temperature=0.8",
                  "eval.compare_hf_assisted=false", "eval.gammas=[1,3]", "eval.gamma_sweep_prompts=2")
    results = run_evaluation(cfg, progress=False)
    assert (paths.of(cfg).eval_dir() / "t0.8-adaptive-g5" / "results.json").is_file()
    row = results["drafts"]["k0.4"]
    assert row["greedy_mismatches"] is None and row["speedup_vs_hf_assisted"] is None
    assert 0.0 <= row["alpha"] <= 1.0 and row["tau"] >= 1.0
    assert row["acceptance_vs_gamma"]["method"] == "sampled" and set(row["acceptance_vs_gamma"]["by_gamma"]) == {"1", "3"}


def test_timing_a_few_prompts_and_replaying_the_rest_gives_every_prompts_acceptance(trained):
    every = ["eval.n_prompts=5", "decode.max_new_tokens=16", "eval.num_threads=1", "eval.compare_hf_assisted=false"]
    all_timed = run_evaluation(trained(*every, "eval.name=all-timed"), progress=False)
    two_timed = run_evaluation(trained(*every, "eval.timed_prompts=2", "eval.name=two-timed"), progress=False)
    assert two_timed["timed_prompts"] == 2 and all_timed["timed_prompts"] == 5 == two_timed["n_prompts"]
    assert two_timed["target"]["new_tokens"] == all_timed["target"]["new_tokens"]
    for name, row in two_timed["drafts"].items():
        full = all_timed["drafts"][name]
        acceptance = ["alpha", "accept_rate", "tau", "blocks", "target_calls", "draft_calls", "new_tokens"]
        assert {m: row[m] for m in acceptance} == {m: full[m] for m in acceptance}  # replay is exact
        assert [row[f"reject_rate_at/{i}"] for i in range(1, 6)] == [full[f"reject_rate_at/{i}"] for i in range(1, 6)]
        assert row["acceptance_vs_gamma"]["by_gamma"] == full["acceptance_vs_gamma"]["by_gamma"]
        assert row["timed_prompts"] == 2 and row["speedup_vs_target"] > 0 and row["greedy_mismatches"] == 0
        assert row["gsm8k/exact_match"] == full["gsm8k/exact_match"]


def test_missing_artefacts_name_the_make_command(trained, tiny_cfg):
    with pytest.raises(UserError, match=r"make stage3 .*k=0\.3"):
        run_evaluation(trained("eval.draft_ks=[0.4,0.3]"))
    with pytest.raises(UserError, match="make stage1"):
        run_evaluation(tiny_cfg())  # an empty outputs folder


def test_a_missing_draft_is_reported_in_one_line(trained, capsys):
    with pytest.raises(SystemExit) as exit_info, reported_as_one_line():
        run_evaluation(trained("eval.draft_ks=[0.25]"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "make stage3" in err and "k=0.25" in err


def test_command_line_checks_the_config_first(tmp_path):
    """The Hydra entry point `make eval` runs: a bad value fails in one line, before the heavy imports."""
    proc = subprocess.run(
        [sys.executable, "-m", "adaspec.commands.evaluate", f"paths.root={tmp_path}", "eval.n_prompts=0"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: config key `eval.n_prompts`=0")


def test_the_serving_configuration_reaches_the_evaluation(trained):
    """decode.target_dtype/draft_dtype/kv_cache reach the models; target-only decoding also runs in
    eval.target_servings, and speedup_vs_target is against the fastest of them (named in the results)."""
    results = run_evaluation(trained("decode.target_dtype=bfloat16", "decode.draft_dtype=bfloat16",
                                     "decode.kv_cache=static", "eval.target_servings=[float32]",
                                     "eval.n_prompts=3", "eval.name=bf16"), progress=False)
    serving = results["serving"]
    rates = serving["target_only/tokens_per_s"]
    assert serving["target"] == "bfloat16-static" and set(rates) == {"bfloat16-static", "float32"}
    assert serving["fastest_target_only"] == max(rates, key=rates.get)
    for row in results["drafts"].values():
        assert row["speedup_vs_target"] == pytest.approx(row["tokens_per_s"] / max(rates.values()), rel=1e-9)
        assert row["speedup_vs_same_serving"] == pytest.approx(row["tokens_per_s"] / rates["bfloat16-static"],
                                                               rel=1e-9)
    assert results["identity"]["decode"]["target_dtype"] == "bfloat16"


def test_tree_and_hybrid_rows_beside_the_chains_with_their_replay_exact(trained):
    """eval.trees adds a row per draft and shape (`<draft>@<shape>`): decoded with trees, exact (greedy equal to
    the target's), replayed exactly on the untimed prompts, with per-depth acceptance; decode.tree serves the
    main rows with trees too. A bad shape is refused naming the key before anything loads."""
    every = ["eval.n_prompts=4", "eval.timed_prompts=2", "decode.max_new_tokens=16", "eval.num_threads=1",
             "eval.compare_hf_assisted=false", "eval.draft_ks=[0.4]", "eval.gammas=[2,4]"]
    results = run_evaluation(trained(*every, "eval.trees=[k3-d4-n10,k3-d4-n10+lookup]", "eval.name=trees"),
                             progress=False)
    rows = results["drafts"]
    assert set(rows) == {"k0.4", "prompt_lookup", "k0.4@k3-d4-n10", "k0.4@k3-d4-n10+lookup",
                         "prompt_lookup@k3-d4-n10", "prompt_lookup@k3-d4-n10+lookup"}
    for name, row in rows.items():
        assert row["greedy_mismatches"] == 0 and row["acceptance_vs_gamma"]["replay_mismatches"] == 0, name
        assert row["tree"] == (name.split("@")[1] if "@" in name else None)
        assert row["new_tokens"] == results["target"]["new_tokens"]
    tree = rows["k0.4@k3-d4-n10"]
    assert tree["blocks"] <= tree["draft_calls"] <= 4 * tree["blocks"]  # a tree of depth <= 4: <= 4 draft steps
    assert 0 <= tree["accept_at_depth/1"] <= 1 and tree["acceptance_length"] == pytest.approx(tree["tau"] - 1, abs=0.2)
    assert results["costs"]["tree_verify_s"]["k3-d4-n10"] > 0
    assert tree["expected_speedup_by_gamma"].keys() == {"2", "4"}
    from adaspec.config.rules import validate

    with pytest.raises(UserError, match=r"`eval.trees`.*k<top_k>-d<depth>-n<nodes>"):
        validate(trained(*every, "eval.trees=[k3-d4]"))
    with pytest.raises(UserError, match=r"`decode.tree`.*depth must be 1..32"):
        validate(trained(*every, "decode.tree=k3-d40-n40"))
    with pytest.raises(UserError, match=r"`decode.tree`.*unknown key"):
        validate(trained(*every, "decode.tree={top_k:3,depth:4,nodes:10,wide:2}"))


def test_auto_decodes_each_draft_with_the_candidate_it_chose_on_held_out_prompts(trained):
    """decode.tree=auto: each main row decodes with the shape (or chain) its own table chose, measured on the
    test prompts after the evaluated ones, and stays exact; with no prompt left to measure on it stops in one line
    before anything is timed, and a bad candidate is refused naming the key."""
    every = ["eval.n_prompts=4", "eval.timed_prompts=2", "decode.max_new_tokens=16", "eval.num_threads=1",
             "eval.compare_hf_assisted=false", "eval.draft_ks=[0.4]", "eval.gammas=[2]", "decode.tree=auto",
             "eval.tree_candidates=[k3-d4-n10,k3-d4-n10+lookup]", "eval.tree_calibration_prompts=2"]
    results = run_evaluation(trained(*every, "eval.name=auto"), progress=False)
    choice = results["tree_choice"]
    assert set(choice) == {"k0.4", "prompt_lookup"}
    assert set(choice["k0.4"]["candidates"]) == {"chain", "k3-d4-n10", "k3-d4-n10+lookup"}
    assert set(choice["prompt_lookup"]["candidates"]) == {"chain", "k3-d4-n10"}
    # the target's calls are timed once and weigh every draft's candidates alike
    assert choice["k0.4"]["candidates"]["chain"]["verify_s"] == choice["prompt_lookup"]["candidates"]["chain"]["verify_s"]
    for name, row in results["drafts"].items():
        chosen = choice[name]["chosen"]
        assert row["tree"] == (None if chosen == "chain" else chosen) and choice[name]["prompts"] == 2
        assert row["greedy_mismatches"] == 0 and row["acceptance_vs_gamma"]["replay_mismatches"] == 0, name
    from adaspec.config.rules import validate

    with pytest.raises(UserError, match=r"eval.tree_calibration_prompts=2 test prompts after the first "
                                        r"eval.n_prompts=4.*lower eval.n_prompts"):
        run_evaluation(trained(*every, "task.n_test=4", "eval.name=auto-none-left"), progress=False)
    with pytest.raises(UserError, match=r"`eval.tree_candidates`.*k<top_k>-d<depth>-n<nodes>"):
        validate(trained(*every, "eval.tree_candidates=[k3-d4]"))
