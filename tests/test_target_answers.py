"""distill.data=target (the target's own answers as training data) and top-K caches cut from a larger one,
on the test-size model=smollm2 pipeline of test_smollm2_pipeline: a tiny chat Llama as the target."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from adaspec.artefacts import paths
from adaspec.artefacts.store import fingerprint, read_meta
from adaspec.config.rules import validate
from adaspec.data.datamodule import encode_all
from adaspec.data.encoding import IGNORE, prompt_ids, stop_token_id
from adaspec.data.target_answers import (
    ANSWERS,
    AnswerSpec,
    answered_examples,
    ensure_target_answers,
    read_answers,
)
from adaspec.data.tasks import held_out_training, load_task
from adaspec.decoding import target_generate
from adaspec.distill.cache_build import build_cache
from adaspec.distill.teacher_cache import CacheSpec, TeacherCache, write_teacher_cache
from adaspec.errors import UserError
from adaspec.models.build import load_model
from adaspec.stages.stage_run import StageRun
from adaspec.training.pipeline import build_data, resolve_stage_config, run_stage
from tests.conftest import compose_config
from tests.test_smollm2_pipeline import overrides_at_test_size, tiny_instruct_target

N_TRAIN = 8
MAX_NEW = 200


@pytest.fixture(scope="module")
def setup(tmp_path_factory, one_torch_thread):
    tmp = tmp_path_factory.mktemp("answers")
    overrides = overrides_at_test_size(tmp, N_TRAIN) + [
        f"distill.answer_max_new_tokens={MAX_NEW}",
        "distill.answer_batch_size=1",
        "stage.max_steps=4",
        "trainer.enable_progress_bar=false",
    ]

    def cfg(*more: str):
        return validate(compose_config(*overrides, *more))

    tiny_instruct_target(tmp / "instruct", load_task(cfg().task)["train"], steps=60)
    run_stage(cfg("stage=target", "stage.max_steps=0"))
    yield cfg
    shutil.rmtree(tmp, ignore_errors=True)


def test_stages_refuse_to_start_without_the_answers_and_name_the_command(setup):
    with pytest.raises(UserError, match="make answers"):
        run_stage(setup("stage=ref", "distill.data=target", "distill.teacher=live"))


def test_answers_are_the_targets_greedy_output_and_generation_resumes(setup, capsys):
    c = setup("stage=ref", "distill.data=target")
    build_cache(c)  # generates the answers first
    folder = paths.of(c).target_answers_dir()
    saved = read_answers(folder)
    assert sorted(saved) == list(range(N_TRAIN + c.task.n_val))  # and the held-out validation prompts
    final = paths.final(paths.of(c).target_dir())
    tokenizer = AutoTokenizer.from_pretrained(str(final))
    target = load_model(final).eval()
    stop = stop_token_id(tokenizer, "chat")
    for i, example in enumerate(answered_examples(c.task, load_task(c.task)["train"])):
        ids = torch.tensor([prompt_ids(tokenizer, example.prompt, "chat")])
        tokens = target_generate(target, ids, max_new_tokens=MAX_NEW, eos_token_id=stop).tokens
        assert saved[i]["stopped"] == (stop in tokens)
        assert saved[i]["answer"] == tokenizer.decode([t for t in tokens if t != stop], skip_special_tokens=True)
    assert any(r["stopped"] for r in saved.values())
    # a crash in the middle of a line: the cut record is generated again, nothing else
    lines = (folder / ANSWERS).read_text().splitlines()
    (folder / ANSWERS).write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:10])
    capsys.readouterr()
    ensure_target_answers(AnswerSpec.of(c), load_task(c.task)["train"])
    assert "target answers: 1 prompts" in capsys.readouterr().out
    assert read_answers(folder) == saved


def test_stages_train_on_the_finished_target_answers_only(setup):
    c = setup("stage=ref", "distill.data=target")
    build_cache(c)
    run_stage(c)
    saved = read_answers(paths.of(c).target_answers_dir())
    finished = [saved[i]["answer"] for i in range(N_TRAIN) if saved[i]["stopped"]]
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(paths.of(c).target_dir())))
    cache = TeacherCache(paths.of(c).teacher_cache_dir())
    assert paths.of(c).teacher_cache_dir().name == f"target-answers-n{N_TRAIN}-topk8"
    counts = np.diff(cache.offsets)[: len(finished)].tolist()
    assert counts == [len(tokenizer(a, add_special_tokens=False)["input_ids"]) + 1 for a in finished]
    held_out = [saved[N_TRAIN + j]["answer"] for j in range(c.task.n_val) if saved[N_TRAIN + j]["stopped"]]
    assert held_out, "the test needs a finished held-out answer"
    assert cache.meta["examples"] == len(finished) + len(held_out)
    ref = paths.of(c).ref_dir()
    assert ref.name == "ref-target-answers" and read_meta(paths.final(ref))["stage"] == "ref"
    assert fingerprint(c, "ref") != fingerprint(setup("stage=ref"), "ref")


def test_a_smaller_top_k_cache_is_cut_from_a_larger_one(setup, tmp_path, capsys):
    c8, c4 = setup("stage=ref"), setup("stage=ref", "distill.cache_topk=4")
    build_cache(c8)
    capsys.readouterr()
    build_cache(c4)
    assert "cut from" in capsys.readouterr().out
    cut = TeacherCache(paths.of(c4).teacher_cache_dir())
    final = paths.final(paths.of(c4).target_dir())
    tokenizer = AutoTokenizer.from_pretrained(str(final))
    splits = load_task(c4.task)
    encoded = encode_all(tokenizer, splits["train"], 512, prompt_format="chat")
    encoded += encode_all(tokenizer, splits["test"][:2], 512, len(encoded), "chat")
    direct = TeacherCache(write_teacher_cache(
        load_model(final).eval(), encoded, tmp_path / "direct", CacheSpec("topk", 4), cut.meta["identity"],
        batch_size=4, pad_id=tokenizer.pad_token_id, progress=False,
    ))
    assert cut.meta["rows"] == direct.meta["rows"] and cut.meta["derived_from"] == "topk8"
    assert np.array_equal(np.asarray(cut.top_ids), np.asarray(direct.top_ids))
    assert np.allclose(np.asarray(cut.top_logprobs, np.float32), np.asarray(direct.top_logprobs, np.float32), atol=1e-2)
    assert np.allclose(np.asarray(cut.rest), np.asarray(direct.rest), atol=2e-3)
    assert json.loads((paths.of(c4).teacher_cache_dir() / "cache.json").read_text())["topk"] == 4


def test_validation_is_the_targets_answers_to_held_out_training_prompts_never_the_test_split(setup):
    c = setup("stage=ref", "distill.data=target")
    build_cache(c)
    data, _, _ = build_data(StageRun.of(c), None)
    saved = read_answers(paths.of(c).target_answers_dir())
    held_out = held_out_training(c.task, c.task.n_val)
    expected = [replace(e, target=saved[N_TRAIN + j]["answer"]) for j, e in enumerate(held_out)
                if saved[N_TRAIN + j]["stopped"]]
    tokenizer = data.tokenizer
    assert data.val_set == encode_all(tokenizer, expected, c.task.max_length, len(data.train_set), "chat")
    test_prompts = {e.prompt for e in load_task(c.task)["test"]}
    assert not test_prompts & {e.prompt for e in held_out}
    assert not {e.prompt for e in load_task(c.task)["train"]} & {e.prompt for e in held_out}


def test_target_answers_without_n_train_name_the_key(setup):
    with pytest.raises(UserError, match="task.n_train"):
        held_out_training(setup("task.n_train=null").task, 2)
    with pytest.raises(UserError, match="task.n_val"):
        held_out_training(setup("task.n_train=100000").task, 2)


def test_the_official_budget_match_counts_the_finished_answers_only(setup):
    ref = setup("stage=ref", "distill.data=target")
    build_cache(ref)
    path = paths.of(ref).target_answers_dir() / ANSWERS
    original = path.read_text()
    records = list(read_answers(path.parent).values())  # without a line an earlier test cut (a crash)
    finished = [r for r in records if r["index"] < N_TRAIN and r["stopped"]]
    assert len(finished) >= 2  # how many the tiny target finishes depends on the machine's arithmetic
    finished[0]["stopped"] = False  # as if the target had not finished it
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        draft = setup("stage=draft", "k=0.4", "distill.data=target", "distill.match_token_budget=true")
        resolved, splits = resolve_stage_config(draft)
        assert resolved.stage.batch_size == 10  # stage.batch_size 4 / k 0.4
        data, _, _ = build_data(StageRun.of(resolved), splits)  # the training splits are made once, from the task's
        assert len(data.train_set) == len(finished) - 1
    finally:
        path.write_text(original)


def test_unfinished_answers_can_be_kept_cut_short_with_no_stop_token_learnt(setup):
    """distill.keep_unfinished_answers=true trains (and validates) on every answer, the unfinished ones as the
    target wrote them within its budget and with no stop token after them: other data, in other folders; the
    default drops them and keeps its identity."""
    dropped = setup("stage=ref", "distill.data=target")
    build_cache(dropped)
    path = paths.of(dropped).target_answers_dir() / ANSWERS
    original = path.read_text()
    records = sorted(read_answers(path.parent).values(), key=lambda r: r["index"])
    next(r for r in records if r["index"] < N_TRAIN and r["stopped"])["stopped"] = False  # as if cut short
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        kept = setup("stage=ref", "distill.data=target", "distill.keep_unfinished_answers=true")
        assert paths.of(kept).target_answers_dir() == paths.of(dropped).target_answers_dir()  # the same answers
        assert paths.of(kept).teacher_cache_dir().name == f"target-answers-unfinished-n{N_TRAIN}-topk8"
        assert paths.of(kept).ref_dir().name == "ref-target-answers-unfinished"
        assert fingerprint(kept, "ref") != fingerprint(dropped, "ref")
        off = setup("stage=ref", "distill.data=target", "distill.keep_unfinished_answers=false")
        assert fingerprint(off, "ref") == fingerprint(dropped, "ref") and paths.of(off).ref_dir().name == "ref-target-answers"
        with pytest.raises(UserError, match="distill.keep_unfinished_answers.*distill.data=target"):
            setup("stage=ref", "distill.keep_unfinished_answers=true")  # the dataset's answers all finish
        build_cache(kept)
        tokenizer = AutoTokenizer.from_pretrained(str(paths.final(paths.of(kept).target_dir())))
        stop = stop_token_id(tokenizer, "chat")
        trained = {}
        for name, c in (("dropped", dropped), ("kept", kept)):
            resolved, splits = resolve_stage_config(c)
            trained[name] = build_data(StageRun.of(resolved), splits)[0].train_set
        stopped = [r["stopped"] for r in records[:N_TRAIN]]
        assert len(trained["kept"]) == N_TRAIN and len(trained["dropped"]) == sum(stopped) < N_TRAIN
        for e, record in zip(trained["kept"], records[:N_TRAIN], strict=True):
            answer = tokenizer(record["answer"], add_special_tokens=False)["input_ids"]
            assert [label for label in e.labels if label != IGNORE] == answer + [stop] * record["stopped"]
        cache = TeacherCache(paths.of(kept).teacher_cache_dir())
        assert cache.meta["examples"] == N_TRAIN + kept.task.n_val
        labelled = [sum(label != IGNORE for label in e.labels) for e in trained["kept"]]
        assert np.diff(cache.offsets)[:N_TRAIN].tolist() == labelled
    finally:
        path.write_text(original)


def test_a_draft_on_other_data_distils_against_the_shared_reference_and_is_evaluated_beside_the_others(setup):
    """distill.ref_data: a draft trained on the dataset's answers reads the reference trained on the target's
    (one reference for every data arm); the evaluation finds it through eval.tag_data; ref_data unset
    leaves a draft's fingerprint as it was, and a reference cannot claim data it did not train on."""
    from adaspec.evaluation.run import EvalSettings, check_artefacts

    ref = setup("stage=ref", "distill.data=target")
    build_cache(ref)
    run_stage(ref)
    draft = setup("stage=draft", "k=0.4", "distill.data=dataset", "distill.ref_data=target", "stage.tag=dataset")
    build_cache(draft)
    final = run_stage(draft)
    assert final.parent.name == "draft-k0.4-dataset"
    assert read_meta(final)["upstream"]["ref"] == read_meta(paths.final(paths.of(ref).ref_dir()))["weights"]
    plain = setup("stage=draft", "k=0.4")
    assert fingerprint(draft, "draft") != fingerprint(setup("stage=draft", "k=0.4", "stage.tag=dataset"), "draft")
    naming_its_own = setup("stage=draft", "k=0.4", "distill.ref_data=dataset")
    assert fingerprint(plain, "draft") == fingerprint(naming_its_own, "draft")
    evaluation = setup("distill.data=target", "eval.draft_ks=[0.4]", "eval.draft_tags=[dataset]",
                       "+eval.tag_data.dataset=dataset")
    assert check_artefacts(EvalSettings.of(evaluation))[1] == [(0.4, "dataset", final)]
    # stage 2 itself trains on distill.data, into its own folder, whatever stage 3 is told to read
    assert paths.of(setup("stage=ref", "distill.ref_data=target")).ref_dir() == paths.of(setup("stage=ref")).ref_dir()


