"""The paper run's parts: the plan's order, the seed statistics, the matched token budget, stage 0's corpus."""

from __future__ import annotations

import json
import math

import pytest

from adaspec.config.rules import validate
from adaspec.data.stdlib_corpus import SKIPPED, stdlib_blocks, stdlib_files
from adaspec.distill.budget import apply_token_budget
from adaspec.errors import UserError
from adaspec.paper.plan import TASKS, paper_plan
from adaspec.paper.stats import describe, paired_difference
from tests.conftest import compose_config


def test_plan_trains_each_target_once_and_puts_every_sweep_after_the_main_results():
    steps = [s.command() for s in paper_plan([TASKS["gsm8k"], TASKS["mbpp"]], [0, 1, 2])]
    assert steps.count("python -m adaspec.commands.train paper=gsm8k stage=target") == 1
    assert steps.count("python -m adaspec.commands.train paper=mbpp stage=pretrain_target") == 1
    for seed in (0, 1, 2):
        assert f"python -m adaspec.commands.evaluate paper=gsm8k seed={seed}" in steps
        assert f"python -m adaspec.commands.train paper=mbpp stage=pretrain_draft seed={seed}" in steps
        assert f"python -m adaspec.commands.train paper=gsm8k_matched stage=draft seed={seed} k=1" in steps
    last_main = max(
        i for i, s in enumerate(steps) if s.startswith("python -m adaspec.commands.evaluate paper=mbpp seed=2")
    )
    first_sweep = min(i for i, s in enumerate(steps) if "eval.name=" in s or "k=0.1" in s)
    assert last_main < first_sweep
    # every stage comes after the stages it needs
    assert steps.index("python -m adaspec.commands.train paper=mbpp stage=pretrain_draft seed=1") < steps.index(
        "python -m adaspec.commands.train paper=mbpp stage=ref seed=1"
    )


def test_describe_gives_the_t_interval_of_the_mean():
    d = describe([1.0, 2.0, 3.0])
    assert d["mean"] == 2.0 and d["std"] == 1.0 and d["n"] == 3
    half = 4.303 / math.sqrt(3)
    assert d["ci95"] == pytest.approx([2.0 - half, 2.0 + half])
    assert describe([0.5])["ci95"] is None


def test_paired_difference_pairs_by_seed():
    d = paired_difference([0.30, 0.35, 0.32], [0.28, 0.30, 0.33])
    assert d["values"] == pytest.approx([0.02, 0.05, -0.01])
    assert d["ci95"][0] < 0 < d["ci95"][1]  # the spread between seeds hides this gain
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference([1.0], [1.0, 2.0])


def test_matched_token_budget_keeps_the_steps_and_divides_the_batch_by_k():
    cfg = compose_config(
        "stage=draft", "k=0.4", "stage.batch_size=8", "stage.max_epochs=2", "distill.match_token_budget=true"
    )
    resolved = apply_token_budget(cfg, n_train=100)
    assert resolved.stage.batch_size == 20 and resolved.stage.max_steps == 13 * 2  # the reference's steps
    assert resolved.stage.max_epochs == 6  # 26 steps of 5 batches: 2 / 0.4 = 5 epochs and a bit
    assert cfg.stage.batch_size == 8  # the input is not changed
    assert apply_token_budget(resolved, n_train=100) == resolved  # resolved once: not divided again
    distillspec = apply_token_budget(
        compose_config(
            "stage=draft",
            "k=1.0",
            "stage.batch_size=8",
            "distill.match_token_budget=true",
            "distill.budget_k=0.4",
        ),
        100,
    )
    assert distillspec.stage.batch_size == 20  # arm (c): DistillSpec with AdaSPEC k=0.4's batches and steps
    assert (
        apply_token_budget(
            compose_config("stage=ref", "distill.match_token_budget=true"), 100
        ).stage.batch_size
        == 32
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("stage=pretrain_target",), "needs a corpus: add pretrain=stdlib"),
        (("pretrain=stdlib", "model=pythia"), "from-scratch presets"),
        (("pretrain=stdlib", "pretrain.max_chars=0"), "`pretrain.max_chars`"),
        (("distill.budget_k=1.5",), "`distill.budget_k`"),
        (("eval.draft_tags=[]",), "`eval.draft_tags`"),
    ],
)
def test_bad_paper_settings_name_the_key(overrides, message):
    with pytest.raises(UserError, match=message):
        validate(compose_config(*overrides))


