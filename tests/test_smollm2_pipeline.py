"""model=smollm2 end to end at test sizes: a tiny random Llama with SmolLM2's special tokens and chat template,
saved as a folder, is the pretrained target (model.target_path=<folder>). The target is used as it is
(stage.max_steps=0), the top-K teacher cache is built, the draft is built from model.draft with a reduced
vocabulary initialised from the target's embedding, then the reference, AdaSPEC k=0.4 and DistillSpec k=1
drafts are trained and evaluated on 2 GSM8K prompts in chat format."""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from adaspec.artefacts import paths
from adaspec.config.rules import validate
from adaspec.data.datamodule import encode_all
from adaspec.data.encoding import collate, prompt_ids, stop_token_id
from adaspec.data.example import Example
from adaspec.data.tasks import load_task
from adaspec.decoding import FixedGamma, speculative_generate, target_generate
from adaspec.distill.cache_build import build_cache
from adaspec.distill.teacher_cache import TeacherCache, data_identity
from adaspec.drafts import load_draft
from adaspec.evaluation.run import run_evaluation
from adaspec.models.build import load_model
from adaspec.models.draft_vocab import VOCAB_FILE, special_token_ids
from adaspec.training.pipeline import run_stage
from tests.conftest import compose_config, shared_data
from tests.models.tiny_gguf import chat_tokenizer

DRAFT_VOCAB = 96
N_TRAIN = 12


def tiny_instruct_target(folder, examples: list[Example], steps: int = 40) -> None:
    """A 2-layer Llama (tied embeddings, grouped-query attention) and a chat tokenizer, saved: trained for a
    few steps on the chat-format answers, so that its greedy output is made of the task's frequent tokens,
    which a draft with a reduced vocabulary can propose."""
    tokenizer = chat_tokenizer(vocab_size=600, texts=[e.prompt + e.target for e in examples])
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    batch = collate(encode_all(tokenizer, examples, 512, prompt_format="chat"), tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def overrides_at_test_size(tmp, n_train: int = N_TRAIN) -> list[str]:
    """model=smollm2 at test sizes: the tiny instruct target saved in `tmp`/instruct, outputs below `tmp`."""
    return [
        "model=smollm2",
        f"model.target_path={tmp / 'instruct'}",
        f"paths.models={tmp / 'models'}",
        f"paths.root={tmp / 'outputs'}",
        "task=gsm8k",
        f"task.local_dir={shared_data('gsm8k')}",
        f"task.n_train={n_train}",
        "task.n_test=4",
        "task.n_val=2",
        "task.max_length=512",
        "model.draft.hidden_size=16",
        "model.draft.num_hidden_layers=1",
        "model.draft.num_attention_heads=2",
        "model.draft.intermediate_size=32",
        f"model.draft_vocab_size={DRAFT_VOCAB}",
        "distill.teacher=cache",
        "distill.cache_mode=topk",
        "distill.cache_topk=8",
        "stage.batch_size=4",
        "stage.max_steps=8",
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_torch_thread):
    """Every stage, the cache and the evaluation, once; (config maker, evaluation results, printed text)."""
    tmp = tmp_path_factory.mktemp("smollm2")
    overrides = overrides_at_test_size(tmp) + [
        "stage.checkpoint_every_n_steps=2",
        "stage.monitor_prompts=1",
        "decode.max_new_tokens=16",
        "eval.n_prompts=2",
        "eval.gammas=[1,3]",
        "trainer.enable_progress_bar=false",
        "trainer.log_every_n_steps=1",
    ]

    def cfg(*more: str):
        return validate(compose_config(*overrides, *more))

    splits = load_task(cfg().task)
    tiny_instruct_target(tmp / "instruct", splits["train"])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_stage(cfg("stage=target", "stage.max_steps=0"))
        build_cache(cfg("stage=ref"))
        run_stage(cfg("stage=ref"))
        run_stage(cfg("stage=draft", "k=0.4"))
        run_stage(cfg("stage=draft", "k=1"))
        results = run_evaluation(cfg(), progress=False)
    yield cfg, results, printed.getvalue(), tmp
    shutil.rmtree(tmp, ignore_errors=True)


def test_the_target_is_the_instruct_model_as_it_is(run):
    cfg, _, _, tmp = run
    final = paths.final(paths.of(cfg()).target_dir())
    meta = json.loads((final / "meta.json").read_text())
    metrics = json.loads((final / "metrics.json").read_text())
    assert meta["stage"] == "target" and metrics["steps"] == 0 and metrics["val/ce"] > 0
    saved, original = load_file(final / "model.safetensors"), load_file(tmp / "instruct" / "model.safetensors")
    assert saved.keys() == original.keys()
    assert all(torch.equal(saved[k], original[k]) for k in original)
    assert not paths.last_checkpoint(paths.of(cfg()).target_dir()).exists()  # no step: no training to keep


def test_every_draft_artefact_carries_the_draft_vocabulary_in_its_identity(run):
    cfg, _, _, _ = run
    c = cfg()
    folders = [
        paths.final(paths.of(c).draft_init_dir()),
        paths.final(paths.of(c).ref_dir()),
        paths.final(paths.of(c).draft_dir(0.4)),
        paths.final(paths.of(c).draft_dir(1.0)),
    ]
    maps = []
    for folder in folders:
        assert VOCAB_FILE in json.loads((folder / "meta.json").read_text())["files"]
        draft = load_draft(folder)
        model = draft.model
        assert model.config.vocab_size == DRAFT_VOCAB and model.get_output_embeddings().out_features == DRAFT_VOCAB
        maps.append(draft.vocab.draft_to_target)
    assert all(torch.equal(m, maps[0]) for m in maps)
    init_metrics = json.loads((folders[0] / "metrics.json").read_text())
    assert init_metrics["draft_init"] == "target_embedding"


def test_the_draft_vocabulary_holds_the_special_tokens_and_maps_into_the_target(run):
    cfg, _, _, _ = run
    c = cfg()
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(paths.of(c).target_dir())))
    vocab = load_draft(paths.final(paths.of(c).draft_dir(0.4))).vocab
    assert vocab.size == DRAFT_VOCAB and vocab.target_size == len(tokenizer)
    assert special_token_ids(tokenizer) <= set(vocab.draft_to_target.tolist())
    assert bool(vocab.contains(torch.tensor(stop_token_id(tokenizer, "chat"))))


