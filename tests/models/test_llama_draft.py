"""The Llama-architecture draft that model=smollm2 builds from config (model.draft with architecture=llama)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from adaspec.errors import UserError
from adaspec.models.build import n_params, scratch_model
from tests.models.tiny_gguf import chat_tokenizer

SMOLLM2_VOCAB = 49152
DRAFT = {
    "architecture": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 384,
}


def build(arch: dict, seed: int = 0, vocab_size: int = SMOLLM2_VOCAB):
    return scratch_model(
        OmegaConf.create(arch),
        vocab_size=vocab_size,
        max_positions=2048,
        seed=seed,
        tokenizer=chat_tokenizer(),
    )


def test_the_smollm2_draft_is_a_tied_7_1m_llama_with_the_targets_special_tokens():
    draft = build(DRAFT)
    assert draft.config.model_type == "llama" and draft.config.tie_word_embeddings
    assert draft.get_output_embeddings().weight is draft.get_input_embeddings().weight
    assert n_params(draft) == 7_144_576  # 49152 x 128 tied embedding + 4 layers of 213k
    tok = chat_tokenizer()
    assert (draft.config.eos_token_id, draft.config.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
    with torch.no_grad():
        assert draft(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, SMOLLM2_VOCAB)


def test_the_same_seed_gives_the_same_draft():
    small = {**DRAFT, "hidden_size": 32, "intermediate_size": 64}
    a, b, c = build(small, 0, 300), build(small, 0, 300), build(small, 1, 300)
    assert torch.equal(a.model.layers[0].mlp.up_proj.weight, b.model.layers[0].mlp.up_proj.weight)
    assert not torch.equal(a.model.layers[0].mlp.up_proj.weight, c.model.layers[0].mlp.up_proj.weight)


def test_an_arch_without_architecture_stays_gpt_neox_and_an_unknown_one_is_refused():
    plain = {k: v for k, v in DRAFT.items() if k != "architecture"} | {"hidden_size": 32}
    assert build(plain, vocab_size=300).config.model_type == "gpt_neox"
    with pytest.raises(UserError, match="architecture='mamba' is unknown"):
        build({**DRAFT, "architecture": "mamba"}, vocab_size=300)