def test_on_policy_steps_can_mix_with_the_targets_answers(setup):
    """distill.data=mixed distill.mixed_with=target: the fixed steps train on the target's finished answers
    (and their cache), the others on the draft's own samples; mixed_with counts only where it acts."""
    mixed = ("distill.data=mixed", "distill.mixed_with=target", "distill.ref_data=target", "stage.tag=mix")
    ref = setup("stage=ref", "distill.data=target")
    build_cache(ref)
    run_stage(ref)
    draft = setup("stage=draft", "k=0.4", *mixed)
    assert paths.of(draft).teacher_cache_dir() == paths.of(ref).teacher_cache_dir()
    data, _, _ = build_data(StageRun.of(draft), None)
    saved = read_answers(paths.of(draft).target_answers_dir())
    finished = [saved[i]["answer"] for i in range(N_TRAIN) if saved[i]["stopped"]]
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(paths.of(draft).target_dir())))
    trained_on = [tokenizer.decode([t for t in e.labels if t >= 0], skip_special_tokens=True)
                  for e in data.train_set]
    assert [a.strip() for a in trained_on] == [a.strip() for a in finished]
    final = run_stage(draft)
    assert json.loads((final / "metrics.json").read_text())["steps"] == 4
    with_dataset = setup("stage=draft", "k=0.4", "distill.data=mixed", "distill.ref_data=target", "stage.tag=mix")
    assert fingerprint(draft, "draft") != fingerprint(with_dataset, "draft")
    assert fingerprint(setup("stage=draft", "distill.mixed_with=target"), "draft") == fingerprint(
        setup("stage=draft"), "draft"
    )
    with pytest.raises(UserError, match="distill.mixed_with"):
        setup("distill.data=mixed", "distill.mixed_with=draft")


