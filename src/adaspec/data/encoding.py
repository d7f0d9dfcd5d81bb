"""Token ids and labels for one example, and the collation of examples into batches.

Labels are -100 on prompt positions and on padding, so every loss and every selection sees answer
tokens only.

task.prompt_format: `plain` tokenises the prompt text as it is and ends the answer with EOS (from-scratch
models); `chat` wraps the prompt in the tokenizer's chat template (a user turn, then the assistant header)
and ends the answer with the template's end-of-turn token, which is also the token that stops generation
(`stop_token_id`). The template's tokens belong to the prompt, so they never carry loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from adaspec.data.prompts import chat_messages
from adaspec.errors import UserError

IGNORE = -100
PROMPT_FORMATS = ("plain", "chat")
_ANSWER_MARK = "ANSWERMARK"  # stands for the answer while the template is rendered


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    labels: list[int]
    index: int = -1  # position of the example in its split


def _check_chat(tokenizer: PreTrainedTokenizerBase, prompt_format: str) -> bool:
    """True for chat; a UserError for an unknown format or a chat format without a chat template."""
    if prompt_format not in PROMPT_FORMATS:
        raise UserError(
            f"task.prompt_format={prompt_format!r} is invalid: must be one of {', '.join(PROMPT_FORMATS)}"
        )
    if prompt_format == "chat" and not tokenizer.chat_template:
        raise UserError(
            f"task.prompt_format=chat needs a tokenizer with a chat template, and the one of "
            f"{tokenizer.name_or_path or 'this model'} has none: use task.prompt_format=plain"
        )
    return prompt_format == "chat"


def prompt_ids(tokenizer: PreTrainedTokenizerBase, prompt: str, prompt_format: str = "plain") -> list[int]:
    """The ids the model reads before its answer, in training and in evaluation alike."""
    if _check_chat(tokenizer, prompt_format):
        prompt = tokenizer.apply_chat_template(
            chat_messages(prompt), tokenize=False, add_generation_prompt=True
        )
    return tokenizer(prompt, add_special_tokens=False)["input_ids"]


def stop_token_id(tokenizer: PreTrainedTokenizerBase, prompt_format: str = "plain") -> int:
    """The token that ends an answer (and stops generation): EOS, or in chat the special token that the
    template writes right after an assistant turn's content (<|im_end|> for ChatML templates)."""
    if not _check_chat(tokenizer, prompt_format):
        return tokenizer.eos_token_id
    turns = [*chat_messages("question"), {"role": "assistant", "content": _ANSWER_MARK}]
    text = tokenizer.apply_chat_template(turns, tokenize=False)
    after = text[text.index(_ANSWER_MARK) + len(_ANSWER_MARK) :]
    ids = tokenizer(after, add_special_tokens=False)["input_ids"]
    if not ids or ids[0] not in tokenizer.all_special_ids:
        raise UserError(
            f"the chat template of {tokenizer.name_or_path or 'this tokenizer'} ends an assistant turn with "
            f"{after!r}, not with a special token that could stop generation: use task.prompt_format=plain"
        )
    return ids[0]


def encode_example(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    target: str,
    max_length: int,
    index: int = -1,
    prompt_format: str = "plain",
    finished: bool = True,
) -> Encoded:
    """Prompt ids then target ids + the stop token, truncated to `max_length`; labels mask the prompt.
    `finished=False` (a target cut short): no stop token, which would teach that answers end there."""
    prompt_part = prompt_ids(tokenizer, prompt, prompt_format)
    stop = [stop_token_id(tokenizer, prompt_format)] if finished else []
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"] + stop
    ids = (prompt_part + target_ids)[:max_length]
    labels = ([IGNORE] * len(prompt_part) + target_ids)[:max_length]
    return Encoded(ids, labels, index)


def collate(batch: list[Encoded], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example; `index` lets per-example signals follow the shuffled order."""
    width = max(len(e.input_ids) for e in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, e in enumerate(batch):
        n = len(e.input_ids)
        input_ids[row, :n] = torch.tensor(e.input_ids)
        labels[row, :n] = torch.tensor(e.labels)
        attention_mask[row, :n] = 1
    index = torch.tensor([e.index for e in batch], dtype=torch.long)
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask, "index": index}


def by_length(encoded: list[Encoded], batch_size: int) -> list[list[int]]:
    """Positions of `encoded` in batches of similar length, longest first: a pass that writes each example's
    result at its own place (the caches) pads almost nothing instead of a quarter of every batch."""
    order = sorted(range(len(encoded)), key=lambda i: (-len(encoded[i].input_ids), i))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def left_padded(prompts: list[list[int]], pad_id: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of `prompts` padded on the left, as batched generation needs: every
    prompt ends at the last column, where the new tokens begin."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return ids, mask
