"""conf/task/gsm8k.yaml and mbpp.yaml compose with the schema and load the real data."""

from __future__ import annotations

import pytest

from adaspec.config.rules import validate
from adaspec.data.tasks import load_task
from tests.conftest import compose_config


@pytest.mark.parametrize(
    ("task", "kind", "hub", "vocab_size"),
    [
        ("gsm8k", "math", ("openai/gsm8k", "main"), 2048),
        ("mbpp", "code", ("google-research-datasets/mbpp", "full"), 4096),
    ],
)
def test_task_file_composes_and_validates(task, kind, hub, vocab_size):
    cfg = validate(compose_config(f"task={task}"))
    assert (cfg.task.name, cfg.task.kind, cfg.task.local_dir) == (task, kind, None)
    assert (cfg.task.hub_path, cfg.task.hub_name) == hub
    assert cfg.task.vocab_size == vocab_size


def test_local_dir_override_loads_real_gsm8k(gsm8k_dir):
    cfg = compose_config("task=gsm8k", f"task.local_dir={gsm8k_dir}", "task.n_train=4", "task.n_test=2")
    splits = load_task(cfg.task)
    assert (len(splits["train"]), len(splits["test"])) == (4, 2)


def test_local_dir_override_loads_real_mbpp(mbpp_dir):
    cfg = compose_config("task=mbpp", f"task.local_dir={mbpp_dir}")
    splits = load_task(cfg.task)
    assert (len(splits["train"]), len(splits["test"])) == (374, 500)
