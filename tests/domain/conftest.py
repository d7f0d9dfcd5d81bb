"""Shared pieces of the domain-strategy tests: real tokenizers trained on the tasks' text."""

from __future__ import annotations

import pytest

from adaspec.data.tasks import load_task
from adaspec.data.tokenizer import frequent_dotted_names, train_bpe_tokenizer
from adaspec.stages.tokenizer_source import training_texts
from tests.conftest import compose_config, shared_data


@pytest.fixture(scope="session")
def arith_tokenizer():
    splits = load_task(compose_config("task.arith.n_train=200").task)
    return train_bpe_tokenizer(training_texts(splits["train"]), 400)


@pytest.fixture(scope="session")
def mbpp_splits():
    cfg = compose_config("task=mbpp", "domain=note_code", f"task.local_dir={shared_data('mbpp')}")
    return load_task(cfg.task)


@pytest.fixture(scope="session")
def mbpp_tokenizer(mbpp_splits):
    """A 400-token BPE on MBPP's training split with its 64 most frequent API names (task=mbpp's default)."""
    code = [e.target for e in mbpp_splits["train"]]
    return train_bpe_tokenizer(training_texts(mbpp_splits["train"]), 400, frequent_dotted_names(code, 64))
