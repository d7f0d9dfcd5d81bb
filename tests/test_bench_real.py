"""make bench-real with a draft that shares the target's vocabulary: HF assisted generation is timed beside
ours at every fixed gamma, on the same prompts, and both are exact when greedy."""

from __future__ import annotations

from pathlib import Path

import pytest

from adaspec.artefacts import paths
from adaspec.commands.bench_real import alpha_interval, main, named_drafts, speedup_interval
from adaspec.decoding.stats import GenerationResult
from adaspec.errors import UserError
from tests.conftest import TINY


def test_a_full_vocabulary_draft_is_timed_against_hf_assisted_too(tiny_trained, tmp_path):
    cfg = tiny_trained()
    root = f"paths.root={cfg.paths.root}"
    reference = paths.final(paths.of(cfg).ref_dir())
    payload = main(["--prompts", "2", "--max-new-tokens", "10", "--gammas", "1,2", "--temperatures", "0",
                    "--threads", "1", "--out", str(tmp_path), "--draft", str(reference), *TINY, root])
    assert payload["draft"] == str(reference) and payload["drafts"]["trained"]["draft_vocab_size"] is None
    rows = [r for r in payload["rows"] if r["draft"] == "trained"]  # the baselines have rows of their own
    fixed = [r for r in rows if r["policy"].startswith("fixed-")]
    adaptive = next(r for r in rows if r["policy"] == "adaptive")
    assert len(fixed) == 2 and "speedup_vs_hf_assisted" not in adaptive
    for row in fixed:
        assert row["greedy_mismatches"] == 0 and row["hf_assisted/greedy_mismatches"] == 0
        assert row["speedup_vs_hf_assisted"] == row["tokens_per_s"] / row["hf_assisted/tokens_per_s"]


def test_speed_ups_are_against_the_fastest_target_only_configuration(tiny_trained, tmp_path):
    """Target-only decoding runs in every configuration of --servings and in the speculative run's own; the
    speed-up is against the fastest of them, named, and against the same configuration beside it."""
    cfg = tiny_trained()
    reference = paths.final(paths.of(cfg).ref_dir())
    payload = main(["--prompts", "2", "--max-new-tokens", "10", "--gammas", "2", "--temperatures", "0",
                    "--threads", "1", "--out", str(tmp_path), "--serving", "float32-static", "--draft", str(reference),
                    "--servings", "float32,bfloat16", *TINY, f"paths.root={cfg.paths.root}"])
    assert payload["serving"]["target_only"] == ["float32-static", "bfloat16", "float32"]
    for row in payload["rows"]:
        rates = row["target_only_by_serving/tokens_per_s"]
        assert set(rates) == {"float32-static", "bfloat16", "float32"} and row["serving"] == "float32-static"
        assert rates[row["fastest_target_only"]] == max(rates.values()) == row["target_only/tokens_per_s"]
        assert row["speedup_vs_target"] == row["tokens_per_s"] / max(rates.values())
        assert row["speedup_vs_same_serving"] == row["tokens_per_s"] / rates["float32-static"]
        assert row["speedup_vs_target"] <= row["speedup_vs_same_serving"]
        low, high = row["speedup_vs_target_95"]  # two prompts: the interval spans their two ratios
        assert low <= row["speedup_vs_target"] <= high
        accepted, rejected = sum(row["accepted_by_prompt"]), sum(row["rejected_by_prompt"])
        assert len(row["accepted_by_prompt"]) == len(row["rejected_by_prompt"]) == 2
        assert row["alpha"] == pytest.approx(accepted / (accepted + rejected))  # the counts are the row's alpha's
        low, high = row["alpha_95"]
        assert low <= row["alpha"] <= high
        assert len(row["greedy_mismatch_details"]) == row["greedy_mismatches"] == 0


