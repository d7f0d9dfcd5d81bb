"""task.default_k and task.domain: per-task defaults, command-line overrides, validation, fingerprints."""

from __future__ import annotations

import pytest

from adaspec.artefacts import fingerprint
from adaspec.config import validate
from adaspec.errors import UserError
from tests.conftest import compose_config


@pytest.mark.parametrize("task, k", [("mbpp", 0.33), ("gsm8k", 0.4), ("arith", 0.4)])
def test_k_defaults_per_task(task, k):
    assert validate(compose_config(f"task={task}")).k == k
    assert compose_config(f"task={task}", "distill=adaspec").k == k
    assert compose_config(f"task={task}", "distill=distillspec").k == 1.0
    assert compose_config(f"task={task}", "k=0.25").k == 0.25  # the command line wins
    assert compose_config(f"task={task}", "distill=distillspec", "k=0.5").k == 0.5


def test_mbpp_default_draft_folder_is_k033(tmp_path):
    from adaspec import paths

    cfg = compose_config("task=mbpp", "stage=draft", f"paths.root={tmp_path}")
    assert paths.draft_dir(cfg).name == "draft-k0.33"


@pytest.mark.parametrize(
    "task, expected",
    [
        ("arith", dict(digit_weight=2.0, operator_weight=1.5, operator_embedding=False,
                       keep_whitespace_tokens=False, api_vocab_size=0)),
        ("gsm8k", dict(digit_weight=2.0, operator_weight=1.5, operator_embedding=False,
                       keep_whitespace_tokens=False, api_vocab_size=0)),
        ("mbpp", dict(digit_weight=1.0, operator_weight=1.0, operator_embedding=False,
                      keep_whitespace_tokens=True, api_vocab_size=64)),
    ],
)
def test_domain_defaults_per_task(task, expected):
    assert dict(compose_config(f"task={task}").task.domain) == expected


@pytest.mark.parametrize(
    "override, key",
    [
        ("task.domain.digit_weight=0", "task.domain.digit_weight"),
        ("task.domain.operator_weight=-1", "task.domain.operator_weight"),
        ("task.domain.api_vocab_size=-2", "task.domain.api_vocab_size"),
        ("task.default_k=1.5", "task.default_k"),
    ],
)
def test_bad_domain_values_name_the_key(override, key):
    with pytest.raises(UserError, match=key):
        validate(compose_config(override))


def test_domain_options_fingerprint_only_the_stages_they_change():
    base = compose_config()

    def changes(stage, *override):
        return fingerprint(compose_config(*override), stage) != fingerprint(base, stage)

    assert not changes("target", "task.domain.digit_weight=1")
    assert changes("ref", "task.domain.digit_weight=1") and changes("draft", "task.domain.digit_weight=1")
    assert not changes("ref", "task.domain.keep_whitespace_tokens=true")
    assert not changes("ref", "task.domain.operator_embedding=true")
    assert changes("draft", "task.domain.operator_embedding=true")
    assert changes("target", "task.domain.api_vocab_size=8")
    assert not changes("target", "task.default_k=0.3") and changes("draft", "task.default_k=0.3")
