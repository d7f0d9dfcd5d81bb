"""distill.data=draft|mixed: on-policy steps train on the student's own samples of the batch's prompts."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from adaspec.artefacts import paths
from adaspec.config.rules import validate
from adaspec.data.encoding import IGNORE
from adaspec.distill.on_policy import batch_prompts, is_on_policy_step, student_continuations
from adaspec.drafts import ModelDraft
from adaspec.errors import UserError
from adaspec.stages.ref import ReferenceDistill
from adaspec.training.pipeline import run_stage
from tests.stage_helpers import fit_on_fixed_batch, model, tokenizer_and_batch


@pytest.fixture
def setup(tiny_cfg):
    cfg = tiny_cfg("stage.warmup_frac=0.0")
    tokenizer, batch = tokenizer_and_batch(cfg, batch_size=4)
    return cfg, tokenizer, batch


def sample(student, batch, tokenizer, step: int, seed: int = 0):
    return student_continuations(student, batch, stop_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                                 max_new_tokens=12, seed=seed, step=step)


def test_samples_keep_the_prompts_and_put_labels_only_on_sampled_tokens(setup):
    cfg, tokenizer, batch = setup
    student = ModelDraft(model(cfg, tokenizer, "draft", 2))
    sampled = sample(student, batch, tokenizer, step=3)
    assert batch_prompts(sampled) == batch_prompts(batch)
    for prompt, ids, labels, attention in zip(batch_prompts(batch), sampled["input_ids"], sampled["labels"],
                                              sampled["attention_mask"], strict=True):
        n = int(attention.sum())
        assert labels[: len(prompt)].eq(IGNORE).all()  # no prompt token carries loss
        answer = labels[len(prompt) : n]
        assert 1 <= len(answer) <= 12 and torch.equal(answer, ids[len(prompt) : n])
        assert labels[n:].eq(IGNORE).all()
        assert tokenizer.eos_token_id not in answer[:-1].tolist()  # it stops at the stop token
    assert (sampled["index"] < 0).all()  # no teacher-cache row belongs to a sampled sequence


def test_samples_depend_only_on_seed_and_step(setup):
    cfg, tokenizer, batch = setup
    student = ModelDraft(model(cfg, tokenizer, "draft", 2))
    torch.manual_seed(123)
    first = sample(student, batch, tokenizer, step=5)
    torch.manual_seed(999)  # the global generator does not matter, and is left as it was
    state = torch.random.get_rng_state()
    again = sample(student, batch, tokenizer, step=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first["input_ids"], again["input_ids"])
    others = [sample(student, batch, tokenizer, step=s)["input_ids"] for s in (6, 7)]
    assert any(o.shape != first["input_ids"].shape or not torch.equal(o, first["input_ids"]) for o in others)


def test_the_share_of_on_policy_steps_is_lambda():
    assert not any(is_on_policy_step(0.0, 0, s) for s in range(200))
    assert all(is_on_policy_step(1.0, 0, s) for s in range(200))
    share = sum(is_on_policy_step(0.5, 0, s) for s in range(2000)) / 2000
    assert 0.46 < share < 0.54
    assert [is_on_policy_step(0.5, 1, s) for s in range(50)] != [is_on_policy_step(0.5, 0, s) for s in range(50)]


def test_an_on_policy_step_trains_on_samples_against_the_live_target(setup, tmp_path):
    cfg, tokenizer, batch = setup
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    settings = {"fraction": 1.0, "seed": 0, "stop_id": tokenizer.eos_token_id, "pad_id": tokenizer.pad_token_id,
                "max_new_tokens": 12}
    module = ReferenceDistill(ModelDraft(model(cfg, tokenizer, "draft", 2)), cfg.stage, cfg.distill, target, on_policy=settings)
    loss, metrics = module.loss(batch)
    sampled = sample(module.draft, batch, tokenizer, step=0)  # the step's samples (seeded by step)
    # the forward KL of the live target against the draft on the sampled tokens, by hand
    with torch.no_grad():
        inputs = {"input_ids": sampled["input_ids"], "attention_mask": sampled["attention_mask"]}
        answer = sampled["labels"][:, 1:] != IGNORE
        p_log = torch.log_softmax(target(**inputs).logits[:, :-1][answer].float(), -1)
        q_log = torch.log_softmax(module.draft.model(**inputs).logits[:, :-1][answer].float(), -1)
        by_hand = (p_log.exp() * (p_log - q_log)).sum(-1).mean()
    assert metrics["on_policy"] == 1.0 and int(answer.sum()) > 0
    torch.testing.assert_close(loss.detach(), by_hand, rtol=1e-4, atol=1e-6)
    assert len(fit_on_fixed_batch(module, batch, 3, tmp_path)) == 3


def test_lambda_zero_trains_exactly_as_the_dataset(tiny_trained):
    """data=mixed with on_policy_fraction=0: the same weights as data=dataset, bit for bit."""
    base = ("stage=draft", "k=0.4", "stage.max_steps=6", "stage.monitor_every_n_steps=0")
    run_stage(validate(tiny_trained(*base)))
    mixed = validate(tiny_trained(*base, "distill.data=mixed", "distill.on_policy_fraction=0", "stage.tag=mixed"))
    run_stage(mixed)
    plain = load_file(paths.final(paths.of(validate(tiny_trained(*base))).draft_dir()) / "model.safetensors")
    other = load_file(paths.final(paths.of(mixed).draft_dir()) / "model.safetensors")
    assert plain.keys() == other.keys() and all(torch.equal(plain[k], other[k]) for k in plain)


def test_a_draft_stage_on_policy_logs_every_step_as_on_policy(tiny_trained):
    cfg = validate(tiny_trained("stage=draft", "k=0.4", "stage.max_steps=3", "distill.data=draft",
                                "distill.answer_max_new_tokens=8", "trainer.log_every_n_steps=1",
                                "stage.monitor_every_n_steps=0"))
    run_stage(cfg)
    folder = paths.of(cfg).draft_dir()
    rows = (folder / "logs" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    steps = [dict(zip(header, r.split(","), strict=False)) for r in rows[1:]]
    flags = [float(r["train/on_policy"]) for r in steps if r.get("train/on_policy")]
    assert flags == [1.0, 1.0, 1.0]
    assert json.loads((paths.final(folder) / "metrics.json").read_text())["steps"] == 3


def test_cached_reference_kl_cannot_serve_on_policy_batches(tiny_cfg):
    with pytest.raises(UserError, match="distill.cache_ref_kl"):
        validate(tiny_cfg("distill.data=draft", "distill.teacher=cache", "distill.cache_ref_kl=true"))