def test_the_training_free_drafts_alone_need_no_trained_draft(tiny_trained, tmp_path):
    cfg = tiny_trained()  # it trained no draft of k=0.3
    payload = main(["--prompts", "1", "--max-new-tokens", "8", "--gammas", "2", "--temperatures", "0", "--k", "0.3",
                    "--threads", "1", "--out", str(tmp_path), "--no-trained", *TINY, f"paths.root={cfg.paths.root}"])
    assert payload["draft"] is None and set(payload["drafts"]) == {"prompt_lookup"}
    assert {r["draft"] for r in payload["rows"]} == {"prompt_lookup"}


def test_several_drafts_are_benched_against_the_same_target_only_runs(tiny_trained, tmp_path):
    """--draft repeated: a row per draft and policy, each draft's own call cost, one set of target-only runs."""
    from adaspec.training.pipeline import run_stage

    cfg = tiny_trained("stage=draft", "k=0.4")
    reference, draft = paths.final(paths.of(cfg).ref_dir()), run_stage(cfg)
    payload = main(["--prompts", "1", "--max-new-tokens", "8", "--gammas", "2", "--temperatures", "0",
                    "--no-adaptive", "--threads", "1", "--out", str(tmp_path), "--draft", f"distillspec={reference}",
                    "--draft", str(draft), *TINY, f"paths.root={cfg.paths.root}"])
    names = {"distillspec", draft.parent.name}
    assert payload["draft_folders"] == {"distillspec": str(reference), draft.parent.name: str(draft)}
    assert names < set(payload["drafts"]) and names < set(payload["costs"]["c"])
    rows = [r for r in payload["rows"] if r["draft"] in names]
    assert sorted(r["draft"] for r in rows) == sorted(names)
    assert len({r["target_only/tokens_per_s"] for r in payload["rows"]}) == 1  # one target-only measurement
    assert all(r["greedy_mismatches"] == 0 for r in rows)


def test_two_drafts_of_one_name_are_refused():
    with pytest.raises(UserError, match="two drafts named 'draft-k0.4'"):
        named_drafts(["a/draft-k0.4/final", "b/draft-k0.4/final"])
    assert named_drafts(["x/ref/final"]) == {"trained": Path("x/ref/final")}


def _timed(seconds: list[float], tokens: int = 10) -> list[GenerationResult]:
    return [GenerationResult(tokens=[0] * tokens, target_calls=tokens, wall_time_s=s) for s in seconds]


def test_the_speed_up_interval_resamples_prompts_in_pairs():
    """Prompt i of the draft's runs against prompt i of the target's: a draft 2x faster on every prompt has
    the interval [2, 2] however much the prompts differ from each other; one slow prompt widens it."""
    target = _timed([1.0, 3.0, 0.5, 2.0, 1.5, 4.0])
    steady = _timed([s / 2 for s in [1.0, 3.0, 0.5, 2.0, 1.5, 4.0]])
    assert speedup_interval(steady, target) == pytest.approx([2.0, 2.0])
    one_slow = _timed([0.5, 1.5, 0.25, 1.0, 0.75, 8.0])  # 2x on five prompts, 0.5x on the last
    low, high = speedup_interval(one_slow, target)
    overall = sum(s for s in [1.0, 3.0, 0.5, 2.0, 1.5, 4.0]) / sum([0.5, 1.5, 0.25, 1.0, 0.75, 8.0])
    assert low < overall < high and high == pytest.approx(2.0) and low < 1.0
    assert speedup_interval(one_slow, target) == [low, high]  # seeded: the same interval every time


def test_the_alpha_interval_pools_each_resample_of_prompts():
    """Prompts of one alpha give the interval [alpha, alpha] however many tokens each judged; a prompt whose every
    block is rejected widens it below the pooled alpha, but little: resamples pool their blocks (a mean of
    per-prompt alphas, the negative control, puts the lower end at 0.375)."""
    assert alpha_interval([3, 30, 6, 12], [1, 10, 2, 4]) == pytest.approx([0.75, 0.75])
    accepted, rejected = [30, 30, 30, 30, 30, 0], [10, 10, 10, 10, 10, 5]
    low, high = alpha_interval(accepted, rejected)
    pooled = sum(accepted) / (sum(accepted) + sum(rejected))
    assert low < pooled < high == pytest.approx(0.75)
    assert low > 0.6  # the rejected prompt judged 5 tokens of 205: pooled, it cannot pull a resample far
    assert alpha_interval(accepted, rejected) == [low, high]  # seeded


