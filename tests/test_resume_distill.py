"""Exact resume of the distillation stages: stage 2 reading the teacher cache, and stage 3 with the state that
lives outside the weights (the global threshold, the on-policy steps' sampler, the k schedule). Each run is
SIGKILLed from outside while it waits after its first mid-epoch checkpoint, resumed, and compared with the
uninterrupted run: bit-identical weights and the same metrics.csv."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from adaspec.distill.cache_build import build_cache
from adaspec.toolkit import compose_config
from adaspec.training.pipeline import run_stage
from tests.conftest import TINY
from tests.test_resume import (
    RUN,
    assert_resumed,
    checkpoint_step,
    finish,
    kill_when_paused,
    metrics_rows,
    train,
)

UPSTREAM = [override for override in RUN if not override.startswith("stage=")]

CASES = {
    "ref-teacher-cache": ["stage=ref", "distill.teacher=cache", "distill.cache_mode=topk", "distill.cache_topk=16"],
    "ref-grouped-by-length": ["stage=ref", "stage.group_by_length=3"],
    "draft-global-selection": ["stage=draft", "k=0.4", "distill.selection=global", "distill.refresh_every_n_steps=1000"],
    "draft-mixed-on-policy": ["stage=draft", "k=0.4", "distill.data=mixed", "distill.on_policy_fraction=0.5"],
    "draft-k-schedule": ["stage=draft", "k=0.4", "distill.k_schedule=linear", "distill.k_schedule_frac=0.5"],
}
STAGE_FOLDER = {"ref": "ref", "draft": "draft-k0.4"}


def upstream(root: Path, case: list[str]) -> None:
    """The tiny target (and, for stage 3, the reference) the case reads, trained in this process."""
    compose = lambda *extra: compose_config(*TINY, *UPSTREAM, f"paths.root={root}", *extra)  # noqa: E731
    run_stage(compose("stage=target"))
    if "stage=draft" in case:
        run_stage(compose("stage=ref"))
    if "distill.teacher=cache" in case:
        build_cache(compose(*case))


@pytest.mark.chaos("exact-resume")
@pytest.mark.parametrize("name", list(CASES))
def test_a_distillation_stage_killed_mid_epoch_resumes_to_the_uninterrupted_run(tmp_path, name):
    case = CASES[name]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    upstream(whole, case)
    shutil.copytree(whole, killed)
    stage = Path("arith/tiny/seed0") / STAGE_FOLDER[case[0].removeprefix("stage=")]

    uninterrupted = train(whole, *case)
    interrupted = train(killed, *case, pause_marker=tmp_path / "paused")
    kill_when_paused(interrupted, tmp_path / "paused")
    finish(uninterrupted)
    assert interrupted.returncode == -signal.SIGKILL
    assert not (killed / stage / "final").exists()
    from_step = checkpoint_step(killed / stage)
    assert_resumed(killed / stage, finish(train(killed, *case, "resume=true")), from_step, 26)

    a = load_file(whole / stage / "final" / "model.safetensors")
    b = load_file(killed / stage / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    different = [key for key in a if not torch.equal(a[key], b[key])]
    assert not different, f"weights differ after the resume: {different}"
    rows = metrics_rows(whole / stage)
    assert metrics_rows(killed / stage) == rows
    assert [int(r["step"]) for r in rows if r.get("train/loss")] == list(range(26))
