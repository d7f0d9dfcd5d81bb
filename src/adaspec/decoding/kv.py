"""A model's forward on top of its KV cache, and cropping that cache: the two cache operations decoding needs."""

from __future__ import annotations

import functools
import inspect

from torch import Tensor
from transformers import DynamicCache, PreTrainedModel


@functools.cache
def _cache_kwarg(model_cls: type) -> str:
    # transformers 5.x renamed the forward kwarg `past_key_values` to `cache` (the old name warns).
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def forward(model: PreTrainedModel, ids: Tensor, cache: DynamicCache, logits_to_keep: int = 0) -> Tensor:
    """Run ``ids [1, T]`` through ``model`` on top of ``cache`` (which grows by T); logits ``[T', V]``."""
    return run(model, ids, cache, logits_to_keep).logits[0]


def run(model, ids: Tensor, cache: DynamicCache, logits_to_keep: int = 0, output_hidden_states: bool = False):
    """`forward`'s model output whole (with every layer's hidden states when `output_hidden_states`)."""
    kwargs = {_cache_kwarg(type(model)): cache}
    if output_hidden_states:
        kwargs["output_hidden_states"] = True
    return model(input_ids=ids, use_cache=True, logits_to_keep=logits_to_keep, **kwargs)


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Crop ``cache`` to its first ``length`` positions.

    ``DynamicCache.crop`` takes a NEGATIVE count of positions to drop (transformers >= 5.x raises on
    a positive, absolute length; ``crop(0)`` meant "crop to empty" in older releases), so only call
    it with a strictly negative number.
    """
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)
