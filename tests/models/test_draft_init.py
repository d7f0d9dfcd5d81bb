"""Draft initialisations from the target: the SVD projection of its embedding and the shallow copy of its layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

from adaspec.models.draft_vocab import DraftVocab, most_frequent_vocab
from adaspec.models.init_from_target import embedding_projection, init_draft, target_embedding, target_layers

V = 128


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    yield


def llama_config(hidden: int, layers: int, tied: bool = True) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=V, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=2 * hidden, max_position_embeddings=128, tie_word_embeddings=tied,
        pad_token_id=3, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip


def neox_config(hidden: int, layers: int) -> GPTNeoXConfig:
    return GPTNeoXConfig(
        vocab_size=V, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
        intermediate_size=2 * hidden, max_position_embeddings=128, eos_token_id=2,
    )  # fmt: skip


def llama_target() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(llama_config(32, 3)).eval()


def neox_target() -> GPTNeoXForCausalLM:
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(neox_config(32, 3)).eval()


def vocab_map() -> DraftVocab:
    counts = np.random.default_rng(1).integers(0, 500, V)
    return most_frequent_vocab(counts, size=40, keep_ids=[1, 2, 3], fallback_target_id=2)


# ---------------------------------------------------------------- target_embedding


def test_projection_keeps_the_top_singular_directions():
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(V, 32, generator=gen))
    w, _ = torch.linalg.qr(torch.randn(32, 32, generator=gen))
    sigma = torch.logspace(1, -2, 32)  # distinct, decaying singular values
    e = u @ torch.diag(sigma) @ w.T
    projected, basis = embedding_projection(e, 8)
    assert projected.shape == (V, 8) and basis.shape == (32, 8)
    torch.testing.assert_close(basis.T @ basis, torch.eye(8), atol=1e-5, rtol=0)
    error = torch.linalg.matrix_norm(e - projected @ basis.T) ** 2
    torch.testing.assert_close(error, (sigma[8:] ** 2).sum(), rtol=1e-3, atol=1e-6)  # the SVD tail
    torch.testing.assert_close(torch.linalg.svdvals(projected), sigma[:8], rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="width 33"):
        embedding_projection(e, 33)


@pytest.mark.parametrize("with_map", [False, True])
def test_target_embedding_llama(with_map):
    target, vocab = llama_target(), vocab_map() if with_map else None
    draft = target_embedding(llama_config(16, 1), target, vocab, seed=0)
    rows = target.model.embed_tokens.weight.detach()
    if vocab is not None:
        rows = rows[vocab.draft_to_target]
    expected, _ = embedding_projection(rows, 16)
    assert draft.model.embed_tokens.weight.shape == (len(rows), 16)
    torch.testing.assert_close(draft.model.embed_tokens.weight.detach(), expected)
    assert draft.lm_head.weight is draft.model.embed_tokens.weight  # tied stays tied
    assert draft.config.vocab_size == (40 if with_map else V)
    assert draft.model.layers[0].mlp.up_proj.weight.shape == (32, 16)  # the rest is the draft's architecture


def test_target_embedding_untied_head_starts_as_if_tied():
    draft = target_embedding(neox_config(16, 1), neox_target(), seed=1)
    head, embedding = draft.get_output_embeddings().weight, draft.get_input_embeddings().weight
    torch.testing.assert_close(head, embedding)
    assert head is not embedding


# ---------------------------------------------------------------- target_layers


def same_weights(draft, target, skip_rows: DraftVocab | None = None) -> None:
    source = target.state_dict()
    for key, value in draft.state_dict().items():
        expected = source[key]
        if skip_rows is not None and value.shape[0] == skip_rows.size and expected.shape[0] == V:
            expected = expected[skip_rows.draft_to_target]
        assert torch.equal(value, expected), key


@pytest.mark.parametrize("make_target", [llama_target, neox_target], ids=["llama", "neox"])
def test_target_layers_copies_the_first_layers(make_target):
    target = make_target()
    draft = target_layers(target, 2)
    assert draft.config.num_hidden_layers == 2 and draft.config.hidden_size == 32
    assert len(draft.state_dict()) < len(target.state_dict())
    same_weights(draft, target)
    # copies, not views: training the draft leaves the target alone
    before = target.get_input_embeddings().weight.detach().clone()
    with torch.no_grad():
        draft.get_input_embeddings().weight.add_(1.0)
    assert torch.equal(target.get_input_embeddings().weight, before)
    # all layers: the same function as the target
    ids = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(0))
    full = target_layers(target, 3).eval()
    with torch.no_grad():
        torch.testing.assert_close(full(ids).logits, target(ids).logits)


@pytest.mark.parametrize("make_target", [llama_target, neox_target], ids=["llama", "neox"])
def test_target_layers_with_a_reduced_vocabulary(make_target):
    target, vocab = make_target(), vocab_map()
    draft = target_layers(target, 3, vocab).eval()
    same_weights(draft, target, vocab)
    assert draft.config.vocab_size == 40 and draft.get_output_embeddings().weight.shape == (40, 32)
    ids = vocab.to_target(torch.randint(0, vocab.size, (2, 7), generator=torch.Generator().manual_seed(0)))
    with torch.no_grad():
        torch.testing.assert_close(
            draft(vocab.to_draft(ids)).logits, target(ids).logits[..., vocab.draft_to_target]
        )


def test_init_draft_dispatch():
    target = llama_target()
    assert init_draft("random", llama_config(16, 1), target).config.hidden_size == 16
    assert init_draft("target_layers", llama_config(16, 1), target).config.hidden_size == 32
    with pytest.raises(ValueError, match="target_embedding"):
        init_draft("svd", llama_config(16, 1), target)
    with pytest.raises(ValueError, match="1..3"):
        target_layers(target, 4)
