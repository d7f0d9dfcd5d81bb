"""Hugging Face assisted generation with a fixed number of draft tokens: the baseline our engine is timed against."""

from __future__ import annotations

import time

import torch
from torch import Tensor
from transformers import PreTrainedModel

from adaspec.decoding import GenerationResult
from adaspec.drafts import Draft
from adaspec.errors import UserError


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
    draft: Draft,
    input_ids: Tensor,
    *,
    gamma: int,
    max_new_tokens: int,
    eos_token_id: int | None,
    pad_token_id: int | None,
    temperature: float = 0.0,
) -> GenerationResult:
    """`target.generate` with `draft` as HF runs it (`assistant_model=`, or `prompt_lookup_num_tokens=` for
    prompt lookup) on `input_ids [1, T]`; the new tokens, EOS included.

    Greedy (`do_sample=False`) when `temperature == 0`, else plain sampling at `temperature` (no top-k
    or top-p). HF does not report its forward passes, so `target_calls` is 0; `wall_time_s` is the
    time of the `generate` call. `eos_token_id` is the task's stop token (a chat template's end of turn).
    A draft HF cannot run (`Draft.hf_assisted_kwargs` is None: a reduced vocabulary, whose ids HF would
    feed to the target unmapped) is refused; the evaluation skips this comparison for it.
    """
    assisted = draft.hf_assisted_kwargs(gamma)
    if assisted is None:
        raise UserError(
            f"HF assisted generation cannot run this {draft.kind} draft (a reduced vocabulary: HF would feed its "
            f"ids to the target unmapped); use the project's speculative decoding, or a full-vocabulary draft"
        )
    if "assistant_model" in assisted:
        configure_assistant(assisted["assistant_model"], gamma)
    sampling = {"do_sample": False} if temperature == 0 else {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    start = time.perf_counter()
    out = target.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        **assisted,
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
