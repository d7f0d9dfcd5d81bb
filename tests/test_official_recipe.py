"""distill=official: the official AdaSPEC training setup, composed with every task and stage."""

from __future__ import annotations

import itertools

from adaspec.config.rules import validate
from adaspec.distill.budget import apply_token_budget
from adaspec.stages.schedule import lr_multiplier
from tests.conftest import CONF, compose_config

NEUTRAL_DOMAIN = {
    "digit_weight": 1.0,
    "operator_weight": 1.0,
    "operator_embedding": False,
    "keep_whitespace_tokens": False,
    "api_vocab_size": 0,
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def official(*overrides: str):
    if any(o.startswith("stage=pretrain") for o in overrides):  # stage 0 needs a corpus
        overrides = (*overrides, "pretrain=stdlib")
    return validate(compose_config("distill=official", *overrides))


def test_official_recipe_composes_with_every_task_and_stage():
    for task, stage in itertools.product(options("task"), options("stage")):
        cfg = official(f"task={task}", f"stage={stage}")
        assert cfg.k == 0.4, (task, stage)  # MBPP too (its default_k is 0.33)
        assert dict(cfg.task.domain) == NEUTRAL_DOMAIN, (task, stage)  # no domain strategies
        d, st = cfg.distill, cfg.stage
        assert (d.selection, d.normalize, d.divergence) == ("quantile", "all_tokens", "forward_kl")
        assert (st.lr, st.warmup_frac, st.min_lr_ratio, st.weight_decay, st.gradient_clip_val) == (
            3e-4, 0.0, 1.0, 0.1, 1.0
        )
        assert (st.batch_size, st.max_epochs, d.match_token_budget, d.budget_k) == (16, 3, True, None)


def test_the_learning_rate_is_constant_without_warmup():
    st = official("stage=draft").stage
    factors = {
        lr_multiplier(step, 1000, st.warmup_frac, st.min_lr_ratio, st.decay_end_frac) for step in range(1000)
    }
    assert factors == {1.0}


def test_official_budgets():
    n_train = 800
    reference = official("stage=ref").stage
    assert (reference.batch_size, reference.max_epochs) == (16, 3)  # 150 steps
    draft = apply_token_budget(official("stage=draft"), n_train)
    assert draft.stage.batch_size == 40 and draft.stage.max_steps == 150  # 40 x 150 = 7.5 = 3 / k epochs
    assert draft.stage.max_steps * draft.stage.batch_size / n_train == 3 / 0.4
    distillspec = apply_token_budget(official("stage=draft", "k=1.0"), n_train)
    assert (distillspec.stage.batch_size, distillspec.stage.max_steps) == (16, 150)  # the reference's budget
    equal = apply_token_budget(official("stage=draft", "distill.match_token_budget=false"), n_train)
    assert (equal.stage.batch_size, equal.stage.max_epochs, equal.stage.max_steps) == (16, 3, -1)


def test_the_command_line_wins_over_the_recipe():
    cfg = official("task=mbpp", "k=1.0", "stage.lr=1e-4", "task.domain.keep_whitespace_tokens=true")
    assert (cfg.k, cfg.stage.lr, cfg.task.domain.keep_whitespace_tokens) == (1.0, 1e-4, True)
    assert compose_config("task=mbpp", "domain=note_code").k == 0.33  # the practice note's ablation
    assert compose_config("task=gsm8k", "domain=note_math").task.domain.digit_weight == 2.0
