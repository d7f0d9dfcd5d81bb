"""Tiny random GPT-NeoX models for the decoding tests (built from config, never downloaded)."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    yield


def tiny_model(
    seed: int,
    vocab: int = 64,
    hidden: int = 32,
    layers: int = 2,
    init_std: float = 0.1,
    dtype: torch.dtype = torch.float64,
) -> GPTNeoXForCausalLM:
    """float64 by default, so one multi-token forward and one-token forwards agree well below argmax gaps."""
    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=2 * hidden,
        max_position_embeddings=256,
        initializer_range=init_std,
    )
    return GPTNeoXForCausalLM(cfg).eval().to(dtype)


def noisy_copy(model: GPTNeoXForCausalLM, scale: float, seed: int) -> GPTNeoXForCausalLM:
    """``model`` with Gaussian noise of ``scale`` times each weight tensor's std: a partially agreeing draft."""
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            if p.numel() > 1:
                p.add_(scale * p.std() * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return out
