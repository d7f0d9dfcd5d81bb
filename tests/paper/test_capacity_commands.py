"""The experiments' loops as options (issue 49, item 5): `paper --collect-each` runs a group one task at a time and
collects it after each, `--reuse` takes a task's evaluation from another group's results instead of running it,
`--stages/--arms/--ks` run only part of the plan (the capacity experiment's forward-KL drafts that its serving
comparison times), and `bench-real --draft-group capacity` benches every finished one of them, falling back to
demo-real's heads when the capacity experiment has none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaspec.artefacts import paths
from adaspec.commands import bench_real
from adaspec.commands import paper as paper_command
from adaspec.commands.bench_real import with_draft_group
from adaspec.errors import UserError
from adaspec.paper.aggregate import reuse_main_evaluations
from adaspec.paper.draft_groups import capacity_drafts
from adaspec.paper.plan import CAPACITY, GROUPS, STAGE0_GROUP, TASKS, Step, paper_plan, task_steps
from adaspec.paper.runner import compose_step
from adaspec.paper.step_filter import StepFilter, selected_steps
from tests.conftest import REPO

FORWARD_KL_DRAFTS = ["--stages", "target,cache,pretrain_draft,ref,draft", "--arms", "a"]


def dry_run(capsys, monkeypatch, *args: str) -> list[str]:
    monkeypatch.chdir(REPO)  # the steps compose experiments/paper/
    paper_command.main([*args, "--dry-run"])
    return capsys.readouterr().out.splitlines()


def test_the_forward_kl_drafts_of_a_size_are_its_plans_own_steps_and_each_training_resumes(capsys, monkeypatch):
    steps = dry_run(capsys, monkeypatch, "--tasks", "smollm2_gsm8k_capacity_h256", "--seeds", "3",
                    *FORWARD_KL_DRAFTS, "--ks", "0.4,1")
    trained = [s for s in steps if "commands.train" in s]
    assert [s.split(" stage=")[1].split()[0] for s in trained] == ["target", "pretrain_draft", "ref", "draft", "draft"]
    assert all(s.endswith(" resume=true") for s in trained)
    drafts = [s for s in trained if "stage=draft" in s]
    assert [s.split(" k=")[1].split()[0] for s in drafts] == ["0.4", "1"]
    sized = [s for s in trained if "stage=target" not in s]
    assert all("model.draft_name=h256x6" in s and "seed=3" in s for s in sized)
    assert all("paper=smollm2_gsm8k_capacity " in s for s in sized)  # never the _nla / _lk arms
    assert not any("commands.evaluate" in s for s in steps)
    assert any(s.startswith("python -m adaspec.commands.cache paper=smollm2_gsm8k_capacity") for s in steps)

    only_distillspec = dry_run(capsys, monkeypatch, "--tasks", "smollm2_gsm8k_capacity_h256", "--seeds", "3",
                               *FORWARD_KL_DRAFTS, "--ks", "1")
    assert only_distillspec == [s for s in steps if " k=0.4 " not in s]


def test_a_filter_names_what_the_plan_has_when_asked_for_what_it_lacks():
    plan = task_steps([TASKS["smollm2_gsm8k_capacity_h128"]], [0])
    with pytest.raises(UserError, match=r"^--arms: no arm kl in the plan of these tasks; arms: a, lk, nla$"):
        selected_steps(plan, StepFilter(arms=("kl",)))
    with pytest.raises(UserError, match=r"^--ks: no draft at k=0.5 in the plan of these tasks; ks: 0.4, 1$"):
        selected_steps(plan, StepFilter(ks=(0.4, 0.5)))
    with pytest.raises(UserError, match="^--stages pretrain_target: no step of the plan of these tasks is left; "
                                        "its stages: target, cache, pretrain_draft, ref, draft, eval$"):
        selected_steps(plan, StepFilter(stages=("pretrain_target",)))
    assert selected_steps(plan, StepFilter()) == [step for _, step in plan]  # no filter: the whole plan


def test_an_unknown_size_stage_or_pairing_of_options_is_refused_in_one_line(capsys):
    for args, said in (
        (["--tasks", "smollm2_gsm8k_capacity_h512"], "invalid choice: 'smollm2_gsm8k_capacity_h512'"),
        (["--stages", "draft,stage9"], "argument --stages: unknown stage 'stage9'; stages: pretrain_target,"),
        (["--ks", "0.4,x"], "argument --ks: expected numbers such as 0.4,1, got '0.4,x'"),
        (["--ks", "1", "--collect-each"], "--ks 1 runs part of the plan and collects nothing"),
        (["--tasks", "gsm8k", "--reuse", "mbpp=elsewhere"], "--reuse mbpp=elsewhere: expected TASK=RESULTS with TASK"),
    ):
        with pytest.raises(SystemExit) as exit_:
            paper_command.parse_args(args)
        assert exit_.value.code == 2 and said in capsys.readouterr().err


@pytest.fixture
def recorded(monkeypatch):
    """What main runs and collects, in order, with nothing run: ("run", [task names]) and ("collect", names)."""
    events = []
    by_plan = {tuple(paper_plan([task], [0])): task.name for task in TASKS.values()}

    def run_plan(steps, extra):
        events.append(("run", [by_plan.get(tuple(steps), "several")] if steps else []))

    monkeypatch.setattr("adaspec.paper.runner.run_plan", run_plan)
    monkeypatch.setattr(paper_command, "_collect_and_log",
                        lambda tasks, args: events.append(("collect", [t.name for t in tasks])))
    monkeypatch.chdir(REPO)
    return events


def test_collect_each_runs_a_group_one_task_at_a_time_and_collects_the_whole_group_after_each(recorded, tmp_path):
    group = list(GROUPS["smollm2_gsm8k_capacity"])
    results = ["--results", str(tmp_path)]
    paper_command.main(["--tasks", "smollm2_gsm8k_capacity", "--seeds", "0", "--collect-each", *results])
    assert recorded == [event for name in group for event in (("run", [name]), ("collect", group))]

    recorded.clear()  # the controls: all at once, collected once; part of the plan, never collected
    paper_command.main(["--tasks", "smollm2_gsm8k_capacity", "--seeds", "0", *results])
    assert recorded == [("run", ["several"]), ("collect", group)]
    recorded.clear()
    paper_command.main(["--tasks", "smollm2_gsm8k_capacity", "--seeds", "0", "--ks", "1", *results])
    assert [kind for kind, _ in recorded] == ["run"]


def test_a_reused_task_is_collected_with_its_group_but_never_run(recorded, tmp_path):
    full_data = CAPACITY[0].name  # the stage-0 data group's full-data point is the capacity experiment's h128
    args = ["--tasks", STAGE0_GROUP, "--seeds", "0", "--no-sweeps", "--collect-each",
            "--reuse", f"{full_data}=experiments/results/smollm2-gsm8k-capacity/seed0", "--results", str(tmp_path)]
    assert paper_command.parse_args(args).reuse == {full_data: Path("experiments/results/smollm2-gsm8k-capacity/seed0")}
    paper_command.main(args)
    group = list(GROUPS[STAGE0_GROUP])
    ran = [names[0] for kind, names in recorded if kind == "run"]
    assert ran == [name for name in group if name != full_data]
    assert recorded.count(("collect", group)) == 3


def test_a_collection_that_would_drop_another_groups_summary_is_refused_before_anything_runs(recorded, tmp_path, capsys):
    head = ["--tasks", "smollm2_gsm8k_head", "--seeds", "0", "--no-sweeps"]

    def refused(*args: str) -> str:
        with pytest.raises(SystemExit) as exit_:
            paper_command.main([*head, *args])
        assert exit_.value.code == 2
        return capsys.readouterr().err

    said = refused()  # the default folder holds the tiny model's paper summary
    assert ("error: experiments/results/summary.json summarises gsm8k, mbpp, which collecting --tasks "
            "smollm2_gsm8k_head there would drop: pass --results") in said
    tiny_summary = tmp_path / "tiny" / "summary.json"
    tiny_summary.parent.mkdir()
    tiny_summary.write_text(json.dumps({"gsm8k": {}, "mbpp": {}, "sweeps": {}}))
    assert "summarises gsm8k, mbpp," in refused("--results", str(tiny_summary.parent))
    assert recorded == [] and json.loads(tiny_summary.read_text())["gsm8k"] == {}  # nothing ran, nothing rewritten
    other = tmp_path / "dataset" / "summary.json"  # another command's summary, and one that is not JSON's object
    other.parent.mkdir()
    other.write_text(json.dumps({"eval": [], "root": "outputs", "stages": {}}))
    assert (f"error: {other} is not a summary this runner wrote (it holds eval, root, stages): collect into another "
            "--results folder") in refused("--results", str(other.parent))
    other.write_text("[]")
    assert f"error: {other} is not a summary this runner wrote: collect" in refused("--results", str(other.parent))
    assert recorded == [] and other.read_text() == "[]"

    own = tmp_path / "head" / "summary.json"  # the controls: the group's own folder, its temperature-1 rows too ...
    own.parent.mkdir()
    own.write_text(json.dumps({"smollm2_gsm8k_head": {}, "smollm2_gsm8k_head t=1": {}, "sweeps": {}}))
    paper_command.main([*head, "--results", str(own.parent)])
    assert recorded == [("run", ["smollm2_gsm8k_head"]), ("collect", ["smollm2_gsm8k_head"])]
    recorded.clear()  # ... every task of the summary and more; part of the plan, which collects nothing
    paper_command.main(["--tasks", "gsm8k", "mbpp", "smollm2_gsm8k_head", "--seeds", "0", "--no-sweeps",
                        "--collect-only", "--results", str(tiny_summary.parent)])
    assert recorded == [("collect", ["gsm8k", "mbpp", "smollm2_gsm8k_head"])]
    recorded.clear()
    paper_command.main([*head, "--ks", "1", "--results", str(tiny_summary.parent)])
    assert [kind for kind, _ in recorded] == ["run"]


def evaluation(results: Path, task: str, seed: int, alpha: float) -> Path:
    path = results / task / f"seed{seed}" / "main.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"drafts": {"k1": {"alpha": alpha}}}))
    return path


def test_a_reused_evaluation_is_copied_where_the_results_have_none_and_never_over_one(tmp_path):
    source, out = tmp_path / "capacity", tmp_path / "stage0"
    evaluation(source, "h128", 0, 0.389)
    evaluation(source, "h128", 1, 0.391)
    kept = evaluation(out, "h128", 1, 0.4)  # an earlier collection's: not replaced
    assert reuse_main_evaluations("h128", [0, 1, 2], source, out) == [out / "h128" / "seed0" / "main.json"]
    assert json.loads((out / "h128" / "seed0" / "main.json").read_text())["drafts"]["k1"]["alpha"] == 0.389
    assert json.loads(kept.read_text())["drafts"]["k1"]["alpha"] == 0.4
    assert not (out / "h128" / "seed2").exists()  # nothing to reuse for seed 2
    assert reuse_main_evaluations("h128", [0], tmp_path / "nowhere", tmp_path / "empty") == []


def finished(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text("{}")


def drafts_in(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--draft")


def test_the_capacity_group_benches_every_finished_draft_and_demo_reals_heads_when_the_experiment_has_none(tmp_path):
    outputs = tmp_path / "outputs"
    seed0 = outputs / "capacity-real/gsm8k/smollm2/seed0"
    finished(seed0 / "draft-k1-target-answers/final")
    finished(seed0 / "draft-k0.4-target-answers/final")
    finished(seed0 / "draft-k1-h384x8-target-answers/final")
    (seed0 / "draft-k1-h256x6-target-answers/final").mkdir(parents=True)  # interrupted: no meta.json
    demo = outputs / "gsm8k/smollm2/seed0"
    finished(demo / "draft-k0.4-eagle3-target-answers/final")
    finished(demo / "ref-eagle3-target-answers/final")

    command = with_draft_group(["--draft-group", "capacity", "--ks", "1", "--gammas", "2", "--draft-dtype", "bfloat16"],
                               outputs)
    assert list(drafts_in(command)) == ["h128-k1", "h384-k1", "demo-real-head-k0.4", "demo-real-head-k1"]
    assert drafts_in(command)["demo-real-head-k1"] == str(demo / "ref-eagle3-target-answers/final")
    finished(demo / "draft-k0.4-eagle3-warm540-target-answers/final")  # demo-real's heads of now come first
    finished(demo / "ref-eagle3-warm540-target-answers/final")
    now = drafts_in(with_draft_group(["--draft-group", "capacity", "--ks", "1"], outputs))
    assert now["demo-real-head-k1"] == str(demo / "ref-eagle3-warm540-target-answers/final")
    assert command[command.index("--name") + 1] == "capacity-seed0-g2" and command[command.index("--gammas") + 1] == "2"
    assert command.index("--prompts") < command.index("--draft-dtype") < command.index("paper=smollm2_gsm8k_capacity")
    assert command[-2:] == ["seed=0", "baseline=[prompt_lookup]"]  # prompt lookup: a row of its own
    assert "--draft-group" not in command and "--ks" not in command  # the command the results record
    args = bench_real.parse_args(command)
    assert (args.prompts, args.gammas, args.temperatures, args.no_adaptive) == (40, [2], [0.0, 1.0], True)
    assert (args.serving, args.servings) == ("bfloat16-compiled", ["float32-compiled", "bfloat16-compiled-w2"])

    everything = drafts_in(with_draft_group(["--draft-group", "capacity", "--prompts", "10"], outputs))
    assert everything["h128-k0.4"] == str(seed0 / "draft-k0.4-target-answers/final")
    finished(seed0 / "draft-k0.4-eagle3-target-answers/final")  # the capacity experiment's own head comes first
    own = drafts_in(with_draft_group(["--draft-group", "capacity"], outputs))
    assert "head-k0.4" in own and not any(name.startswith("demo-real-head") for name in own)
    assert bench_real.parse_args(with_draft_group(["--draft-group", "capacity", "--prompts", "10"], outputs)).prompts == 10


def test_the_capacity_group_finds_each_draft_where_the_capacity_plan_trains_it(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the steps compose experiments/paper/
    trained = []
    for task in CAPACITY:
        for k in (0.4, 1):
            step = Step("train", (*task.args(), "stage=draft", "seed=2", f"k={k}"))
            trained.append(tmp_path / paths.final(paths.of(compose_step(step, [])).draft_dir()))
    for folder in trained:
        finished(folder)
    assert sorted(capacity_drafts(2, (0.4, 1), tmp_path / "outputs").values()) == sorted(trained)


def test_the_capacity_group_says_what_to_train_when_nothing_is_finished_and_is_needed_for_seed_and_ks(tmp_path, capsys):
    with pytest.raises(UserError, match="--draft-group capacity: no finished draft under .*seed4.*"
                                        "--seeds 4 --stages target,cache,pretrain_draft,ref,draft --arms a --ks 0.4,1"):
        with_draft_group(["--draft-group", "capacity", "--seed", "4"], tmp_path / "outputs")
    untouched = ["--prompts", "3", "--draft", "h=x/final", "--gammas", "2", "model=smollm2"]
    assert with_draft_group(untouched, tmp_path / "outputs") == untouched  # --draft is not --draft-group
    with pytest.raises(SystemExit):
        bench_real.parse_args(["--seed", "1"])
    assert "--seed and --ks choose the drafts of --draft-group" in capsys.readouterr().err