def test_stdlib_corpus_is_deterministic_whole_lines_and_without_tests():
    blocks = stdlib_blocks(max_chars=50_000, block_chars=800, seed=0)
    assert blocks == stdlib_blocks(max_chars=50_000, block_chars=800, seed=0)
    assert blocks != stdlib_blocks(max_chars=50_000, block_chars=800, seed=1)
    total = sum(map(len, blocks))
    assert total >= 50_000 and total - len(blocks[-1]) < 50_000
    assert all(b.endswith("\n") or b is blocks[-1] for b in blocks)  # cut between lines
    assert max(map(len, blocks)) < 800 + 200  # a block overshoots by at most one line
    files = stdlib_files()
    assert len(files) > 100 and not any(SKIPPED & set(p.parts) for p in files)


DOMAIN_ARMS = {  # per real-target task: the domain ablation's ks and what it switches on
    "smollm2_gsm8k": ((0.4, 1.0), lambda d: d.digit_weight == 2.0 and d.operator_weight == 1.5),
    "smollm2_mbpp": ((0.33,), lambda d: d.keep_whitespace_tokens),
}


@pytest.mark.parametrize("name", sorted(DOMAIN_ARMS))
def test_the_real_target_plan_composes_every_arm_on_the_official_recipe(name):
    """make paper ARGS="--tasks <name>": every step composes and validates; the arms differ only in what they
    should (budget, epochs and early stopping, domain strategies) and find the same target and reference;
    every draft the evaluation names is one the plan trains."""
    from adaspec.artefacts import paths
    from adaspec.paper.runner import compose_step

    steps = paper_plan([TASKS[name]], [0, 1, 2])
    assert not any("eval.name=ksweep" in s.command() or "gsweep" in s.command() for s in steps)
    configs = [compose_step(step, []) for step in steps]
    drafts = {(c.stage.tag, c.k): c for c in configs if c.stage.name == "draft" and c.seed == 0}
    domain_ks, domain_on = DOMAIN_ARMS[name]
    arms = {(tag, k) for tag in ("", "matched", "optimal") for k in (0.4, 1.0)} | {("domain", k) for k in domain_ks}
    assert set(drafts) == arms
    reference = next(c for c in configs if c.stage.name == "ref" and c.seed == 0)
    for (tag, _k), cfg in drafts.items():
        assert str(cfg.model.name) == "smollm2" and cfg.distill.selection == "quantile" and cfg.stage.lr == 3e-4
        assert cfg.distill.data == "target" and cfg.stage.weight_decay == 0.1
        assert paths.of(cfg).ref_dir() == paths.of(reference).ref_dir()
        assert cfg.distill.match_token_budget == (tag == "matched")
        assert cfg.stage.early_stop_patience == (2 if tag == "optimal" else 0)
        assert bool(domain_on(cfg.task.domain)) == (tag == "domain")
    target = next(c for c in configs if c.stage.name == "target")
    assert target.stage.max_steps == 0 and target.task.name == configs[-1].task.name
    stage0 = [c for c in configs if c.stage.name == "pretrain_draft"]  # each seed's draft distils the target
    assert sorted(c.seed for c in stage0) == [0, 1, 2] and all(c.pretrain.objective == "kd" for c in stage0)
    assert all(c.pretrain.task_prompts <= c.task.n_train or c.task.name == "gsm8k" for c in stage0)
    main_eval = compose_step(next(s for s in steps if s.kind == "eval"), [])
    ev = main_eval.eval
    evaluated = {(tag, k) for tag in ev.draft_tags for k in ev.tag_ks.get(tag, ev.draft_ks)}
    assert evaluated == arms
    sampled = [s for s in steps if "eval.name=t1" in s.command()]
    assert len(sampled) == 3 and all("decode.temperature=1.0" in s.command() for s in sampled)


def test_an_extra_arm_without_its_own_distillspec_is_paired_with_arm_a():
    from adaspec.paper.aggregate import comparisons

    pairs = {c.name: (c.first, c.second) for c in comparisons(TASKS["smollm2_mbpp"])}
    assert pairs["ablation: domain strategies, k=0.33"] == ("k0.33-domain", "k1")
    assert pairs["(d) optimal epoch, k=0.4"] == ("k0.4-optimal", "k1-optimal")


