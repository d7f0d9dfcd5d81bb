"""Reduced draft vocabulary: the id map, its file, shrinking a model, and the divergences over its support."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import (
    AutoModelForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from adaspec.distill.divergence import support_token_divergence, support_topk_forward_kl, token_divergence
from adaspec.distill.teacher_cache import topk_forward_kl
from adaspec.errors import UserError
from adaspec.models.draft_vocab import (
    VOCAB_FILE,
    DraftVocab,
    build_draft_vocab,
    is_reduced,
    load_draft_vocab,
    most_frequent_vocab,
    require_full_vocabulary,
    shrink_to_draft_vocab,
    token_counts,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    yield


# ---------------------------------------------------------------- the id map


def test_most_frequent_tokens_and_specials_are_kept():
    counts = np.array([0, 5, 9, 9, 1, 7, 0, 3, 0, 2])
    vocab = most_frequent_vocab(counts, size=5, keep_ids=[8, 0], fallback_target_id=0)
    # specials 0 and 8 (never seen), then by count: 2 and 3 (9, tie: lower id first), 5 (7)
    assert vocab.draft_to_target.tolist() == [0, 2, 3, 5, 8]
    assert vocab.size == 5 and vocab.target_size == 10
    expected_t2d = [0, -1, 1, 2, -1, 3, -1, -1, 4, -1]
    assert vocab.target_to_draft.tolist() == expected_t2d
    ids = torch.arange(10)
    inside = vocab.contains(ids)
    assert torch.equal(vocab.to_target(vocab.to_draft(ids))[inside], ids[inside])
    assert (vocab.to_draft(ids)[~inside] == vocab.fallback_draft_id).all()  # outside: the fallback token
    assert vocab.fallback_draft_id == 0
    labels = torch.tensor([-100, 2, 4, 8, -100])
    assert vocab.labels_to_draft(labels).tolist() == [-100, 1, -100, 4, -100]  # 4 is outside: ignored


def test_ties_and_unseen_tokens_fill_by_lower_id():
    vocab = most_frequent_vocab(np.zeros(6, dtype=np.int64), size=3, keep_ids=[5], fallback_target_id=5)
    assert vocab.draft_to_target.tolist() == [0, 1, 5]


def word_tokenizer() -> PreTrainedTokenizerFast:
    words = ["<unk>", "<eos>", "<pad>", "<|im_end|>"] + [f"w{i}" for i in range(28)]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<eos>",
        pad_token="<pad>",
        additional_special_tokens=["<|im_end|>"],
    )


def test_build_from_training_ids_keeps_every_special_token():
    tokenizer = word_tokenizer()
    texts = ["w5 w5 w5 w7 w7 w9", "w5 w7 w11 w11 w11 w11"]
    ids = [tokenizer(t)["input_ids"] for t in texts]
    vocab = build_draft_vocab(ids, tokenizer, size=7, target_size=40)  # target logits padded to 40
    specials = [tokenizer.convert_tokens_to_ids(t) for t in ["<unk>", "<eos>", "<pad>", "<|im_end|>"]]
    top3 = [tokenizer.convert_tokens_to_ids(t) for t in ["w5", "w7", "w11"]]
    assert vocab.draft_to_target.tolist() == sorted(specials + top3)
    assert vocab.target_size == 40
    assert vocab.fallback_target_id == tokenizer.unk_token_id


def test_token_counts_and_range_check():
    assert token_counts([[1, 1, 2], torch.tensor([2, 2]), np.array([0])], 4).tolist() == [1, 2, 3, 0]
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        token_counts([[4]], 4)


@pytest.mark.parametrize("size", [1, 11])
def test_impossible_size_names_the_config_key(size):
    with pytest.raises(UserError, match="model.draft_vocab_size"):
        most_frequent_vocab(np.ones(10, dtype=np.int64), size=size, keep_ids=[1, 2], fallback_target_id=1)


def test_save_and_load_round_trip(tmp_path):
    vocab = most_frequent_vocab(np.arange(50), size=12, keep_ids=[0, 1], fallback_target_id=1)
    assert load_draft_vocab(tmp_path) is None  # no map: a full-vocabulary draft
    vocab.save(tmp_path)
    loaded = load_draft_vocab(tmp_path)
    assert torch.equal(loaded.draft_to_target, vocab.draft_to_target)
    assert torch.equal(loaded.target_to_draft, vocab.target_to_draft)
    assert (loaded.target_size, loaded.fallback_target_id) == (50, 1)
    data = json.loads((tmp_path / VOCAB_FILE).read_text())
    data["draft_to_target"] = data["draft_to_target"][::-1]
    (tmp_path / VOCAB_FILE).write_text(json.dumps(data))
    with pytest.raises(UserError, match=VOCAB_FILE):
        load_draft_vocab(tmp_path)


def test_scatter_puts_zero_or_minus_inf_outside_the_map():
    vocab = DraftVocab(torch.tensor([1, 4, 6]), target_size=8, fallback_target_id=4)
    q = torch.softmax(torch.randn(2, 3), -1)
    full = vocab.scatter(q)
    assert full.shape == (2, 8) and torch.allclose(full.sum(-1), torch.ones(2))
    assert torch.equal(full[:, [1, 4, 6]], q) and (full[:, [0, 2, 3, 5, 7]] == 0).all()
    logits = torch.randn(2, 3)
    torch.testing.assert_close(
        torch.softmax(vocab.scatter(logits, float("-inf")), -1), vocab.scatter(logits.softmax(-1))
    )


# ---------------------------------------------------------------- shrinking a model

V = 64


def tiny_llama(tied: bool = True) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=128, tie_word_embeddings=tied,
        pad_token_id=3, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def tiny_neox() -> GPTNeoXForCausalLM:
    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=128, eos_token_id=2, bos_token_id=2,
    )  # fmt: skip
    return GPTNeoXForCausalLM(config).eval()


MODELS = {"llama_tied": tiny_llama, "llama_untied": lambda: tiny_llama(tied=False), "neox": tiny_neox}


def small_vocab() -> DraftVocab:
    counts = np.random.default_rng(0).integers(0, 1000, V)
    return most_frequent_vocab(counts, size=20, keep_ids=[1, 2, 3], fallback_target_id=2)


@pytest.mark.parametrize("name", list(MODELS))
def test_shrunk_model_gives_the_full_models_logits_on_its_rows(name, tmp_path):
    full, vocab = MODELS[name](), small_vocab()
    tied = full.get_output_embeddings().weight is full.get_input_embeddings().weight
    draft = shrink_to_draft_vocab(MODELS[name](), vocab)
    ids = vocab.to_target(torch.randint(0, vocab.size, (2, 9), generator=torch.Generator().manual_seed(1)))
    with torch.no_grad():
        expected = full(ids).logits[..., vocab.draft_to_target]
        got = draft(vocab.to_draft(ids)).logits
    torch.testing.assert_close(got, expected)
    assert draft.config.vocab_size == 20 and is_reduced(draft.config) and not is_reduced(full.config)
    assert draft.config.eos_token_id == vocab.target_to_draft[2]  # special ids are draft ids now
    assert (draft.get_output_embeddings().weight is draft.get_input_embeddings().weight) == tied
    draft.save_pretrained(tmp_path)
    vocab.save(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(load_draft_vocab(tmp_path).to_draft(ids)).logits, expected)
    with pytest.raises(UserError, match="reduced vocabulary"):
        require_full_vocabulary(reloaded, "HF assisted generation")
    require_full_vocabulary(full, "HF assisted generation")


# ---------------------------------------------------------------- divergences over the draft's support


def logits(n: int, v: int, seed: int) -> torch.Tensor:
    return torch.randn(n, v, generator=torch.Generator().manual_seed(seed)) * 3


@pytest.mark.parametrize("kind", ["forward_kl", "reverse_kl", "tvd"])
def test_full_support_equals_the_full_vocabulary_divergence(kind):
    teacher, student = logits(13, 30, 1), logits(13, 30, 2).requires_grad_()
    got = support_token_divergence(teacher, student, torch.arange(30), kind, chunk_size=4)
    torch.testing.assert_close(got, token_divergence(teacher, student, kind))
    got.sum().backward()  # through the checkpointed chunks
    assert torch.isfinite(student.grad).all() and student.grad.abs().sum() > 0


def test_reduced_support_values_follow_the_stated_convention():
    teacher, student = logits(9, 30, 3), logits(9, 12, 4)
    support = torch.tensor(sorted(np.random.default_rng(0).choice(30, 12, replace=False).tolist()))
    p = teacher.softmax(-1)[:, support]
    p_s = p.sum(-1)
    q = student.softmax(-1)
    conditional_kl = (p / p_s[:, None] * ((p / p_s[:, None]).log() - q.log())).sum(-1)
    fkl = support_token_divergence(teacher, student, support, "forward_kl")
    torch.testing.assert_close(fkl, p_s * conditional_kl)  # p(S) * KL(p(.|S) || q)
    # zero at the best draft of this support: the teacher conditioned on S
    best = support_token_divergence(teacher, teacher[:, support], support, "forward_kl")
    assert best.abs().max() < 1e-5 and (fkl > 1e-3).all()
    # reverse KL and TVD are the exact divergences of the draft scattered over V with zeros
    q_full = torch.zeros(9, 30).index_copy_(-1, support, q)
    p_full = teacher.softmax(-1)
    torch.testing.assert_close(
        support_token_divergence(teacher, student, support, "tvd"), 0.5 * (p_full - q_full).abs().sum(-1)
    )
    torch.testing.assert_close(
        support_token_divergence(teacher, student, support, "reverse_kl"), (q * (q.log() - p.log())).sum(-1)
    )


def test_finite_with_minus_inf_teacher_logits():
    teacher, student = logits(6, 30, 5), logits(6, 10, 6).requires_grad_()
    support = torch.arange(0, 30, 3)
    teacher[:, 1::3] = float("-inf")  # outside the support
    teacher[:4, 0] = float("-inf")  # inside it
    teacher[5, support] = float("-inf")  # all the teacher's mass outside the support
    for kind in ["forward_kl", "tvd"]:
        values = support_token_divergence(teacher, student, support, kind)
        assert torch.isfinite(values).all() and (values >= -1e-6).all(), kind
        values.sum().backward()
        assert torch.isfinite(student.grad).all()
    assert support_token_divergence(teacher, student, support, "forward_kl")[5] == 0  # nothing reachable
    assert torch.isfinite(
        support_token_divergence(teacher[:, 2::3].clone(), student, torch.arange(10), "reverse_kl")
    ).all()


def topk_of(teacher: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    values, ids = F.log_softmax(teacher, -1).topk(k, -1)
    return values, ids, (1 - values.exp().sum(-1)).clamp_min(0)


def test_topk_teacher_on_a_reduced_draft():
    teacher, v = logits(11, 40, 7), 40
    top = topk_of(teacher, 6)
    # every draft token reachable (N = V): exactly the top-K cache's forward KL
    full_student = logits(11, v, 8).requires_grad_()
    got = support_topk_forward_kl(*top, full_student, torch.arange(v), chunk_size=4)
    torch.testing.assert_close(got, topk_forward_kl(*top, full_student))
    got.sum().backward()
    assert torch.isfinite(full_student.grad).all()
    # a support holding all top-K ids: the same value as the top-K KL of the draft's logits scattered over V
    support = torch.unique(torch.cat([top[1].flatten(), torch.arange(0, v, 2)]))
    vocab = DraftVocab(support, v, int(support[0]))
    student = logits(11, vocab.size, 9)
    expected = topk_forward_kl(*top, vocab.scatter(student, float("-inf")))
    torch.testing.assert_close(support_topk_forward_kl(*top, student, vocab.target_to_draft), expected)
    # top-K ids outside the support (and -inf teacher entries): finite, credited, never negative
    small = DraftVocab(torch.arange(0, v, 5), v, 0)
    values, ids, rest = top
    values = values.clone()
    values[:3, -1] = float("-inf")
    out = support_topk_forward_kl(values, ids, rest, logits(11, small.size, 10), small.target_to_draft)
    assert torch.isfinite(out).all() and (out >= -1e-5).all()
