"""make paper ARGS="--tasks smollm2_gsm8k_capacity" (issue 31): drafts of several sizes and the EAGLE-3 head
share one target, its answers and cache; each size has its own stage 0, reference and six drafts (DistillSpec
and AdaSPEC with the forward KL, nla and LK) at equal steps and sequences, and its own evaluation."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from adaspec.artefacts import paths
from adaspec.artefacts.store import read_meta, read_metrics
from adaspec.commands.paper import collect, parse_args
from adaspec.data.tasks import held_out_training, load_task
from adaspec.paper.capacity import LOSSES
from adaspec.paper.plan import GROUPS, TASKS, paper_plan
from adaspec.paper.runner import compose_step, run_plan
from tests.paper.real_target_sizes import N_VAL, plan_overrides_at_test_size
from tests.test_smollm2_pipeline import tiny_instruct_target

CAPACITY = "smollm2_gsm8k_capacity"
DIVERGENCE = {"": "forward_kl", "nla": "nla", "lk": "lk"}


def test_the_group_name_runs_every_size_and_each_size_trains_its_own_drafts_against_one_target():
    names = parse_args(["--tasks", CAPACITY]).tasks
    assert names == list(GROUPS[CAPACITY]) and len(names) == 4
    steps = paper_plan([TASKS[n] for n in names], [0, 1])
    configs = [compose_step(s, []) for s in steps]
    assert len({paths.of(c).target_dir() for c in configs}) == 1
    assert len({paths.of(c).teacher_cache_dir() for c in configs if c.stage.name != "target"}) == 1
    assert all(c.trainer.precision == "bf16-mixed" and c.distill.selection == "quantile" for c in configs)

    refs = {(str(c.model.draft_name), str(c.model.draft_kind), c.seed): c for c in configs if c.stage.name == "ref"}
    assert len({paths.of(c).ref_dir() for c in refs.values()}) == 8  # 4 sizes x 2 seeds
    widths = {name: c.model.draft.hidden_size for (name, kind, _), c in refs.items() if kind == "model"}
    assert widths == {"": 128, "h256x6": 256, "h384x8": 384}
    stage0 = [c for c in configs if c.stage.name == "pretrain_draft"]
    assert len({paths.of(c).pretrain_draft_dir() for c in stage0}) == 6 and all(c.model.draft_kind == "model" for c in stage0)
    drafts = [c for c in configs if c.stage.name == "draft"]
    assert len({paths.of(c).draft_dir() for c in drafts}) == 4 * 2 * 6
    for c in drafts:
        ref = refs[(str(c.model.draft_name), str(c.model.draft_kind), c.seed)]
        assert paths.of(c).ref_dir() == paths.of(ref).ref_dir()
        assert c.model.draft == ref.model.draft and c.distill.divergence == DIVERGENCE[c.stage.tag]
        # equal optimiser steps and sequences in every arm
        assert (c.stage.max_epochs, c.stage.max_steps, c.stage.batch_size) == (3, -1, 16)
        assert not c.distill.match_token_budget
    evaluations = [compose_step(s, []) for s in steps if s.kind == "eval"]
    # per size and seed: greedy on 40 prompts, then temperature 1 on 20 (issue 31's item 3)
    assert sorted((e.decode.temperature, e.eval.n_prompts, e.eval.name) for e in evaluations) == (
        [(0.0, 40, "capacity")] * 8 + [(1.0, 20, "t1")] * 8)
    for ev in evaluations:
        evaluated = {paths.of(ev).draft_dir(k, tag) for tag in ev.eval.draft_tags for k in ev.eval.draft_ks}
        trained = {paths.of(c).draft_dir() for c in drafts if c.seed == ev.seed and c.model.draft == ev.model.draft
                   and c.model.draft_kind == ev.model.draft_kind}
        assert evaluated == trained


def test_the_fine_tuned_target_group_is_the_same_experiment_on_a_target_fine_tuned_first_in_its_own_root():
    """Issue 31's item 1: every step of smollm2_gsm8k_capacity_ft composes the config of the as-is group's
    step, but in outputs/capacity-ft and with stage 1 fine-tuning on all of GSM8K's training problems."""
    fine_tuned = parse_args(["--tasks", f"{CAPACITY}_ft"]).tasks
    assert [n.replace("_ft_", "_") for n in fine_tuned] == list(GROUPS[CAPACITY])
    as_is, ft = ([(s.kind, compose_step(s, [])) for s in paper_plan([TASKS[n] for n in names], [0])]
                 for names in (GROUPS[CAPACITY], fine_tuned))
    assert len(as_is) == len(ft) and {c.paths.root for _, c in ft} == {"outputs/capacity-ft"}
    for (kind, a), (_, f) in zip(as_is, ft, strict=True):
        a, f = (OmegaConf.to_container(c, resolve=True) for c in (a, f))
        assert a.pop("paths") != f.pop("paths")
        if not (kind == "train" and a["stage"]["name"] == "target"):  # the cache composes stage 1's config too
            assert a == f
            continue
        assert (a["stage"]["max_steps"], a["task"]["target_n_train"]) == (0, None)
        assert f["stage"]["max_steps"] > 0 and f["task"]["target_n_train"] == 7473
        assert f["trainer"]["precision"] == "bf16-mixed"
    assert len({paths.of(c).target_dir() for _, c in ft}) == 1


