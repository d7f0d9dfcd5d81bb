"""A shuffling sampler that can start anywhere in the run, so a resumed stage sees the data in the
order the uninterrupted run would have.

It reproduces, sample for sample, `DataLoader(shuffle=True, generator=Generator().manual_seed(seed))`
with `num_workers=0` (the project's loader before it could resume): per epoch that loader draws one
int64 from the generator (the iterator's base seed), then `randperm(n)`, then, at the end of the
epoch, one more `randperm(n)` that it cuts to zero samples. Replaying those draws gives any epoch's
order without state carried from the epochs before it.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class ResumableShuffle(Sampler[int]):
    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.seed = seed
        self.epoch = 0  # the epoch the next `iter()` yields
        self.offset = 0  # samples of that epoch already consumed (a resumed run skips them)

    def skip_batches(self, batches: int, batch_size: int) -> None:
        """Start after the first `batches` batches of the run (of `batch_size`, the last of each epoch short)."""
        per_epoch = -(-self.n // batch_size)
        self.epoch, done = divmod(batches, per_epoch)
        self.offset = done * batch_size

    def epoch_order(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(epoch):
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            torch.randperm(self.n, generator=generator)
            torch.randperm(self.n, generator=generator)
        torch.empty((), dtype=torch.int64).random_(generator=generator)
        return torch.randperm(self.n, generator=generator).tolist()

    def __iter__(self) -> Iterator[int]:
        order = self.epoch_order(self.epoch)[self.offset :]
        self.epoch, self.offset = self.epoch + 1, 0
        yield from order

    def __len__(self) -> int:
        # a whole epoch, also while resuming: Lightning sizes every epoch by the length it reads at the start
        return self.n


class LengthGroupedShuffle(ResumableShuffle):
    """ResumableShuffle's order with each run of `group` batches sorted by length, longest first (HF Trainer's
    `group_by_length`): a batch's sequences are of similar lengths, so it pads less. The batches stay what the
    shuffled order puts in each run of `group`, and any epoch's order is still computed without state, so a
    resumed run continues it as it does the plain shuffle."""

    def __init__(self, lengths: list[int], seed: int, batch_size: int, group: int) -> None:
        super().__init__(len(lengths), seed)
        self.lengths, self.span = lengths, batch_size * group

    def epoch_order(self, epoch: int) -> list[int]:
        order = super().epoch_order(epoch)
        return [i for start in range(0, self.n, self.span)
                for i in sorted(order[start : start + self.span], key=lambda i: -self.lengths[i])]

