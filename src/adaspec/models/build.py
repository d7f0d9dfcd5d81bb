"""Build from-scratch GPT-NeoX models and load saved stage artefacts."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig
from transformers import AutoModelForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedModel


def scratch_model(arch: DictConfig, *, vocab_size: int, max_positions: int, seed: int, tokenizer) -> GPTNeoXForCausalLM:
    """A randomly initialised GPT-NeoX (Pythia architecture); the same seed gives the same weights."""
    config = GPTNeoXConfig(
        vocab_size=vocab_size,
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=max_positions,
        rotary_pct=0.25,
        use_parallel_residual=True,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(config)


def load_model(path: str | Path, attn_implementation: str = "sdpa") -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(str(path), attn_implementation=attn_implementation, dtype=torch.float32)


def freeze(model: PreTrainedModel) -> PreTrainedModel:
    """Eval mode and no gradients: how the target and reference sit inside stages 2 and 3."""
    model.eval()
    model.requires_grad_(False)
    return model


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
