"""Evaluation tests: one torch thread (tiny models only pay thread overhead) and one trained tiny pipeline."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.conftest import TINY, compose_config

# the k=0.4 draft measures acceptance at steps 2 and 4; the other stages only at the end (step 4)
MONITORED = ["stage.monitor_every_n_steps=2", "stage.monitor_prompts=3"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="session")
def trained(request, tmp_path_factory):
    """compose(*overrides) over a folder holding a tiny target, reference and drafts k=0.4 and k=1."""
    from adaspec.training.pipeline import run_stage

    root = tmp_path_factory.mktemp("pipeline") / "outputs"

    def make(*overrides: str):
        return compose_config(*TINY, f"paths.root={root}", *overrides)

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # the session's shared target and reference (trained here with one thread if not yet made)
        shutil.copytree(request.getfixturevalue("tiny_upstream_root"), root)
        run_stage(make("stage=draft", "k=0.4", *MONITORED))
        run_stage(make("stage=draft", "k=1.0"))
    finally:
        torch.set_num_threads(n)
    return make
