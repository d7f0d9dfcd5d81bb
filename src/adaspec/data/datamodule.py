"""LightningDataModule over a task's examples: tokenise once, shuffle with the run's seed."""

from __future__ import annotations

from functools import partial

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerBase

from adaspec.data.encoding import Encoded, collate, encode_example
from adaspec.data.example import Example
from adaspec.data.resumable_shuffle import LengthGroupedShuffle, ResumableShuffle
from adaspec.errors import UserError


def encode_all(
    tokenizer: PreTrainedTokenizerBase,
    examples: list[Example],
    max_length: int,
    first_index: int = 0,
    prompt_format: str = "plain",
) -> list[Encoded]:
    """Every example encoded (`encode_example`; task.prompt_format: plain or chat), indexed from first_index."""
    return [
        encode_example(tokenizer, e.prompt, e.target, max_length, first_index + i, prompt_format, e.finished)
        for i, e in enumerate(examples)
    ]


class TaskDataModule(pl.LightningDataModule):
    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        splits: dict[str, list[Example]],
        *,
        batch_size: int,
        max_length: int,
        n_val: int,
        seed: int,
        prompt_format: str = "plain",
        group_by_length: int = 0,
    ) -> None:
        """`prompt_format`: task.prompt_format (chat wraps prompts in the tokenizer's chat template);
        `group_by_length`: stage.group_by_length (0: off)."""
        super().__init__()
        self.batch_size = batch_size
        self.seed = seed
        self.group_by_length = group_by_length
        self.tokenizer = tokenizer  # for callbacks that print tokens
        self.pad_id = tokenizer.pad_token_id
        self.train_set = encode_all(tokenizer, splits["train"], max_length, prompt_format=str(prompt_format))
        # validation indices follow the training ones, so one teacher cache can cover both
        self.val_set = encode_all(
            tokenizer, splits["test"][:n_val], max_length, len(self.train_set), str(prompt_format)
        )

    def _loader(self, dataset: list[Encoded], shuffle_seed: int | None = None) -> DataLoader:
        generator = None if shuffle_seed is None else torch.Generator().manual_seed(shuffle_seed)
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=generator is not None,
            generator=generator,
            collate_fn=partial(collate, pad_id=self.pad_id),
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled with the run's seed. In a single-process run resumed from a checkpoint it starts after
        the batches the checkpoint had trained on, in the uninterrupted run's order (a data-parallel run
        gets Lightning's distributed sampler instead, which restarts the epoch)."""
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            if self.group_by_length:
                raise UserError("stage.group_by_length works in single-process runs only; set stage.group_by_length=0 "
                                "for a data-parallel run")
            return self._loader(self.train_set, shuffle_seed=self.seed)
        if self.group_by_length:
            sampler = LengthGroupedShuffle([len(e.input_ids) for e in self.train_set], self.seed, self.batch_size,
                                           self.group_by_length)
        else:
            sampler = ResumableShuffle(len(self.train_set), self.seed)
        if trainer is not None and trainer.global_step > 0:
            sampler.skip_batches(trainer.global_step * trainer.accumulate_grad_batches, self.batch_size)
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            sampler=sampler,
            generator=torch.Generator(),  # the loader's own seed draw must not touch the global generator
            collate_fn=partial(collate, pad_id=self.pad_id),
        )

    def calibration_dataloader(self, seed: int = 12345) -> DataLoader:
        """Training batches in an order of their own, for estimating statistics without moving the
        training loader's random state."""
        return self._loader(self.train_set, shuffle_seed=seed)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set)
