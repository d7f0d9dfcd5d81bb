"""An EAGLE-3 head in vllm-project/speculators' format, which vLLM (`--speculative-config '{"model": DIR}'`)
and speculators load: `config.json` (an `Eagle3SpeculatorConfig`) and `model.safetensors`.

Transcribed from speculators 0.9.0 (the version on the package index), not imported: it pins transformers
and datasets below the project's. What the format fixes, and where it says so:
- `models/eagle3/config.py`: `speculators_model_type: "eagle3"`, `transformer_layer_config` (a Llama config of
  the one decoder layer, `vocab_size` = the target's), `draft_vocab_size`, `eagle_aux_hidden_state_layer_ids`
  (indices of the target's hidden states, `hidden_states[i]` = the input of layer i: our `target_layers`),
  `norm_before_residual`, `norm_before_fc`, `fc_norm`, `norm_output` (all false here: this head's layer is
  EAGLE-3's original one), `speculators_config` (algorithm, greedy proposals, the verifier).
- `convert/eagle/eagle3_converter.py`: EAGLE's `midlayer.*` is `layers.0.*`; every other name is EAGLE's
  (`embed_tokens`, `fc`, `norm`, `lm_head`), which this head already uses.
- `model.py` (`DraftVocabMixin`) and `train/vocab_mapping.py`: `d2t [N]` int64 offsets (target id = draft
  id + d2t[draft id]) and `t2d [V]` bool (the target ids the head can propose); both absent when the head
  predicts the whole vocabulary.
- `models/eagle3/model_definitions.py`: the layer's input is `cat([input_layernorm(embed), hidden_norm(h)])`
  with the residual on h, as in `adaspec.models.eagle3.DecoderLayer`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers import LlamaConfig

from adaspec.drafts.eagle3 import Eagle3Draft
from adaspec.errors import UserError

FORMAT_VERSION = "0.9.0"  # the speculators release this layout was read from


def speculators_config(draft: Eagle3Draft, verifier: str, verifier_config: dict[str, Any],
                       speculative_tokens: int) -> dict[str, Any]:
    """The `config.json` of `draft` for the target found at `verifier` (a Hub id or a path vLLM can read),
    whose own `config.json` is `verifier_config`."""
    c = draft.model.config
    if len(set(c.target_layers)) != len(c.target_layers):
        raise UserError(
            f"speculators and vLLM need distinct target layers; this head reads hidden states {list(c.target_layers)} "
            f"(EAGLE-3's layers 2, N/2 and N-3 collide for a target of fewer than 8 layers)"
        )
    layer = LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=1, num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps, hidden_act="silu", attention_bias=False, mlp_bias=False,
        tie_word_embeddings=False, max_position_embeddings=verifier_config.get("max_position_embeddings", 4096),
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
    )
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": FORMAT_VERSION,
        "transformer_layer_config": layer.to_diff_dict(),
        "draft_vocab_size": c.draft_vocab_size,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": list(c.target_layers),
        "norm_before_residual": False,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "embed_requires_grad": False,
        "torch_dtype": str(draft.model.fc.weight.dtype).removeprefix("torch."),
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": verifier_config.get("architectures") or []},
        },
    }


def speculators_tensors(draft: Eagle3Draft, embedding: bool = False) -> dict[str, Tensor]:
    """The head's weights under speculators' names, with the id maps of a reduced vocabulary. The token embedding
    is the target's own, frozen (`Eagle3Head.from_target`): left out unless `embedding`, since vLLM shares the
    target's when a checkpoint has none (`has_own_embed_tokens`), and it is most of the file (28.3M parameters
    of SmolLM2's 49,152 x 576)."""
    tensors = {
        name.replace("midlayer.", "layers.0.", 1): value.detach().contiguous()
        for name, value in draft.model.state_dict().items()
        if embedding or name != "embed_tokens.weight"
    }
    if draft.vocab is not None:
        d2t = draft.vocab.draft_to_target.cpu()
        tensors["d2t"] = d2t - torch.arange(d2t.numel(), dtype=torch.long)
        tensors["t2d"] = draft.vocab.target_to_draft.cpu() >= 0
    return tensors
