"""Shared test fixtures: real Hydra composition of the project's configs at tiny sizes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
# Tiny models run fastest on one thread, and subprocesses (DDP ranks, entry points) inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Subprocesses (entry points, scripts) import this checkout's package whether or not it is installed, editable or
# not: its src/ (and the repository, for `tests.*`) go before whatever PYTHONPATH already holds.
_REPO = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join([str(_REPO / "src"), str(_REPO), *filter(None, [os.environ.get("PYTHONPATH")])])

from omegaconf import DictConfig  # noqa: E402

from adaspec.toolkit import compose_config, no_tokenizer_parallelism  # noqa: E402  (tests import compose_config from here)

no_tokenizer_parallelism()

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_data(task: str) -> Path:
    """The real task files in ../shared/data/<task>; on a clone without them the calling test is skipped with
    one line naming the folder."""
    folder = SHARED_DATA / task
    if not folder.is_dir():
        pytest.skip(f"needs the real {task} files in {folder} (the shared/ folder beside the repository)")
    return folder

# Models and data small enough that a stage runs a few steps in seconds on two CPU cores.
TINY = [
    "model.target.hidden_size=32",
    "model.target.num_hidden_layers=2",
    "model.target.num_attention_heads=2",
    "model.target.intermediate_size=64",
    "model.draft.hidden_size=16",
    "model.draft.num_hidden_layers=1",
    "model.draft.num_attention_heads=2",
    "model.draft.intermediate_size=32",
    "model.max_position_embeddings=256",
    "task.arith.n_train=64",
    "task.arith.n_test=16",
    "task.n_val=8",
    "task.vocab_size=400",
    "task.max_length=192",
    "stage.batch_size=8",
    "stage.max_steps=4",
    "stage.checkpoint_every_n_steps=2",
    "stage.monitor_prompts=2",  # the acceptance monitor decodes 2 held-out prompts at the end of stages 2-3
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1",
]


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models only pay thread overhead; with other jobs on 2 cores, 2 threads are ~10x slower."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny_cfg(tmp_path):
    """compose(*overrides) at tiny sizes with outputs under a temporary folder."""

    def make(*overrides: str) -> DictConfig:
        return compose_config(*TINY, f"paths.root={tmp_path / 'outputs'}", *overrides)

    return make


@pytest.fixture(scope="session")
def tiny_upstream_root(tmp_path_factory):
    """Stage 1 and 2 artefacts of the tiny default, trained once per session. Read-only: copy it first."""
    from adaspec.training.pipeline import run_stage

    root = tmp_path_factory.mktemp("upstream") / "outputs"
    for stage in ("target", "ref"):
        run_stage(compose_config(*TINY, f"paths.root={root}", f"stage={stage}"))
    return root


@pytest.fixture
def tiny_trained(tiny_cfg, tiny_upstream_root, tmp_path):
    """tiny_cfg whose outputs folder already holds the target, draft_init and reference artefacts."""
    import shutil

    shutil.copytree(tiny_upstream_root, tmp_path / "outputs")
    return tiny_cfg


# The slowest modules first (their tests' summed seconds in a full run's --junitxml, 2026-12-07, AMD EPYC: 142 s
# down to 44 s): `make test` hands whole modules to its workers in collection order (--dist loadfile
# --no-loadscope-reorder), so a slow module collected last would run alone while the other worker idles. The other
# modules keep their order. Refresh the list when `--durations` shows another module among the slowest.
SLOWEST_MODULES = (
    "tests/paper/test_capacity_plan.py",
    "tests/test_resume_distill.py",
    "tests/test_eagle3_pipeline.py",
    "tests/paper/test_paper_end_to_end.py",
    "tests/decoding/test_tree.py",
    "tests/chaos/test_entry_points.py",
    "tests/decoding/test_serving.py",
    "tests/test_config.py",
    "tests/test_resume.py",
    "tests/drafts/test_eagle3.py",
    "tests/test_scale_out.py",
    "tests/test_fingerprint_unchanged.py",
    "tests/evaluation/test_evaluate.py",
)


def pytest_collection_modifyitems(items):
    rank = {module: i for i, module in enumerate(SLOWEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
