"""Build from-scratch GPT-NeoX or Llama models, load saved stage artefacts and pretrained models."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from adaspec.errors import UserError
from adaspec.models.attention import resolve_attn_implementation

# The official AdaSPEC code's defaults for special tokens a pretrained tokenizer lacks.
DEFAULT_SPECIAL_TOKENS = {"pad_token": "[PAD]", "eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"}


def scratch_model(
    arch: DictConfig,
    *,
    vocab_size: int,
    max_positions: int,
    seed: int,
    tokenizer,
    attn_implementation: str = "auto",
    half_precision: bool = False,
) -> GPTNeoXForCausalLM | LlamaForCausalLM:
    """A randomly initialised GPT-NeoX (Pythia architecture), or a Llama when `arch.architecture` says
    llama; the same seed gives the same weights."""
    shared = dict(
        vocab_size=vocab_size,
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation=resolve_attn_implementation(attn_implementation, half_precision),
    )
    architecture = arch.get("architecture", "gpt_neox")
    if architecture == "llama":
        # tied input and output embeddings (with a 49k vocabulary the embedding is most of a small draft;
        # tying halves it) and one key/value head per query head
        model_class, config = LlamaForCausalLM, LlamaConfig(
            **shared,
            num_key_value_heads=arch.num_attention_heads,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id,
        )
    elif architecture == "gpt_neox":
        model_class, config = GPTNeoXForCausalLM, GPTNeoXConfig(
            **shared,
            rotary_pct=0.25,
            use_parallel_residual=True,
            tie_word_embeddings=False,
            bos_token_id=tokenizer.eos_token_id,
        )
    else:
        raise UserError(f"model architecture={architecture!r} is unknown: use gpt_neox or llama")
    torch.manual_seed(seed)
    return model_class(config)


def load_model(
    path: str | Path, attn_implementation: str = "auto", *, half_precision: bool = False, dtype: torch.dtype = torch.float32
) -> PreTrainedModel:
    """A saved artefact, a local folder or a Hub id. `auto` attention resolves to FlashAttention-2 only when
    the model will run in bf16/fp16 (`half_precision`: under mixed-precision autocast, or a half `dtype`)."""
    half = half_precision or dtype in (torch.float16, torch.bfloat16)
    attn = resolve_attn_implementation(attn_implementation, half)
    return AutoModelForCausalLM.from_pretrained(str(path), attn_implementation=attn, dtype=dtype)


def pretrained_tokenizer(path: str | Path) -> tuple[PreTrainedTokenizerBase, int]:
    """A pretrained tokenizer with the special tokens it lacked added, and how many were added."""
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return tokenizer, add_missing_special_tokens(tokenizer)


def add_missing_special_tokens(tokenizer: PreTrainedTokenizerBase) -> int:
    """Give a pretrained tokenizer the pad/eos/bos/unk tokens it lacks, as the official AdaSPEC code
    does (Pythia and CodeGen tokenizers have no pad token). Returns the number of tokens added."""
    missing = {name: token for name, token in DEFAULT_SPECIAL_TOKENS.items() if getattr(tokenizer, name) is None}
    return tokenizer.add_special_tokens(missing) if missing else 0


def resize_embeddings(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, n_added: int) -> PreTrainedModel:
    """Resize the input and output embeddings to len(tokenizer) and set the rows of the `n_added` newest
    tokens to the mean of the others (the official code's smart_tokenizer_and_embedding_resize). Applied
    to the target and to the draft initialisation, so all three models have the same vocabulary width."""
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    if n_added > 0:
        with torch.no_grad():
            for emb in (model.get_input_embeddings(), model.get_output_embeddings()):
                emb.weight[-n_added:] = emb.weight[:-n_added].mean(dim=0, keepdim=True)
    special = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
               "bos_token_id": tokenizer.bos_token_id}
    for name, value in special.items():
        setattr(model.config, name, value)
        if model.generation_config is not None:
            setattr(model.generation_config, name, value)
    return model


def enable_gradient_checkpointing(model: PreTrainedModel) -> PreTrainedModel:
    """Recompute activations in the backward pass (non-reentrant, which works under DDP and FSDP)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # the name from transformers 5.x on
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False
    return model


def freeze(model: PreTrainedModel) -> PreTrainedModel:
    """Eval mode and no gradients: how the target and reference sit inside stages 2 and 3."""
    model.eval()
    model.requires_grad_(False)
    return model


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def n_trainable(model: torch.nn.Module) -> int:
    """The parameters training updates (an EAGLE-3 head's embedding is the target's, frozen)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