def fresh_copy_of_the_target(setup, tmp_path, c):
    """A fresh run root whose target is the same weights saved with other file bytes (other metadata)."""
    from safetensors.torch import load_file, save_file

    from adaspec.data import target_answers

    fresh = setup("stage=ref", "distill.data=target", f"paths.root={tmp_path / 'fresh'}")
    final, fresh_final = paths.final(paths.of(c).target_dir()), paths.final(paths.of(fresh).target_dir())
    shutil.copytree(final, fresh_final)
    tensors = load_file(fresh_final / "model.safetensors")
    save_file(tensors, fresh_final / "model.safetensors", metadata={"format": "pt", "saved_by": "elsewhere"})
    assert target_answers.target_content_hash(fresh_final) == target_answers.target_content_hash(final)
    meta = read_meta(fresh_final)
    meta["weights"] = "elsewhere"  # the file hash differs; only the content hash may match
    (fresh_final / "meta.json").write_text(json.dumps(meta))
    return fresh, tensors


@pytest.fixture
def small_parts(monkeypatch, tmp_path):
    """Committed answer parts of 4 problems, in a folder of the test's own."""
    from adaspec.data import answer_parts, target_answers

    monkeypatch.setattr(answer_parts, "PART_SIZE", 4)
    monkeypatch.setattr(target_answers, "COMMITTED", tmp_path / "results")


