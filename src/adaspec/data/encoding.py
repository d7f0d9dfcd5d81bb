"""Token ids and labels for one example, and the collation of examples into batches.

Labels are -100 on prompt positions and on padding, so every loss and every selection sees answer
tokens only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

IGNORE = -100


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    labels: list[int]
    index: int = -1  # position of the example in its split


def encode_example(
    tokenizer: PreTrainedTokenizerBase, prompt: str, target: str, max_length: int, index: int = -1
) -> Encoded:
    """Prompt ids then target ids + EOS, truncated to `max_length`; labels mask the prompt."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = (prompt_ids + target_ids)[:max_length]
    labels = ([IGNORE] * len(prompt_ids) + target_ids)[:max_length]
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