def test_the_real_target_run_collects_its_temperature_one_evaluations_beside_the_greedy_ones(tmp_path):
    from adaspec.artefacts import paths
    from adaspec.commands.paper import collect
    from adaspec.evaluation.run import results_dir
    from adaspec.paper.runner import compose_step

    task, extra = TASKS["smollm2_gsm8k"], [f"paths.root={tmp_path / 'out'}"]
    evaluations = [s for s in paper_plan([task], [0, 1]) if s.kind == "eval"]
    for step in evaluations:  # what each evaluation writes, as far as the summary reads it
        seed = int(next(o for o in step.overrides if o.startswith("seed="))[5:])
        sampled = "eval.name=t1" in step.overrides
        rows = {
            name: {"label": name, "alpha": 0.3 + 0.01 * seed + 0.1 * sampled + 0.02 * (name.startswith("k0.4")),
                   "accept_rate": 0.2, "tau": 1.4, "speedup_vs_target": 0.7, "gsm8k/exact_match": 0.3,
                   "train_seconds": 90.0 + 10 * seed}
            for name in ("k0.4", "k1", "k0.4-matched", "k1-matched")
        }
        cfg = compose_step(step, extra)
        folder = results_dir(paths.of(cfg), cfg.decode, cfg.eval.name)
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps({
            "metric": "gsm8k/exact_match", "n_prompts": 10 if sampled else 40, "setting": folder.name,
            "target": {"gsm8k/exact_match": 0.3, "parameters": 1}, "drafts": rows,
        }))
    summary, _ = collect([task], [0, 1], extra, tmp_path / "results", sweeps=False)
    assert set(summary) == {"smollm2_gsm8k", "smollm2_gsm8k t=1"}
    assert summary["smollm2_gsm8k t=1"]["n_prompts"] == 10
    assert summary["smollm2_gsm8k t=1"]["drafts"]["k1"]["alpha"]["mean"] == pytest.approx(0.405)
    equal_budget = summary["smollm2_gsm8k t=1"]["comparisons"][0]
    assert equal_budget["difference"]["alpha"]["values"] == pytest.approx([0.02, 0.02])
    assert (tmp_path / "results" / "smollm2_gsm8k" / "seed1" / "t1.json").is_file()
    assert summary["smollm2_gsm8k"]["drafts"]["k1"]["train_seconds"]["mean"] == pytest.approx(95.0)


def test_the_beyond_the_paper_plan_shares_the_paper_runs_reference_and_evaluates_every_arm_it_trains():
    """make paper ARGS="--tasks smollm2_gsm8k_beyond" (issue 15): every arm distils against the paper run's
    reference, arm (a) is the paper run's own drafts, the evaluation finds each draft where its step wrote it,
    and each arm is compared with arm (a) at the same k."""
    from adaspec.artefacts import paths
    from adaspec.paper.aggregate import comparisons
    from adaspec.paper.runner import compose_step

    task = TASKS["smollm2_gsm8k_beyond"]
    steps = paper_plan([task], [0])
    configs = [compose_step(step, []) for step in steps]
    paper = [compose_step(step, []) for step in paper_plan([TASKS["smollm2_gsm8k"]], [0])]
    paper_ref = next(c for c in paper if c.stage.name == "ref")
    trained = {paths.of(c).draft_dir() for c in configs if c.stage.name == "draft"}
    for cfg in (c for c in configs if c.stage.name == "draft"):
        assert paths.of(cfg).ref_dir() == paths.of(paper_ref).ref_dir() and cfg.stage.batch_size == 16
        if cfg.distill.data != "target":
            assert cfg.distill.ref_data == "target"
        if paths.fixed_answers(cfg.distill) != "target":  # 60 steps, as on the 314 finished target answers
            assert cfg.stage.max_steps == 60
    paper_drafts = {paths.of(c).draft_dir() for c in paper if c.stage.name == "draft" and c.stage.tag == ""}
    assert paper_drafts < trained
    caches = {paths.of(c).teacher_cache_dir() for s, c in zip(steps, configs, strict=True) if s.kind == "cache"}
    assert {p.name for p in caches} == {"target-answers-n500-topk64", "topk64"}
    assert {p.parent.parent for p in caches} == {paths.of(paper_ref).target_dir()}  # the one target's caches
    evaluation = next(c for s, c in zip(steps, configs, strict=True) if s.kind == "eval")
    ev = evaluation.eval
    found = {paths.of(evaluation).draft_dir(k, tag, ev.tag_data.get(tag)) for tag in ev.draft_tags
             for k in ev.tag_ks.get(tag, ev.draft_ks)}
    assert found == trained
    versus = [c for c in comparisons(task) if c.second_label == "arm (a)"]
    assert ("k0.4-onpolicy", "k0.4") in {(c.first, c.second) for c in versus} and len(versus) == 9