def test_speculative_greedy_output_equals_the_targets_and_proposals_are_map_tokens(run):
    cfg, results, _, _ = run
    c = cfg()
    target_folder = paths.final(paths.of(c).target_dir())
    tokenizer = AutoTokenizer.from_pretrained(str(target_folder))
    target = load_model(target_folder).eval()
    draft = load_draft(paths.final(paths.of(c).draft_dir(0.4))).eval()
    vocab = draft.vocab
    stop = stop_token_id(tokenizer, "chat")
    for example in load_task(c.task)["test"][:2]:
        ids = torch.tensor([prompt_ids(tokenizer, example.prompt, "chat")])
        ours = speculative_generate(
            target, draft, ids, gamma_policy=FixedGamma(3), max_new_tokens=16, eos_token_id=stop
        )
        plain = target_generate(target, ids, max_new_tokens=16, eos_token_id=stop)
        assert ours.tokens == plain.tokens
        with torch.no_grad():  # the draft's every proposal: an argmax over its N logits, mapped to the target
            logits = draft.model(input_ids=vocab.to_draft(ids)).logits
        assert logits.shape[-1] == DRAFT_VOCAB
        assert bool(vocab.contains(vocab.to_target(logits.argmax(-1))).all())
    for name, row in results["drafts"].items():  # the evaluation's own runs agree with the target too
        assert row["greedy_mismatches"] == 0
        assert row["acceptance_vs_gamma"]["replay_mismatches"] == 0  # the replay maps ids as the loop does
        if name != "prompt_lookup":  # the trained drafts' proposals were both accepted and rejected
            assert 0 < row["alpha"] < 1  # verification had work


