"""Optional int8 quantisation of the draft model (``decode.draft_quant=int8``): torch dynamic
quantisation on the CPU (``quantize_draft_int8``), bitsandbytes LLM.int8 on a CUDA GPU (``load_draft_8bit``)."""

from __future__ import annotations

import copy
import importlib.util
import warnings

import torch
from torch import nn

from adaspec.errors import UserError
from adaspec.models.attention import cuda_available, resolve_attn_implementation


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
        # torch.ao.quantization warns on import (deprecated API): imported inside the filter
        from torch.ao.quantization import quantize_dynamic

        fp32 = copy.deepcopy(model).float()  # dynamic quantisation expects float32 Linear layers
        return quantize_dynamic(fp32, {nn.Linear}, dtype=torch.qint8, inplace=True).eval()


def bitsandbytes_installed() -> bool:
    return importlib.util.find_spec("bitsandbytes") is not None


def can_load_8bit() -> bool:
    """A CUDA GPU and bitsandbytes: what `load_draft_8bit` needs."""
    return cuda_available() and bitsandbytes_installed()


def load_draft_8bit(path, attn_implementation: str = "auto", device: int | str = 0) -> nn.Module:
    """Load a saved draft for GPU inference with 8-bit (LLM.int8) weights through bitsandbytes.

    Every ``nn.Linear`` but the output head gets int8 weights (bitsandbytes keeps outlier features in
    fp16); the rest runs in fp16. Raises a UserError naming what is missing when there is no CUDA GPU or
    no bitsandbytes; on the CPU, ``quantize_draft_int8`` (torch dynamic quantisation) is the int8 path.
    """
    missing = [
        what
        for what, ok in (
            ("a CUDA GPU", cuda_available()),
            ("the bitsandbytes package", bitsandbytes_installed()),
        )
        if not ok
    ]
    if missing:
        raise UserError(
            f"8-bit draft inference on the GPU (decode.draft_quant=int8) needs {' and '.join(missing)}; install "
            f"it with `make install EXTRAS=dev,gpu` on a GPU machine, or add trainer=cpu to quantise the draft "
            f"with torch dynamic quantisation on the CPU instead"
        )
    # BitsAndBytesConfig pulls in bitsandbytes, an optional GPU dependency
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    return AutoModelForCausalLM.from_pretrained(
        str(path),
        quantization_config=BitsAndBytesConfig(load_in_8bit=True),
        device_map={"": device},
        dtype=torch.float16,
        attn_implementation=resolve_attn_implementation(attn_implementation, half_precision=True),
    ).eval()