def test_answer_parts_are_the_run_answers_written_whole_with_their_hash(setup, small_parts, capsys):
    from adaspec.data.answer_parts import part_files, read_part
    from adaspec.data.target_answers import committed_answers_dir, target_content_hash, write_answer_parts

    c = setup("stage=ref", "distill.data=target", "distill.answer_parts=0-2")
    written = write_answer_parts(AnswerSpec.of(c), "0-2")
    source = committed_answers_dir(AnswerSpec.of(c))
    assert written == [part_files(source, p)[0] for p in range(3)]
    saved = read_answers(paths.of(c).target_answers_dir())
    ours = target_content_hash(paths.final(paths.of(c).target_dir()))
    for part in range(3):
        assert read_part(source, part, ours) == [saved[i] for i in range(4 * part, 4 * part + 4)]
        sidecar = json.loads(part_files(source, part)[1].read_text())
        assert sidecar["first"] == 4 * part and sidecar["count"] == 4 and sidecar["generation"]["greedy"]
    assert read_part(source, 0, "another target") is None
    capsys.readouterr()
    assert write_answer_parts(AnswerSpec.of(c), "1-3") == [part_files(source, 3)[0]]  # 1-2 are finished: kept
    assert "answer part 1: finished" in capsys.readouterr().out
    with pytest.raises(UserError, match="distill.answer_parts='9-2'"):
        write_answer_parts(AnswerSpec.of(c), "9-2")


