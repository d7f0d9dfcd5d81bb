"""A model's forward on top of its KV cache, and cropping that cache: the two cache operations decoding needs."""

from __future__ import annotations

import functools
import inspect

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import Cache


@functools.cache
def _cache_kwarg(model_cls: type) -> str:
    # transformers 5.x renamed the forward kwarg `past_key_values` to `cache` (the old name warns).
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def forward(model: PreTrainedModel, ids: Tensor, cache: DynamicCache, logits_to_keep: int = 0) -> Tensor:
    """Run ``ids [1, T]`` through ``model`` on top of ``cache`` (which grows by T); logits ``[T', V]``."""
    return run(model, ids, cache, logits_to_keep).logits[0]


def run(model, ids: Tensor, cache: DynamicCache, logits_to_keep: int = 0, output_hidden_states: bool = False,
        **inputs):
    """`forward`'s model output whole (with every layer's hidden states when `output_hidden_states`); `inputs`
    (a 4D `attention_mask`, `position_ids`) go to the model as they are."""
    kwargs = {_cache_kwarg(type(model)): cache, **inputs}
    if output_hidden_states:
        kwargs["output_hidden_states"] = True
    return model(input_ids=ids, use_cache=True, logits_to_keep=logits_to_keep, **kwargs)


def compact_cache(cache: Cache, start: int, slots: list[int]) -> None:
    """Move the rows `slots` (ascending, each >= its destination) of every layer to `start`, `start + 1`, ... and
    crop the cache after them: what a tree verification keeps of its rows (the accepted path)."""
    first = next((i for i, slot in enumerate(slots) if slot != start + i), len(slots))  # rows before it stay put
    if first < len(slots) and cache.layers:
        source = torch.tensor(slots[first:], dtype=torch.long, device=cache.layers[0].keys.device)
        for layer in cache.layers:
            for rows in (layer.keys, layer.values):
                rows[:, :, start + first : start + len(slots)] = rows.index_select(2, source)
    crop_cache(cache, start + len(slots))


def crop_cache(cache: DynamicCache, length: int, current: int | None = None) -> None:
    """Crop ``cache`` to its first ``length`` positions. ``current``: the cache's length when the caller knows
    it (a static cache keeps its length on the device, and reading it there waits for the device).

    ``DynamicCache.crop`` takes a NEGATIVE count of positions to drop (transformers >= 5.x raises on
    a positive, absolute length; ``crop(0)`` meant "crop to empty" in older releases), so only call
    it with a strictly negative number.
    """
    excess = (cache.get_seq_length() if current is None else current) - length
    if excess > 0:
        cache.crop(-excess)
