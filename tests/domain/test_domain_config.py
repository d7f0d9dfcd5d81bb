"""task.default_k and task.domain: per-task defaults, command-line overrides, validation, fingerprints."""

from __future__ import annotations

import pytest

from adaspec.artefacts.store import fingerprint
from adaspec.config.rules import validate
from adaspec.errors import UserError
from tests.conftest import compose_config

PLAIN = dict(digit_weight=1.0, operator_weight=1.0, operator_embedding=False, keep_whitespace_tokens=False,
             api_vocab_size=0)


@pytest.mark.parametrize(
    "overrides, k",
    [(["task=mbpp"], 0.4), (["task=gsm8k"], 0.4), (["task=arith"], 0.4), (["task=mbpp", "domain=note_code"], 0.33)],
)
def test_k_defaults(overrides, k):
    assert validate(compose_config(*overrides)).k == k
    assert compose_config(*overrides, "distill=adaspec").k == k
    assert compose_config(*overrides, "distill=distillspec").k == 1.0
    assert compose_config(*overrides, "k=0.25").k == 0.25  # the command line wins
    assert compose_config(*overrides, "distill=distillspec", "k=0.5").k == 0.5


def test_the_practice_note_k_for_code_names_its_draft_folder(tmp_path):
    from adaspec.artefacts import paths

    cfg = compose_config("task=mbpp", "domain=note_code", "stage=draft", f"paths.root={tmp_path}")
    assert paths.of(cfg).draft_dir().name == "draft-k0.33"


@pytest.mark.parametrize("task", ["arith", "gsm8k", "mbpp"])
def test_every_task_trains_the_plain_method_by_default(task):
    assert dict(compose_config(f"task={task}").task.domain) == PLAIN


@pytest.mark.parametrize(
    "domain, changed",
    [
        ("note_math", dict(digit_weight=2.0, operator_weight=1.5)),
        ("note_code", dict(keep_whitespace_tokens=True, api_vocab_size=64)),
    ],
)
def test_the_practice_note_strategies_are_an_ablation_one_option_away(domain, changed):
    assert dict(compose_config("task=gsm8k", f"domain={domain}").task.domain) == {**PLAIN, **changed}


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

    assert not changes("target", "task.domain.digit_weight=2")
    assert changes("ref", "task.domain.digit_weight=2") and changes("draft", "task.domain.digit_weight=2")
    assert not changes("ref", "task.domain.keep_whitespace_tokens=true")
    assert not changes("ref", "task.domain.operator_embedding=true")
    assert changes("draft", "task.domain.operator_embedding=true")
    assert changes("target", "task.domain.api_vocab_size=8")
    assert not changes("target", "task.default_k=0.3") and changes("draft", "task.default_k=0.3")