def test_a_fresh_run_adopts_the_committed_parts_of_its_target_and_generates_nothing(setup, small_parts, tmp_path, capsys):
    from safetensors.torch import save_file

    from adaspec.data.target_answers import target_content_hash, write_answer_parts

    c = setup("stage=ref", "distill.data=target")
    train = load_task(c.task)["train"]
    write_answer_parts(AnswerSpec.of(c), "0-2")  # problems 0-11: the 8 training ones and the 2 held out
    fresh, tensors = fresh_copy_of_the_target(setup, tmp_path, c)
    capsys.readouterr()
    ensure_target_answers(AnswerSpec.of(fresh), train)
    out = capsys.readouterr().out
    assert "10 committed answers of this target" in out and "prompts," not in out  # nothing generated
    assert read_answers(paths.of(fresh).target_answers_dir()) == {
        i: r for i, r in read_answers(paths.of(c).target_answers_dir()).items() if i < N_TRAIN + c.task.n_val}

    tensors[sorted(tensors)[0]] += 1e-3  # one changed tensor: another target, whose answers these are not
    fresh_final = paths.final(paths.of(fresh).target_dir())
    save_file(tensors, fresh_final / "model.safetensors")
    assert target_content_hash(fresh_final) != target_content_hash(paths.final(paths.of(c).target_dir()))
    shutil.rmtree(paths.of(fresh).target_answers_dir())
    other = setup("stage=ref", "distill.data=target", f"paths.root={tmp_path / 'fresh'}", "task.n_train=2",
                  "task.n_val=1")
    ensure_target_answers(AnswerSpec.of(other), load_task(other.task)["train"])
    out = capsys.readouterr().out
    assert "belong to another target" in out and "3 prompts" in out
    with pytest.raises(UserError, match="another target is committed there; it is not overwritten"):
        write_answer_parts(AnswerSpec.of(other), "0")


def test_a_cut_or_edited_part_is_refused_with_the_command_that_regenerates_it(setup, small_parts, tmp_path):
    from adaspec.data.answer_parts import part_files
    from adaspec.data.target_answers import committed_answers_dir, write_answer_parts

    c = setup("stage=ref", "distill.data=target")
    write_answer_parts(AnswerSpec.of(c), "0-2")
    lines, sidecar = part_files(committed_answers_dir(AnswerSpec.of(c)), 1)
    whole = lines.read_bytes()
    fresh, _ = fresh_copy_of_the_target(setup, tmp_path, c)
    for damaged in (whole[:-7], whole.replace(b'"stopped": true', b'"stopped": false', 1), b""):
        if damaged == whole:
            continue
        lines.write_bytes(damaged)
        with pytest.raises(UserError, match=r"part-0001.jsonl: the answer part does not match the hash.*"
                                             r"make answer-parts ARGS=\"distill.answer_parts=1\""):
            ensure_target_answers(AnswerSpec.of(fresh), load_task(fresh.task)["train"])
        assert lines.read_bytes() == damaged  # nothing committed is overwritten
    lines.write_bytes(whole)
    sidecar.write_text(sidecar.read_text()[:20])
    with pytest.raises(UserError, match="part-0001.json: not a part's sidecar"):
        ensure_target_answers(AnswerSpec.of(fresh), load_task(fresh.task)["train"])


