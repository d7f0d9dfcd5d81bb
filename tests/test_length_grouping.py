"""stage.group_by_length: each run of N batches of the shuffled order sorted by length, so batches pad less;
the same examples per run of N batches, any epoch computed without state (a resumed run continues it)."""

from __future__ import annotations

import random

import torch
from torch.utils.data import DataLoader

from adaspec.artefacts.store import fingerprint
from adaspec.data.resumable_shuffle import LengthGroupedShuffle, ResumableShuffle

_DRAW = random.Random(0)
LENGTHS = [_DRAW.randrange(5, 400) for _ in range(203)]
BATCH, GROUP, SEED = 8, 4, 3


def padded_positions(order: list[int]) -> int:
    return sum(max(LENGTHS[i] for i in order[s : s + BATCH]) * len(order[s : s + BATCH])
               for s in range(0, len(order), BATCH))


def test_each_run_of_batches_holds_the_shuffles_examples_sorted_by_length():
    plain, grouped = ResumableShuffle(len(LENGTHS), SEED), LengthGroupedShuffle(LENGTHS, SEED, BATCH, GROUP)
    span = BATCH * GROUP
    for epoch in range(3):
        shuffled, ordered = plain.epoch_order(epoch), grouped.epoch_order(epoch)
        assert sorted(ordered) == list(range(len(LENGTHS)))
        for start in range(0, len(LENGTHS), span):
            run = ordered[start : start + span]
            assert set(run) == set(shuffled[start : start + span])
            assert [LENGTHS[i] for i in run] == sorted((LENGTHS[i] for i in run), reverse=True)
        assert padded_positions(ordered) < 0.8 * padded_positions(shuffled)  # measured: 0.67-0.68 here
    assert grouped.epoch_order(0) != grouped.epoch_order(1)  # still shuffled from epoch to epoch


def test_a_resumed_loader_continues_the_grouped_order():
    def batches(sampler):
        loader = DataLoader(list(range(len(LENGTHS))), batch_size=BATCH, sampler=sampler, generator=torch.Generator())
        return [b.tolist() for _ in range(2) for b in loader]

    whole = batches(LengthGroupedShuffle(LENGTHS, SEED, BATCH, GROUP))
    for skipped in (0, 5, 26, 31):
        resumed = LengthGroupedShuffle(LENGTHS, SEED, BATCH, GROUP)
        resumed.skip_batches(skipped, BATCH)
        assert batches(resumed)[: len(whole) - skipped] == whole[skipped:]


def test_grouping_counts_in_the_fingerprint_only_when_on(tiny_cfg):
    plain = fingerprint(tiny_cfg("stage=ref"), "ref")
    assert fingerprint(tiny_cfg("stage=ref", "stage.group_by_length=0"), "ref") == plain
    assert fingerprint(tiny_cfg("stage=ref", "stage.group_by_length=4"), "ref") != plain