def test_one_seeds_summary_shows_values_without_a_spread():
    from adaspec.paper.aggregate import markdown, summarise_task

    rows = {name: {"label": name, "alpha": 0.3, "accept_rate": 0.2, "tau": 1.4, "speedup_vs_target": 0.7,
                   "gsm8k/exact_match": 0.1} for name in ("k0.4", "k1")}
    seed0 = {"metric": "gsm8k/exact_match", "n_prompts": 40, "setting": "greedy-g5",
             "target": {"gsm8k/exact_match": 0.1, "parameters": 1}, "drafts": rows}
    text = markdown({"smollm2_gsm8k": summarise_task(TASKS["smollm2_gsm8k"], {0: seed0})})
    assert "± 0.000" not in text and "0.300" in text and "one seed: no interval" in text


def test_the_summary_names_the_seeds_timed_beside_another_job_and_those_timed_before_the_guard():
    from adaspec.paper.aggregate import markdown, summarise_task

    rows = {name: {"label": name, "alpha": 0.3, "accept_rate": 0.2, "tau": 1.4, "speedup_vs_target": 0.7,
                   "gsm8k/exact_match": 0.1} for name in ("k0.4", "k1")}

    def seed(contention):
        return {"metric": "gsm8k/exact_match", "n_prompts": 40, "setting": "greedy-g5",
                "target": {"gsm8k/exact_match": 0.1, "parameters": 1}, "drafts": rows,
                **({"contention": contention} if contention is not None else {})}

    per_seed = {0: seed(None), 1: seed({"contended": True}), 2: seed({"contended": False})}
    summary = summarise_task(TASKS["smollm2_gsm8k"], per_seed)
    assert (summary["timing_contended_seeds"], summary["timing_unguarded_seeds"]) == ([1], [0])
    text = markdown({"smollm2_gsm8k": summary})
    assert "Timed beside another job (speed-ups not this machine's alone): {'smollm2_gsm8k': [1]}." in text
    assert "Timed before evaluations recorded contention: {'smollm2_gsm8k': [0]}." in text


def test_a_run_told_pretrain_none_skips_stage_0(tmp_path, capsys):
    """make paper ARGS="--tasks smollm2_gsm8k pretrain=none": the comparison without stage 0."""
    from adaspec.paper.runner import run_plan, without_stage0

    steps = paper_plan([TASKS["smollm2_gsm8k"]], [0, 1])
    kept = without_stage0(steps, ["pretrain=none"])
    assert len(steps) - len(kept) == 2 and not any(s.kind == "pretrain" for s in kept)
    assert without_stage0(steps, []) == steps
    assert without_stage0(steps, ["pretrain.corpus=none"]) == kept  # decided by the config, not the spelling
    run_plan([s for s in steps if s.kind == "pretrain"], ["pretrain=none", f"paths.root={tmp_path}"])
    assert "2 stage-0 steps skipped" in capsys.readouterr().out and not any(tmp_path.iterdir())


def test_wall_times_count_each_step_under_the_task_whose_plan_composes_it():
    from adaspec.commands.paper import task_of_step
    from adaspec.paper.plan import TASKS, paper_plan

    tasks = list(TASKS.values())

    def owner(config: str, *more: str) -> str:
        return task_of_step(f"python -m adaspec.train paper={config} stage=draft seed=0 {' '.join(more)}", tasks)

    assert owner("smollm2_gsm8k_matched") == "smollm2_gsm8k"
    assert owner("smollm2_gsm8k_beyond_jsd") == "smollm2_gsm8k_beyond"
    assert owner("smollm2_mbpp_optimal") == "smollm2_mbpp"
    assert owner("gsm8k_matched") == "gsm8k"
    assert owner("mbpp") == "mbpp"
    # the capacity sweep's sizes share config files and the target: each draft's step is counted under its size
    # ... and the same sizes on the fine-tuned target (another paths.root) under theirs, its stage 1 included
    for task in (t for t in tasks if t.draft_overrides or t.root):
        steps = [s for s in paper_plan([task], [0, 1], sweeps=False) if "stage=target" not in s.overrides]
        assert {task_of_step(s.command(), tasks) for s in steps if s.kind != "cache"} == {task.name}
    fine_tuned_target = paper_plan([TASKS["smollm2_gsm8k_capacity_ft_h128"]], [0])[0]
    assert task_of_step(fine_tuned_target.command(), tasks) == "smollm2_gsm8k_capacity_ft_h128"


