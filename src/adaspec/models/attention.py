"""Which attention kernel the models use (`model.attn_implementation`).

auto: FlashAttention-2 when the `flash_attn` package is importable, a CUDA GPU is present and the
models run in bf16/fp16 (FlashAttention has no float32 kernels); otherwise PyTorch's
scaled_dot_product_attention (`sdpa`). `flash_attention_2` asked for explicitly without the package or
a GPU is a UserError, raised by `check_attn_implementation` from `config.rules.validate`, before any model loads.
"""

from __future__ import annotations

import importlib.util

from adaspec.errors import UserError


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def cuda_available() -> bool:
    import torch  # config validation calls this: torch loads only when flash_attention_2 is asked for

    return torch.cuda.is_available()


def check_attn_implementation(requested: str) -> None:
    """Raise a UserError when `flash_attention_2` is asked for but cannot run here."""
    if requested != "flash_attention_2":
        return
    missing = [what for what, ok in (("the flash-attn package", flash_attn_installed()), ("a CUDA GPU", cuda_available()))
               if not ok]
    if missing:
        raise UserError(
            f"model.attn_implementation=flash_attention_2 needs {' and '.join(missing)}, which this machine lacks; "
            f"install it with `make install EXTRAS=dev,gpu` on a GPU machine, or use model.attn_implementation=auto "
            f"(FlashAttention when available, else sdpa) or =sdpa"
        )


def resolve_attn_implementation(requested: str, half_precision: bool = False) -> str:
    """The implementation name Hugging Face gets: `auto` resolved for this machine and precision. The
    choice itself is checked by the config schema (adaspec.config.schema.AttnImplementation)."""
    if requested != "auto":
        check_attn_implementation(requested)
        return requested
    return "flash_attention_2" if half_precision and flash_attn_installed() and cuda_available() else "sdpa"
