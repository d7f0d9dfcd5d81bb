"""Optional int8 quantisation of the draft model (``decode.draft_quant=int8``)."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn


def quantize_draft_int8(model: nn.Module) -> nn.Module:
    """Return a copy of ``model`` with every ``nn.Linear`` dynamically quantised to int8 weights.

    Uses ``torch.ao.quantization.quantize_dynamic`` (int8 weights, activations quantised on the fly),
    which runs on CPU only; for GPT-NeoX this covers ``query_key_value``, ``dense``, the MLP and the
    output head (``lm_head``, formerly ``embed_out``); embeddings and LayerNorms stay in float.
    ``torch.ao.quantization`` is deprecated in favour of torchao, so its deprecation warnings are
    silenced here. The input model is left untouched.
    """
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("quantize_draft_int8 supports CPU models only (torch dynamic quantisation)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        from torch.ao.quantization import quantize_dynamic

        fp32 = copy.deepcopy(model).float()  # dynamic quantisation expects float32 Linear layers
        return quantize_dynamic(fp32, {nn.Linear}, dtype=torch.qint8, inplace=True).eval()