def test_an_arm_missing_from_a_seed_is_summarised_over_the_seeds_that_have_it_and_names_them():
    """The head question's seed 2 ran arm (a) only: every draft over the seeds that have it, every comparison
    paired over the seeds that have both drafts, each naming its seeds when they are not all of the task's."""
    from adaspec.paper.aggregate import markdown, summarise_task

    def seed(alpha_by_row: dict[str, float]) -> dict:
        rows = {row: {"label": row, "alpha": a, "accept_rate": a, "tau": 1 + a, "speedup_vs_target": 1.0,
                      "gsm8k/exact_match": 0.1} for row, a in alpha_by_row.items()}
        return {"metric": "gsm8k/exact_match", "n_prompts": 40, "setting": "greedy-g3",
                "target": {"gsm8k/exact_match": 0.1, "parameters": 1}, "drafts": rows}

    everything = {"k0.4": 0.50, "k1": 0.55, "k0.4-lk": 0.52, "k1-lk": 0.56}
    per_seed = {0: seed(everything), 1: seed({row: a + 0.02 for row, a in everything.items()}),
                2: seed({"k0.4": 0.54, "k1": 0.57})}
    summary = summarise_task(TASKS["smollm2_gsm8k_head"], per_seed)
    drafts, by_name = summary["drafts"], {c["name"]: c for c in summary["comparisons"]}
    assert drafts["k1"]["alpha"]["n"] == 3 and "seeds" not in drafts["k1"]
    assert drafts["k1-lk"]["seeds"] == [0, 1] and drafts["k1-lk"]["alpha"]["n"] == 2
    assert drafts["k1-lk"]["alpha"]["mean"] == pytest.approx(0.57)
    equal_budget = by_name["(a) equal budget, k=0.4"]
    assert "seeds" not in equal_budget and equal_budget["difference"]["alpha"]["n"] == 3
    assert equal_budget["difference"]["alpha"]["mean"] == pytest.approx((-0.05 - 0.05 - 0.03) / 3)
    assert by_name["lk, k=0.4"]["seeds"] == [0, 1] and by_name["lk, k=0.4"]["difference"]["alpha"]["n"] == 2
    text = markdown({"smollm2_gsm8k_head": summary})
    assert "| k1-lk (seeds 0, 1) |" in text and "| lk vs arm (a), k=1 (seeds 0, 1) |" in text
    assert "| k1 |" in text


def test_the_collected_run_log_keeps_the_steps_of_seeds_run_on_another_machine(tmp_path):
    """A seed run on a new machine: its root's log holds only its own steps; the results folder's copy keeps the
    earlier seeds' lines, adds the new ones once (collecting again adds nothing), and the wall time counts all."""
    from adaspec.commands.paper import wall_times

    def line(seed: int, seconds: float, time: float) -> str:
        return json.dumps({"step": f"python -m adaspec.commands.train paper=smollm2_gsm8k_head stage=ref seed={seed}",
                           "extra": [], "ran": True, "seconds": seconds, "time": time})

    root, out = tmp_path / "root", tmp_path / "results"
    root.mkdir(), out.mkdir()
    (out / "paper_log.jsonl").write_text(line(0, 100.0, 1.0) + "\n")
    (root / "paper_log.jsonl").write_text(line(2, 50.0, 9.0) + "\n")
    tasks = [TASKS["smollm2_gsm8k_head"]]
    assert wall_times(root, out, tasks) == {"smollm2_gsm8k_head": 150.0}
    assert wall_times(root, out, tasks) == {"smollm2_gsm8k_head": 150.0}
    assert (out / "paper_log.jsonl").read_text().splitlines() == [line(0, 100.0, 1.0), line(2, 50.0, 9.0)]
    assert json.loads((out / "wall_times.json").read_text()) == {"smollm2_gsm8k_head": 150.0}
