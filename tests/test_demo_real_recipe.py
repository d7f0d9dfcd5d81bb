"""`make demo-real` as the Makefile writes it: every command's overrides compose and validate, and the
stages agree on the folders they hand on (the draft stages find the reference the ref stage writes, the
evaluation the drafts), so a typo in the recipe fails here, not 20 minutes into a run."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from adaspec.artefacts import paths
from adaspec.toolkit import checked_config
from tests.conftest import REPO


def recipe(target: str = "demo-real", *variables: str) -> list[tuple[str, list[str]]]:
    """(module, overrides) of every adaspec command of `make -n <target> <variables>`."""
    if shutil.which("make") is None:
        pytest.skip(f"needs make (the recipe is read from `make -n {target}`)")
    printed = subprocess.run(["make", "-n", target, *variables], cwd=REPO, capture_output=True, text=True,
                             check=True)
    commands = []
    for line in printed.stdout.replace("\\\n", " ").splitlines():  # a recipe line continued with a backslash
        words = shlex.split(line)
        if "-m" in words and words[words.index("-m") + 1].startswith("adaspec."):
            at = words.index("-m") + 1
            commands.append((words[at], words[at + 1 :]))
    return commands


# demo-real's heads on the target's greedy answers to every training problem, its default until 2026-12-07
GREEDY = ("HEAD_ANSWERS=$(GREEDY_ANSWERS)",)
# ... and before the one-pass warm-up became its default (2026-12-07): what the head question and head-convergence's
# committed curves were made beside
BEFORE_WARMUP = (*GREEDY, "HEAD_STEPS=480", "HEAD_WARMUP=0")


def test_every_demo_real_command_composes_and_the_stages_hand_on_their_folders():
    commands = recipe()
    modules = [m for m, _ in commands]
    assert modules == ["adaspec.commands.models", "adaspec.commands.train", "adaspec.commands.answers",
                       "adaspec.commands.cache", "adaspec.commands.train", "adaspec.commands.train",
                       "adaspec.commands.evaluate"]
    configs = [checked_config(*overrides) for module, overrides in commands if module != "adaspec.commands.models"]
    target, _, cache, ref, draft04, evaluation = configs
    assert target.stage.name == "target" and target.stage.max_steps == 0 and str(target.model.name) == "smollm2"
    assert ref.stage.name == "ref" and draft04.k == 0.4
    for cfg in configs:
        assert cfg.distill.data == "target" and cfg.task.prompt_format == "chat"
        assert paths.of(cfg).target_dir() == paths.of(target).target_dir()
    for cfg in (ref, draft04, evaluation):  # the best draft per CPU-hour: an EAGLE-3 head, 3 TTT passes
        assert cfg.model.draft_kind == "eagle3" and cfg.pretrain.corpus == "none" and cfg.distill.ttt_passes == 3
    # the reference and the AdaSPEC head train alike (but for the selection), under bfloat16 autocast
    assert {**ref.stage, "name": "draft"} == {**draft04.stage} and ref.trainer == draft04.trainer
    assert ref.trainer.precision == "bf16-mixed"
    # on the target's temperature-1 samples (every one kept) to the first 1,024 problems, in batches of 6 (a sampled
    # answer is longer), for a step budget, stopping early on a plateau
    for cfg in configs[1:]:
        assert cfg.task.n_train == 1024 and cfg.distill.answer_temperature == 1 and cfg.distill.answer_seed == 0
        assert cfg.distill.answer_batch_size == 64 and cfg.distill.keep_unfinished_answers
    assert paths.of(ref).teacher_cache_dir().name == "target-answers-t1-s0-b64-unfinished-n1024-topk64"
    assert ref.stage.batch_size == 6 and ref.stage.max_steps > 0
    assert ref.stage.early_stop_patience > 0 and ref.stage.val_every_n_steps > 0
    # the first 540 of 840 steps on the training-time test's first pass: about the time of 480 on all three
    assert (ref.stage.max_steps, ref.distill.ttt_warmup_steps, draft04.distill.ttt_warmup_steps) == (840, 540, 540)
    assert paths.of(ref).teacher_cache_dir() == paths.of(cache).teacher_cache_dir()
    assert paths.of(draft04).ref_dir() == paths.of(ref).ref_dir() == paths.of(evaluation).ref_dir()
    # DistillSpec is the reference itself (tests/evaluation/test_reference_row.py): evaluated, not retrained
    assert evaluation.eval.reference and list(evaluation.eval.draft_ks) == [0.4]
    assert evaluation.eval.timed_prompts == 4 and evaluation.decode.temperature == 0  # the rest replayed exactly
    assert paths.of(evaluation).draft_dir(0.4) == paths.of(draft04).draft_dir()
    # served as bench-real found fastest: compiled bfloat16, the head in bfloat16, each draft's tree or chain chosen
    # on held-out prompts among candidates that include the hybrid bench-real found fastest
    decode = evaluation.decode
    assert (str(decode.target_dtype), str(decode.draft_dtype), decode.compile) == ("bfloat16", "bfloat16", True)
    assert decode.draft_compile  # the head's steps compiled: 1.5-2 ms less a block (decode-block-profile-ab*.json)
    assert str(decode.tree) == "auto" and "k4-d3-n12+lookup8" in evaluation.eval.tree_candidates
    assert list(evaluation.eval.target_servings) == ["bfloat16-compiled-w2"]


def test_demo_real_on_the_greedy_answers_is_one_variable_away_and_reads_its_own_answers_and_caches():
    greedy = recipe("demo-real", *GREEDY)
    sampled = recipe()
    assert [m for m, _ in greedy] == [m for m, _ in sampled]
    configs = [checked_config(*o) for m, o in greedy if m != "adaspec.commands.models"]
    _, answers, cache, ref, draft04, evaluation = configs
    for cfg in (answers, cache, ref, draft04, evaluation):  # every problem but the 64 validating ones, greedy
        assert cfg.task.n_train + cfg.task.n_val == 7473 and cfg.distill.answer_temperature == 0
    # HEAD_BATCH follows the answers (8 greedy), the command line still wins over it
    assert (ref.stage.batch_size, ref.stage.max_steps) == (8, 840) and {**ref.stage, "name": "draft"} == {**draft04.stage}
    assert checked_config(*recipe("demo-real", *GREEDY, "HEAD_BATCH=4")[4][1]).stage.batch_size == 4
    assert checked_config(*recipe("demo-real", "HEAD_BATCH=4")[4][1]).stage.batch_size == 4
    # greedy answers named by their temperature are greedy too (a search for the key alone made them 6)
    explicit = recipe("demo-real", "HEAD_ANSWERS=task.n_train=7409 distill.answer_temperature=0")
    assert checked_config(*explicit[4][1]).stage.batch_size == 8
    assert paths.of(ref).teacher_cache_dir().name == "target-answers-n7409-topk64"
    assert paths.of(draft04).ref_dir() == paths.of(ref).ref_dir() == paths.of(evaluation).ref_dir()
    assert paths.of(evaluation).draft_dir(0.4) == paths.of(draft04).draft_dir()
    sampled_ref = checked_config(*sampled[4][1])  # beside the default's heads and caches, never over them
    assert paths.of(ref).ref_dir() != paths.of(sampled_ref).ref_dir()
    assert paths.of(ref).teacher_cache_dir() != paths.of(sampled_ref).teacher_cache_dir()
    assert paths.of(ref).target_dir() == paths.of(sampled_ref).target_dir()


def test_the_heads_warmed_up_and_not_live_in_folders_of_their_own_on_the_same_caches():
    warm = [checked_config(*o) for m, o in recipe("demo-real", *GREEDY) if m != "adaspec.commands.models"]
    before = [checked_config(*o) for m, o in recipe("demo-real", *BEFORE_WARMUP) if m != "adaspec.commands.models"]
    _, _, cache, ref, draft04, evaluation = warm
    for cfg in (ref, draft04, evaluation):
        assert cfg.distill.ttt_warmup_steps == 540 and cfg.distill.ttt_passes == 3
    assert ref.stage.early_stop_patience == 3  # counted from step 540 on
    assert all(cfg.distill.ttt_warmup_steps == 0 for cfg in before[3:]) and before[3].stage.max_steps == 480
    # the same answers and caches; heads and evaluation in folders of their own that stage 3 and the evaluation find
    assert paths.of(cache).teacher_cache_dir() == paths.of(before[2]).teacher_cache_dir()
    assert paths.of(ref).ref_dir().name == paths.of(before[3]).ref_dir().name.replace("-eagle3", "-eagle3-warm540")
    assert paths.of(draft04).draft_dir() != paths.of(before[4]).draft_dir()
    assert paths.of(evaluation).eval_dir() != paths.of(before[5]).eval_dir()
    assert paths.of(draft04).ref_dir() == paths.of(ref).ref_dir() == paths.of(evaluation).ref_dir()
    assert paths.of(evaluation).draft_dir(0.4) == paths.of(draft04).draft_dir()


def test_the_independent_recipe_trains_drafts_after_stage0_on_the_same_target_and_data():
    commands = [(m, o) for m, o in recipe("demo-real-independent") if m != "adaspec.commands.models"]
    configs = [checked_config(*overrides) for _, overrides in commands]
    target, _, cache, stage0, ref, draft04, draft1, evaluation = configs
    heads = {m: checked_config(*o) for m, o in recipe("demo-real", *GREEDY)
             if m == "adaspec.commands.cache"}["adaspec.commands.cache"]
    assert stage0.stage.name == "pretrain_draft" and stage0.pretrain.objective == "kd"  # the best of issue 13's
    assert ref.pretrain.objective == "kd"  # so the reference starts from stage 0's draft
    for cfg in (ref, draft04, draft1, evaluation):
        assert cfg.model.draft_kind == "model"
    assert paths.of(ref).teacher_cache_dir() == paths.of(cache).teacher_cache_dir()
    # the same target and answers; the heads' cache covers all 7,409 problems, the drafts' the first 500 ...
    assert paths.of(ref).target_dir() == paths.of(heads).target_dir() and ref.task.n_train == 500
    assert paths.of(heads).teacher_cache_dir() == paths.of(ref).teacher_cache_dir().with_name("target-answers-n7409-topk64")
    assert paths.of(heads).ref_dir() == paths.of(ref).ref_dir().with_name("ref-eagle3-warm540-target-answers")  # ... never
    assert paths.of(draft04).ref_dir() == paths.of(ref).ref_dir() == paths.of(draft1).ref_dir()
    assert {paths.of(evaluation).draft_dir(k) for k in evaluation.eval.draft_ks} == {
        paths.of(draft04).draft_dir(), paths.of(draft1).draft_dir()
    }


def test_bench_real_reads_demo_real_drafts_and_serves_them_as_the_readme_measured():
    from adaspec.commands.bench_real import parse_args

    (module, argv), = recipe("bench-real")
    args = parse_args(argv)
    cfg = checked_config(*args.overrides)
    assert module == "adaspec.commands.bench_real" and cfg.model.draft_kind == "eagle3"
    # the head in bfloat16, the target compiled in bfloat16 against the fastest target-only configurations
    assert str(cfg.decode.draft_dtype) == "bfloat16" and args.draft_dtype is None and cfg.decode.draft_compile
    assert args.serving == "bfloat16-compiled" and args.servings == ["float32-compiled", "bfloat16-compiled-w2"]
    # chains against trees and the hybrid, on the 20 prompts
    assert args.prompts == 20 and args.gammas == [3] and {"k4-d5-n16", "k4-d5-n16+lookup"} <= set(args.trees)
    assert paths.of(cfg).ref_dir() == paths.of(checked_config(*recipe()[4][1])).ref_dir()  # the reference's command


def test_head_convergence_trains_demo_real_reference_longer_on_the_same_data_and_caches():
    commands = [(m, o) for m, o in recipe("head-convergence") if m != "adaspec.commands.models"]
    modules = [m for m, _ in commands]
    assert modules == ["adaspec.commands.train", "adaspec.commands.answers", "adaspec.commands.cache",
                       "adaspec.commands.train", "adaspec.commands.curves"]
    long_ref = checked_config(*commands[3][1])
    demo_ref = checked_config(*recipe("demo-real", *BEFORE_WARMUP)[4][1])
    # in batches of 32, as demo-real trained its heads when the committed curves were made
    assert long_ref.stage.batch_size == 32 and long_ref.stage.early_stop_patience == 0
    assert long_ref.stage.max_steps * 32 > demo_ref.stage.max_steps * demo_ref.stage.batch_size
    assert long_ref.task == demo_ref.task and long_ref.distill == demo_ref.distill and long_ref.model == demo_ref.model
    assert paths.of(long_ref).teacher_cache_dir() == paths.of(demo_ref).teacher_cache_dir()
    assert paths.of(long_ref).ref_dir() != paths.of(demo_ref).ref_dir()  # beside demo-real's head, not over it
    # the curves read the folder the folder command finds for the training's own overrides, ARGS included
    run = commands[4][1][commands[4][1].index("--run") + 1]
    assert run.startswith(f"{long_ref.stage.max_steps} steps=$(") and run.endswith(")")
    finder = shlex.split(run[run.index("$(") + 2 : -1])
    assert finder[finder.index("-m") + 1 :] == ["adaspec.commands.folder", *commands[3][1]]


def test_the_head_question_trains_demo_real_heads_for_equal_steps_in_a_folder_of_its_own():
    from adaspec.paper.plan import TASKS, paper_plan
    from adaspec.paper.runner import compose_step

    steps = paper_plan([TASKS["smollm2_gsm8k_head"]], [0], sweeps=False)
    configs = [(step, compose_step(step, [])) for step in steps]
    trained = [c for s, c in configs if s.kind == "train" and c.stage.name in ("ref", "draft")]
    demo_ref = checked_config(*recipe("demo-real", *BEFORE_WARMUP)[4][1])
    assert len(trained) == 5  # the reference, then k=0.4 and k=1 with the forward KL and with the LK hybrid
    for cfg in trained:  # demo-real's data, head and schedule, but no early stop: every head takes the same steps
        assert cfg.task == demo_ref.task and cfg.trainer == demo_ref.trainer
        assert {**cfg.model, "draft_name": ""} == {**demo_ref.model} and cfg.model.draft_name
        assert {k: v for k, v in cfg.distill.items() if k != "divergence"} == {
            k: v for k, v in demo_ref.distill.items() if k != "divergence"}
        assert cfg.stage.max_steps == demo_ref.stage.max_steps and cfg.stage.early_stop_patience == 0
        assert cfg.stage.batch_size == demo_ref.stage.batch_size
        assert cfg.stage.val_every_n_steps == demo_ref.stage.val_every_n_steps
        assert cfg.stage.group_by_length == demo_ref.stage.group_by_length and cfg.stage.lr == demo_ref.stage.lr
        assert paths.of(cfg).ref_dir() != paths.of(demo_ref).ref_dir()  # never demo-real's heads ...
        assert paths.of(cfg).teacher_cache_dir() == paths.of(demo_ref).teacher_cache_dir()  # ... but its target and caches
    assert sorted(str(c.distill.divergence) for c in trained) == ["forward_kl"] * 3 + ["lk"] * 2
    evaluations = [c for s, c in configs if s.kind == "eval"]
    assert [(e.eval.n_prompts, e.decode.temperature) for e in evaluations] == [(40, 0.0), (20, 1.0)]
    assert all(e.gamma == 3 for e in evaluations)


def test_every_recipe_on_the_real_target_makes_one_target_folder_with_one_fingerprint():
    """The heads train on 7,409 problems' answers, the independent drafts on 500: the 0-step target they share
    must not be refused by one of them as 'trained with a different config'."""
    from adaspec.artefacts.store import fingerprint
    from adaspec.paper.plan import TASKS, paper_plan
    from adaspec.paper.runner import compose_step

    targets = [checked_config(*o) for t in ("demo-real", "demo-real-independent", "head-convergence", "answer-parts")
               for m, o in recipe(t) if m == "adaspec.commands.train" and "stage=target" in o]
    step = next(s for s in paper_plan([TASKS["smollm2_gsm8k_head"]], [0], sweeps=False) if "stage=target" in s.overrides)
    targets.append(compose_step(step, []))
    assert len(targets) == 5
    assert len({paths.of(c).target_dir() for c in targets}) == 1
    assert len({fingerprint(c, "target") for c in targets}) == 1
    heads = checked_config(*recipe()[4][1])  # negative control: the heads' own data would be another fingerprint
    assert fingerprint(heads, "target") != fingerprint(targets[0], "target")