@pytest.mark.parametrize("size", ["h256", "head"])
def test_a_size_of_the_capacity_plan_runs_end_to_end_beside_the_preset_draft(tmp_path, one_torch_thread, size):
    """The preset's size and another (an independent draft in folders of its own, or the head) through the
    runner at test sizes: one target, each size's six drafts trained against its own reference, each size's
    summary with AdaSPEC - DistillSpec per loss and each loss against the forward KL."""
    tasks = [TASKS[f"{CAPACITY}_h128"], TASKS[f"{CAPACITY}_{size}"]]
    steps = paper_plan(tasks, [0])
    extra = plan_overrides_at_test_size(tmp_path, "gsm8k", 2)
    task = compose_step(steps[-1], extra).task
    tiny_instruct_target(tmp_path / "instruct", load_task(task)["train"] + held_out_training(task, N_VAL), steps=80)
    run_plan(steps, extra)
    summary, _ = collect(tasks, [0], extra, tmp_path / "results", sweeps=False)

    configs = [compose_step(s, extra) for s in steps if s.kind == "train" and "stage=draft" in s.overrides]
    target = read_meta(paths.final(paths.of(configs[0]).target_dir()))["weights"]
    by_size: dict = {}
    for cfg in configs:
        final = paths.final(paths.of(cfg).draft_dir())
        meta = read_meta(final)
        assert meta["upstream"]["ref"] == read_meta(paths.final(paths.of(cfg).ref_dir()))["weights"]
        assert read_metrics(final)["steps"] == 2
        by_size.setdefault(paths.of(cfg).ref_dir(), []).append(final)
        assert read_meta(paths.final(paths.of(cfg).ref_dir()))["upstream"]["target"] == target
    assert len(by_size) == 2 and all(len(finals) == 6 for finals in by_size.values())
    for t in tasks:
        rows = summary[t.name]["drafts"]
        assert set(rows) == {"k0.4", "k1", "k0.4-nla", "k1-nla", "k0.4-lk", "k1-lk"}
        pairs = {(c["first"], c["second"]) for c in summary[t.name]["comparisons"]}
        assert {("k0.4", "k1"), ("k0.4-nla", "k1-nla"), ("k0.4-lk", "k1-lk"), ("k1-nla", "k1"), ("k1-lk", "k1")} <= pairs
    heads = [c for c in configs if c.model.draft_kind == "eagle3"]
    assert len(heads) == (6 if size == "head" else 0)
    # the answer's table and plot: a row per size and loss, with the draft's parameters
    rows = json.loads((tmp_path / "results" / f"{CAPACITY}.json").read_text())
    assert [(r["task"], r["decoding"], r["loss"]) for r in rows] == [
        (t.name, decoding, loss) for t in tasks for decoding in ("greedy", "t=1") for loss in LOSSES.values()]
    for t in tasks:
        assert set(summary[f"{t.name} t=1"]["drafts"]) == set(summary[t.name]["drafts"])
        sampled = json.loads((tmp_path / "results" / t.name / "seed0" / "t1.json").read_text())
        assert sampled["decode"]["temperature"] == 1.0 and sampled["n_prompts"] == 2
    assert all(r["parameters"] > 0 and r["adaspec_minus_distillspec"]["n"] == 1 for r in rows)
    assert (tmp_path / "results" / f"{CAPACITY}.png").stat().st_size > 10_000


def test_the_stage0_data_group_draws_alpha_against_the_share_of_stage0_data(tmp_path):
    from adaspec.commands.paper import _scaling_tables
    from adaspec.paper.plan import STAGE0_GROUP
    from adaspec.paper.stats import describe

    alphas = {"none": [0.30, 0.32], "x0.25": [0.35, 0.36], "h128": [0.39, 0.40], "x2": [0.41, 0.40]}
    summary = {
        next(n for n in GROUPS[STAGE0_GROUP] if n.endswith(f"_{suffix}")): {
            "seeds": [0, 1], "drafts": {"k1": {"alpha": describe(values), "tau": describe([2.0, 2.1])}},
            "comparisons": [],
        }
        for suffix, values in alphas.items()
    }
    images = _scaling_tables(summary, tmp_path)
    rows = json.loads((tmp_path / f"{STAGE0_GROUP}.json").read_text())
    assert [r["stage0_share"] for r in rows] == [0.0, 0.25, 1.0, 2.0]
    assert [round(r["alpha"]["mean"], 3) for r in rows] == [0.31, 0.355, 0.395, 0.405]
    # the preset-size task holds no AdaSPEC draft here: no capacity table is claimed from it
    assert images == [tmp_path / f"{STAGE0_GROUP}.png"] and not (tmp_path / f"{CAPACITY}.json").exists()
    assert "| 0.25 | 2 | 0.355" in (tmp_path / f"{STAGE0_GROUP}.md").read_text()
