"""Hugging Face assisted generation with a fixed number of draft tokens: the baseline our engine is timed against."""

from __future__ import annotations

import time

import torch
from torch import Tensor
from transformers import PreTrainedModel

from adaspec.decoding import GenerationResult
from adaspec.models.draft_vocab import require_full_vocabulary


def configure_assistant(draft: PreTrainedModel, gamma: int) -> None:
    """Make `draft` propose exactly `gamma` tokens per block, as our fixed-gamma policy does.

    `num_assistant_tokens_schedule="constant"` keeps gamma from moving between blocks and calls, and
    `assistant_confidence_threshold=0` disables the early stop of a block on a low draft probability
    (transformers' default is 0.4).
    """
    gc = draft.generation_config
    gc.num_assistant_tokens = gamma
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0


@torch.inference_mode()
def hf_assisted_generate(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    input_ids: Tensor,
    *,
    gamma: int,
    max_new_tokens: int,
    eos_token_id: int | None,
    pad_token_id: int | None,
    temperature: float = 0.0,
) -> GenerationResult:
    """`target.generate(..., assistant_model=draft)` of `input_ids [1, T]`; the new tokens, EOS included.

    Greedy (`do_sample=False`) when `temperature == 0`, else plain sampling at `temperature` (no top-k
    or top-p). HF does not report its forward passes, so `target_calls` is 0; `wall_time_s` is the
    time of the `generate` call. `eos_token_id` is the task's stop token (a chat template's end of turn).
    A draft with a reduced vocabulary is refused: HF would feed its ids to the target unmapped (the
    evaluation skips this comparison for such a draft).
    """
    require_full_vocabulary(draft, "HF assisted generation")
    configure_assistant(draft, gamma)
    sampling = {"do_sample": False} if temperature == 0 else {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    start = time.perf_counter()
    out = target.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        assistant_model=draft,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        **sampling,
    )
    tokens = out[0, input_ids.shape[1] :].tolist()
    elapsed = time.perf_counter() - start
    if eos_token_id in tokens:
        tokens = tokens[: tokens.index(eos_token_id) + 1]
    return GenerationResult(tokens=tokens, target_calls=0, wall_time_s=elapsed)