def test_an_interrupted_part_is_generated_again_from_the_run_answers(setup, small_parts):
    """A part's sidecar is written last: a part file without one was being written when the session stopped."""
    from adaspec.data.answer_parts import part_files
    from adaspec.data.target_answers import committed_answers_dir, write_answer_parts

    c = setup("stage=ref", "distill.data=target")
    write_answer_parts(AnswerSpec.of(c), "0")
    lines, sidecar = part_files(committed_answers_dir(AnswerSpec.of(c)), 0)
    whole = lines.read_bytes()
    sidecar.unlink()
    lines.write_bytes(whole[: len(whole) // 2])
    assert write_answer_parts(AnswerSpec.of(c), "0") == [lines]
    assert lines.read_bytes() == whole and sidecar.is_file()


def sampled(setup, *more: str):
    return setup("stage=ref", "distill.data=target", "distill.answer_temperature=1.0", "distill.answer_batch_size=3",
                 *more)


def test_sampled_answers_live_in_folders_of_their_own_and_count_in_the_stages_identity(setup):
    greedy, draws = setup("stage=ref", "distill.data=target"), sampled(setup)
    layout = paths.of(draws)
    assert layout.target_answers_dir().name == "chat-max200-t1-s0-b3"
    assert layout.teacher_cache_dir().name == f"target-answers-t1-s0-b3-n{N_TRAIN}-topk8"
    assert layout.ref_dir().name == "ref-target-answers-t1-s0-b3"
    assert paths.of(sampled(setup, "distill.answer_seed=3")).target_answers_dir().name == "chat-max200-t1-s3-b3"
    assert paths.of(greedy).target_answers_dir().name == "chat-max200"  # greedy answers keep their folders
    assert fingerprint(draws, "ref") != fingerprint(greedy, "ref")
    four = sampled(setup, "distill.answer_batch_size=4")  # other batches draw other answers
    assert fingerprint(draws, "ref") != fingerprint(four, "ref") and paths.of(four).ref_dir().name.endswith("-b4")
    assert fingerprint(greedy, "ref") == fingerprint(setup("stage=ref", "distill.data=target",
                                                           "distill.answer_batch_size=4"), "ref")
    with pytest.raises(UserError, match="distill.answer_temperature"):
        setup("stage=ref", "distill.data=target", "distill.answer_temperature=-1")


def test_sampled_answers_are_drawn_per_fixed_batch_so_a_resumed_run_draws_the_same(setup, small_parts, capsys):
    """Sampled answers are drawn part by part of the training file (parts of 4 here), in batches of a fixed
    composition: the 10 problems a run needs come with the rest of their parts (12)."""
    from adaspec.data.target_answers import answer_batches

    c = sampled(setup)
    train = load_task(c.task)["train"]
    folder = paths.of(c).target_answers_dir()
    ensure_target_answers(AnswerSpec.of(c), train)
    drawn = read_answers(folder)
    greedy = setup("stage=ref", "distill.data=target")
    ensure_target_answers(AnswerSpec.of(greedy), train)
    greedy_answers = read_answers(paths.of(greedy).target_answers_dir())  # other tests answer more problems there
    assert sorted(drawn) == list(range(12))
    assert any(drawn[i]["answer"] != greedy_answers[i]["answer"] for i in range(N_TRAIN + c.task.n_val))
    # one answer lost in a crash: its whole batch is drawn again, with the same seed, and gives the same answers
    lines = (folder / ANSWERS).read_text().splitlines()
    (folder / ANSWERS).write_text("\n".join(line for line in lines if json.loads(line)["index"] != 5) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(paths.of(c).target_dir())))
    examples = answered_examples(c.task, train)
    lengths = {i: len(prompt_ids(tokenizer, examples[i].prompt, "chat")) for i in range(4, 8)}
    (batch,) = answer_batches([5], [4, 5, 6, 7], lengths, 3, sampled=True)  # part 1's batch holding problem 5
    capsys.readouterr()
    ensure_target_answers(AnswerSpec.of(c), train)
    assert f"target answers: {len(batch)} prompts" in capsys.readouterr().out and 5 in batch
    assert read_answers(folder) == drawn
    # what makes it so: a lost answer's batch is the fixed one it was drawn in (greedy answers need only the lost)
    lengths = dict.fromkeys(range(10), 5) | {4: 1}
    assert answer_batches([4], list(range(10)), lengths, 3, sampled=True) == [[4, 0, 1]]
    assert answer_batches([4], list(range(10)), lengths, 3, sampled=False) == [[4]]
    # another seed draws other answers
    other = sampled(setup, "distill.answer_seed=1")
    ensure_target_answers(AnswerSpec.of(other), train)
    assert read_answers(paths.of(other).target_answers_dir()) != drawn


def test_a_run_that_adopts_a_sampled_part_and_draws_the_rest_has_the_answers_of_one_that_drew_all(
        setup, small_parts, tmp_path, capsys):
    from adaspec.data.target_answers import write_answer_parts

    c = sampled(setup)
    train = load_task(c.task)["train"]
    ensure_target_answers(AnswerSpec.of(c), train)
    write_answer_parts(AnswerSpec.of(c), "1")  # part 1 committed; parts 0 and 2 not
    fresh, _ = fresh_copy_of_the_target(setup, tmp_path, c)
    fresh = sampled(setup, f"paths.root={tmp_path / 'fresh'}")
    capsys.readouterr()
    ensure_target_answers(AnswerSpec.of(fresh), train)
    out = capsys.readouterr().out
    assert "4 committed answers of this target" in out and "target answers: 8 prompts" in out
    assert read_answers(paths.of(fresh).target_answers_dir()) == read_answers(paths.of(c).target_answers_dir())


def test_sampling_near_zero_temperature_gives_the_greedy_answers(setup, small_parts):
    """The sampled path prompts, stops and decodes as the greedy one: at a temperature near 0 the draws are the
    argmax."""
    train = load_task(setup().task)["train"]
    greedy, cold = setup("stage=ref", "distill.data=target"), sampled(setup, "distill.answer_temperature=1e-4")
    for c in (greedy, cold):
        ensure_target_answers(AnswerSpec.of(c), train)
    cold_answers = read_answers(paths.of(cold).target_answers_dir())
    greedy_answers = read_answers(paths.of(greedy).target_answers_dir())  # other tests answer more problems there
    needed = range(N_TRAIN + greedy.task.n_val)
    assert all((cold_answers[i]["answer"], cold_answers[i]["stopped"]) ==
               (greedy_answers[i]["answer"], greedy_answers[i]["stopped"]) for i in needed)


def test_a_sampled_part_records_how_it_was_drawn_in_its_own_folder(setup, small_parts):
    from adaspec.data.answer_parts import part_files
    from adaspec.data.target_answers import committed_answers_dir, write_answer_parts

    c = sampled(setup)
    write_answer_parts(AnswerSpec.of(c), "0")
    source = committed_answers_dir(AnswerSpec.of(c))
    assert source != committed_answers_dir(AnswerSpec.of(setup("stage=ref", "distill.data=target")))
    generation = json.loads(part_files(source, 0)[1].read_text())["generation"]
    assert generation == {"greedy": False, "temperature": 1.0, "seed": 0, "batch_size": 3, "dtype": "float32",
                          "max_new_tokens": MAX_NEW}
    lines = part_files(source, 0)[0]
    lines.write_bytes(lines.read_bytes()[:-9])  # cut: refused with the command that draws it again
    with pytest.raises(UserError, match=r'distill.answer_parts=0 distill.answer_temperature=1 distill.answer_seed=0 distill.answer_batch_size=3"'):
        write_answer_parts(AnswerSpec.of(c), "0")
