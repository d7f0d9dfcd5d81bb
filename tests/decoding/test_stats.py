"""Metric definitions of `aggregate` on hand-built block records."""

from __future__ import annotations

import math

import pytest

from adaspec.decoding import BlockRecord, GenerationResult, aggregate

KEYS = {
    "alpha",
    "accept_rate",
    "tau",
    "target_calls",
    "draft_calls",
    "blocks",
    "new_tokens",
    "wall_time_s",
    "tokens_per_s",
    "acceptance_length",
}


def result(blocks: list[BlockRecord], gammas: list[int], wall: float) -> GenerationResult:
    n_tokens = sum(b.accepted + (not b.truncated) for b in blocks)
    return GenerationResult(
        tokens=list(range(n_tokens)),
        target_calls=len(blocks),
        draft_calls=sum(gammas),
        wall_time_s=wall,
        blocks=blocks,
        gamma_trace=gammas,
    )


def test_aggregate_definitions():
    r1 = result([BlockRecord(5, 5, None), BlockRecord(5, 2, 3), BlockRecord(5, 0, 1)], [5, 5, 5], wall=1.0)
    r2 = result(
        [
            BlockRecord(3, 1, 2),
            BlockRecord(2, 2, None, truncated=True),  # EOS after 2 accepted proposals of gamma=4
            BlockRecord(0, 0, None),  # gamma capped to 0: target-only block
        ],
        [3, 4, 0],
        wall=0.5,
    )
    stats = aggregate([r1, r2], max_gamma=5)
    assert set(stats) == KEYS | {f"{key}/{i}" for i in range(1, 6) for key in ("reject_rate_at", "accept_at_depth")}
    accepted, rejected_blocks, proposed = 5 + 2 + 0 + 1 + 2 + 0, 3, 5 + 5 + 5 + 3 + 2 + 0
    assert stats["alpha"] == pytest.approx(accepted / (accepted + rejected_blocks))  # 10 / 13
    assert stats["accept_rate"] == pytest.approx(accepted / proposed)  # 10 / 20
    new_tokens = (6 + 3 + 1) + (2 + 2 + 1)
    assert stats["new_tokens"] == new_tokens and stats["target_calls"] == 6 and stats["blocks"] == 6
    assert stats["tau"] == pytest.approx(new_tokens / 6)
    assert stats["draft_calls"] == 22
    # first rejections at positions 3, 1, 2 among the 5 blocks that proposed something
    assert [stats[f"reject_rate_at/{i}"] for i in range(1, 6)] == pytest.approx([0.2, 0.2, 0.2, 0.0, 0.0])
    assert stats["wall_time_s"] == pytest.approx(1.5)
    assert stats["tokens_per_s"] == pytest.approx(new_tokens / 1.5)
    assert stats["acceptance_length"] == pytest.approx(10 / 6)
    # depth i: blocks accepting i proposals over those that reached i (proposed >= i, i - 1 accepted), by hand
    assert [stats[f"accept_at_depth/{i}"] for i in range(1, 6)] == pytest.approx([4 / 5, 3 / 4, 1 / 2, 1, 1])


def test_truncated_block_is_not_a_rejection():
    stats = aggregate([result([BlockRecord(2, 2, None, truncated=True)], [5], wall=1.0)], max_gamma=5)
    assert stats["alpha"] == 1.0 and stats["accept_rate"] == 1.0
    assert all(stats[f"reject_rate_at/{i}"] == 0.0 for i in range(1, 6))


def test_all_accepted_gives_tau_gamma_plus_one():
    blocks = [BlockRecord(4, 4, None)] * 3
    stats = aggregate([result(blocks, [4] * 3, wall=1.0)], max_gamma=4)
    assert stats["tau"] == 5.0 and stats["alpha"] == 1.0


def test_target_only_results():
    stats = aggregate([GenerationResult(tokens=[1, 2, 3], target_calls=3, wall_time_s=0.3)], max_gamma=2)
    assert stats["tau"] == 1.0 and stats["draft_calls"] == 0 and stats["blocks"] == 0
    assert math.isnan(stats["alpha"]) and math.isnan(stats["accept_rate"])
    assert math.isnan(stats["reject_rate_at/1"])
    assert stats["tokens_per_s"] == pytest.approx(10.0)


def test_empty():
    stats = aggregate([], max_gamma=1)
    assert stats["new_tokens"] == 0 and math.isnan(stats["tau"]) and math.isnan(stats["tokens_per_s"])