def test_tree_and_hybrid_rows_are_benched_beside_the_chains(tiny_trained, tmp_path):
    """--trees adds a row per draft and shape, decoded with trees (exact: no greedy mismatch), with the tree's
    verification cost, acceptance per depth and the CPU the run had; a bad shape is one line naming --trees."""
    cfg = tiny_trained()
    reference = paths.final(paths.of(cfg).ref_dir())
    payload = main(["--prompts", "2", "--max-new-tokens", "10", "--gammas", "2", "--temperatures", "0,1",
                    "--no-adaptive", "--trees", "k2-d3-n6,k2-d3-n6+lookup,k2-d3-n6+sample", "--threads", "1",
                    "--out", str(tmp_path), "--draft", str(reference), *TINY, f"paths.root={cfg.paths.root}"])
    policies = {(r["temperature"], r["draft"], r["policy"]) for r in payload["rows"]}
    # prompt lookup has nothing to draw: its `+sample` row would be its plain one again
    assert policies == {(t, d, p) for t in (0.0, 1.0) for d in ("trained", "prompt_lookup")
                        for p in ("fixed-2", "tree-k2-d3-n6", "tree-k2-d3-n6+lookup", "tree-k2-d3-n6+sample")
                        if (d, p) != ("prompt_lookup", "tree-k2-d3-n6+sample")}
    assert set(payload["costs"]["tree_verify_s"]) == {"tree-k2-d3-n6", "tree-k2-d3-n6+lookup", "tree-k2-d3-n6+sample"}
    assert {"cpu", "amx"} <= set(payload["machine"])
    for row in payload["rows"]:
        assert row["greedy_mismatches"] in (0, None)
        if row["policy"].startswith("tree-"):
            assert row["mean_gamma"] <= 3 and "speedup_vs_hf_assisted" not in row and row["expected_speedup"] > 0
            assert len(row["accept_at_depth"]) == 8
    with pytest.raises(UserError, match="--trees"):
        main(["--trees", "k2-d3", "--no-trained", *TINY, f"paths.root={cfg.paths.root}"])


def test_draft_temperatures_add_sampled_rows_only(tiny_trained, tmp_path):
    """--draft-temperatures: at temperature > 0 every row again with the drafts proposing at each temperature
    (policy <policy>@dt<value>, its draft_temperature recorded); greedy rows are not repeated (it is unread)."""
    cfg = tiny_trained()
    reference = paths.final(paths.of(cfg).ref_dir())
    payload = main(["--prompts", "2", "--max-new-tokens", "10", "--gammas", "2", "--temperatures", "0,1",
                    "--no-adaptive", "--trees", "k2-d3-n6", "--draft-temperatures", "0.5", "--threads", "1",
                    "--out", str(tmp_path), "--draft", str(reference), "baseline=[]", *TINY,
                    f"paths.root={cfg.paths.root}"])
    rows = {(r["temperature"], r["policy"]): r for r in payload["rows"]}
    assert set(rows) == {(0.0, "fixed-2"), (0.0, "tree-k2-d3-n6"), (1.0, "fixed-2"), (1.0, "tree-k2-d3-n6"),
                         (1.0, "fixed-2@dt0.5"), (1.0, "tree-k2-d3-n6@dt0.5")}
    assert rows[(1.0, "fixed-2@dt0.5")]["draft_temperature"] == 0.5 and rows[(1.0, "fixed-2")]["draft_temperature"] is None
    assert rows[(1.0, "tree-k2-d3-n6@dt0.5")]["expected_speedup"] > 0  # the tree's own verification cost was found
