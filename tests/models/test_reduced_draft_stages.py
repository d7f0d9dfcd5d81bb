"""How the stages take a draft with a reduced vocabulary: its id map is part of every saved draft's identity,
the stage checks accept a map into the target's vocabulary and refuse a stale one, the teacher is seen over
the draft's support, and the config rules of model.draft_init / model.draft_vocab_size."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from adaspec.artefacts.store import (
    DRAFT_VOCAB_FILE,
    fingerprint,
    identity_files,
    provenance,
    read_meta,
    save_artefact,
    verify_weights,
)
from adaspec.config.rules import validate
from adaspec.distill.divergence import token_divergence
from adaspec.distill.teacher import LiveTeacher
from adaspec.drafts import ModelDraft, load_draft
from adaspec.errors import UserError
from adaspec.models.draft_vocab import VOCAB_FILE, DraftVocab, shrink_to_draft_vocab
from adaspec.models.vocab import check_draft_vocab_maps
from adaspec.stages.draft_init import check_init_settings
from adaspec.stages.teachers import SupportTeacher, for_draft
from tests.conftest import compose_config
from tests.models.tiny_gguf import chat_tokenizer

V = 320


def llama(vocab_size: int = V) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        eos_token_id=2,
        pad_token_id=2,
        bos_token_id=1,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def vocab(ids=(0, 1, 2, 5, 7, 40, 41), target_size: int = V) -> DraftVocab:
    return DraftVocab(torch.tensor(ids), target_size, 0)


def save(folder, model, cfg=None):
    save_artefact(folder, model=model, tokenizer=chat_tokenizer(), made_by=provenance(cfg or compose_config(), "ref"),
                  metrics={})
    return folder


def reduced(map_: DraftVocab) -> ModelDraft:
    return ModelDraft(shrink_to_draft_vocab(llama(), map_), map_)


def test_the_map_is_saved_with_the_draft_and_hashed_with_its_weights(tmp_path):
    assert DRAFT_VOCAB_FILE == VOCAB_FILE
    folder = save(tmp_path / "ref", reduced(vocab()))
    assert VOCAB_FILE in identity_files(folder) and VOCAB_FILE in read_meta(folder)["files"]
    loaded = load_draft(folder)
    assert torch.equal(loaded.vocab.draft_to_target, vocab().draft_to_target)
    again = save(tmp_path / "again", loaded)  # a stage that trains a loaded draft saves its map again
    assert (again / VOCAB_FILE).read_text() == (folder / VOCAB_FILE).read_text()
    (folder / VOCAB_FILE).write_text((folder / VOCAB_FILE).read_text().replace("[0, 1, 2, 5,", "[0, 1, 2, 6,"))
    with pytest.raises(UserError, match="draft_vocab.json is corrupted or was changed"):
        verify_weights(folder, "make stage2")


def test_a_full_vocabulary_draft_has_no_map(tmp_path):
    folder = save(tmp_path / "ref", llama())
    assert not (folder / VOCAB_FILE).exists() and load_draft(folder).vocab is None


def test_stage_checks_accept_a_map_into_the_targets_vocabulary_and_refuse_another(tmp_path):
    target = save(tmp_path / "target", llama())
    init = save(tmp_path / "init", reduced(vocab()))
    check_draft_vocab_maps({"target": target, "draft_init": init, "ref": init}, "draft")
    other_ref = save(tmp_path / "ref", reduced(vocab((0, 1, 2, 9))))
    with pytest.raises(UserError, match="different draft vocabularies; retrain the reference"):
        check_draft_vocab_maps({"target": target, "draft_init": init, "ref": other_ref}, "draft")
    bigger_target = save(tmp_path / "big", llama(V + 64))
    with pytest.raises(UserError, match=f"over {V} target tokens, but the target .* has {V + 64}"):
        check_draft_vocab_maps({"target": bigger_target, "draft_init": init}, "ref")


def test_the_teacher_over_the_whole_vocabulary_as_support_is_the_plain_teacher():
    teacher = LiveTeacher(None, "forward_kl", chunk_size=3)
    assert for_draft(teacher, ModelDraft(llama())) is teacher
    support = for_draft(teacher, reduced(DraftVocab(torch.arange(V), V, 0)))
    assert isinstance(support, SupportTeacher)
    torch.manual_seed(0)
    p, q = torch.randn(5, V), torch.randn(5, V)
    torch.testing.assert_close(support.divergence(p, q), token_divergence(p, q, "forward_kl"))
    # over a smaller support a draft equal to the teacher conditioned on it has divergence 0
    ids = torch.tensor([0, 3, 8, 9])
    zero = for_draft(teacher, reduced(DraftVocab(ids, V, 0))).divergence(p, p[:, ids])
    torch.testing.assert_close(zero, torch.zeros(5), atol=1e-5, rtol=0)


def test_a_draft_initialisation_made_with_other_settings_is_refused(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"draft_init": "random", "draft_vocab_size": 0}))
    check_init_settings(compose_config().model, tmp_path)
    with pytest.raises(UserError, match=r"made with model.draft_vocab_size=0, not 64"):
        check_init_settings(compose_config("model.draft_vocab_size=64").model, tmp_path)
    with pytest.raises(UserError, match=r"made with model.draft_init=random, not target_embedding"):
        check_init_settings(compose_config("model=smollm2").model, tmp_path)


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["model.draft_vocab_size=-1"], "model.draft_vocab_size"),
        (["model=pythia", "model.draft_init=target_embedding"], "set model.draft_path=null"),
        (["pretrain=stdlib", "model.draft_init=target_layers"], "with stage 0"),
        (["task=gsm8k", "task.domain.operator_embedding=true", "model.draft_vocab_size=64"], "operator_embedding"),
        (["stage.max_steps=-2"], "stage.max_steps"),
    ],
)
def test_draft_build_settings_that_cannot_work_are_refused(overrides, match):
    with pytest.raises(UserError, match=match):
        validate(compose_config(*overrides))


def test_zero_steps_and_the_draft_build_keys_compose():
    cfg = validate(compose_config("model=smollm2", "stage.max_steps=0", "model.draft_init=target_layers",
                                  "model.draft_vocab_size=8192"))
    assert cfg.stage.max_steps == 0 and cfg.model.draft_vocab_size == 8192


def test_the_draft_build_keys_at_their_defaults_leave_fingerprints_unchanged():
    default, reduced_cfg = compose_config(), compose_config("model.draft_vocab_size=64")
    assert fingerprint(default, "target") == fingerprint(reduced_cfg, "target")  # the target is not the draft's
    assert fingerprint(default, "ref") != fingerprint(reduced_cfg, "ref")
    for stage in ("target", "ref", "draft"):  # defaults: the hash of a config without the keys
        plain = compose_config()
        del plain.model.draft_init
        del plain.model.draft_vocab_size
        assert fingerprint(default, stage) == fingerprint(plain, stage)
