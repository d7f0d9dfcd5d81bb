"""A tiny SmolLM2-shaped checkpoint written as a GGUF file with the `gguf` package's writer, for tests.

The tokenizer is a byte-level BPE trained on a few sentences, with SmolLM2's special tokens at its ids
(0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|>) and SmolLM2's chat template; the model is a random
2-layer Llama with tied embeddings and grouped-query attention, as SmolLM2-135M.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEXTS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May? Answer the above question.",
    "def add_one(x):\n    return x + 1\nassert add_one(1) == 2\n",
    "The final answer is: 72",
]


def chat_tokenizer(vocab_size: int = 320, texts: list[str] | None = None) -> PreTrainedTokenizerFast:
    """Byte-level BPE with SmolLM2's special tokens and chat template (eos = pad = <|im_end|>), trained on
    `texts` (default: a few sentences)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXTS * 4 if texts is None else texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def tiny_llama(vocab_size: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _llama_cpp_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert script reorders q/k rows for its rotary layout; readers undo it."""
    return (
        weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_tiny_gguf(path: Path, tokenizer: PreTrainedTokenizerFast, model: LlamaForCausalLM) -> Path:
    """`model` and `tokenizer` as a llama GGUF file (float32 tensors, no output.weight: tied)."""
    c = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-smollm2")
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_vocab_size(c.vocab_size)

    spec = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    by_id = sorted(spec["vocab"].items(), key=lambda item: item[1])
    tokens = [token for token, _ in by_id]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])  # 3: control, 1: normal
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_unk_token_id(tokenizer.unk_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(tokenizer.chat_template)

    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        writer.add_tensor(f"blk.{i}.attn_norm.weight", state[p + "input_layernorm.weight"])
        q = _llama_cpp_permute(state[p + "self_attn.q_proj.weight"], c.num_attention_heads)
        k = _llama_cpp_permute(state[p + "self_attn.k_proj.weight"], c.num_key_value_heads)
        writer.add_tensor(f"blk.{i}.attn_q.weight", q)
        writer.add_tensor(f"blk.{i}.attn_k.weight", k)
        writer.add_tensor(f"blk.{i}.attn_v.weight", state[p + "self_attn.v_proj.weight"])
        writer.add_tensor(f"blk.{i}.attn_output.weight", state[p + "self_attn.o_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", state[p + "post_attention_layernorm.weight"])
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", state[p + "mlp.gate_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_up.weight", state[p + "mlp.up_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_down.weight", state[p + "mlp.down_proj.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