def test_only_answer_and_end_of_turn_tokens_carry_the_distillation_signal(run):
    """The stages read chat-format examples, and the teacher cache holds one row per position that carries
    loss: exactly the answer's tokens and the template's end-of-turn token of every training example, no
    prompt or template token."""
    cfg, _, _, _ = run
    c = cfg("stage=ref")
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(paths.of(c).target_dir())))
    splits = load_task(c.task)
    chat = encode_all(tokenizer, splits["train"], c.task.max_length, prompt_format="chat")
    chat += encode_all(tokenizer, splits["test"][: c.task.n_val], c.task.max_length, len(chat), "chat")
    assert TeacherCache(paths.of(c).teacher_cache_dir()).meta["identity"]["data"] == data_identity(chat)
    assert tokenizer.decode(chat[0].input_ids).startswith("<|im_start|>system\n")
    counts = np.diff(np.load(paths.of(c).teacher_cache_dir() / "offsets.npy"))[:N_TRAIN].tolist()
    answers = [
        len(tokenizer(e.target, add_special_tokens=False)["input_ids"]) + 1  # + <|im_end|>
        for e in splits["train"]
    ]
    assert counts == answers


def test_the_evaluation_notes_that_hf_assisted_is_skipped_for_a_reduced_draft(run):
    _, results, printed, _ = run
    assert set(results["drafts"]) == {"k0.4", "k1", "prompt_lookup"}  # prompt lookup: the default baseline
    notes = [line for line in printed.splitlines() if "HF assisted generation cannot map" in line]
    assert len(notes) == 2
    for row in (results["drafts"]["k0.4"], results["drafts"]["k1"]):
        assert row["speedup_vs_hf_assisted"] is None and "hf_assisted/wall_time_s" not in row
        assert row["alpha"] is not None


def test_bench_real_times_every_gamma_and_is_exact_when_greedy(run, tmp_path):
    """`make bench-real` on the trained test-size pair: a row per policy and temperature, the greedy runs
    equal to target-only decoding, and the expected speed-up computed from the measured alpha and costs."""
    from adaspec.commands.bench_real import main

    _, _, _, tmp = run
    payload = main(["--prompts", "2", "--max-new-tokens", "12", "--gammas", "1,3", "--temperatures", "0,1",
                    "--threads", "1", "--out", str(tmp_path), *overrides_at_test_size(tmp)])
    assert json.loads((tmp_path / "smollm2.json").read_text())["rows"] == json.loads(json.dumps(payload["rows"]))
    assert [(r["temperature"], r["draft"], r["policy"]) for r in payload["rows"]] == [
        (t, d, p) for t in (0.0, 1.0) for d in ("trained", "prompt_lookup") for p in ("fixed-1", "fixed-3", "adaptive")
    ]
    assert set(payload["drafts"]) == {"trained", "prompt_lookup"}
    assert payload["drafts"]["trained"]["draft_vocab_size"] == DRAFT_VOCAB
    assert "reduced vocabulary" in payload["hf_assisted"]["trained"]
    costs = payload["costs"]
    for row in payload["rows"]:
        assert row["greedy_mismatches"] == (0 if row["temperature"] == 0 else None)
        assert 0 <= row["alpha"] <= 1 and row["speedup_vs_target"] > 0
        if row["policy"] == "fixed-3":
            assert row["mean_gamma"] <= 3
    fixed1 = payload["rows"][0]  # the trained draft at fixed-1
    verify = costs["target_verify_s"][1]
    alpha, gamma = fixed1["alpha"], fixed1["mean_gamma"]  # Leviathan's expected tokens a block, written out
    tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha) if alpha < 1 else gamma + 1
    assert fixed1["expected_speedup"] == pytest.approx(
        tokens * costs["target_1_s"] / (gamma * costs["draft_1_s"]["trained"] + verify)
    )
