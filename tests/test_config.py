"""Config composition: every group combination composes; bad values fail naming the key."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from adaspec.config.rules import validate
from adaspec.config.schema import Selection
from adaspec.errors import UserError
from tests.conftest import CONF, REPO, compose_config


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


GROUPS = ["task", "model", "stage", "distill", "decode", "trainer", "logger", "pretrain"]


def composes_and_validates(*overrides: str) -> DictConfig:
    if any(o.startswith("stage=pretrain") for o in overrides):  # stage 0 needs a corpus
        overrides = (*overrides, "pretrain=stdlib")
    cfg = validate(compose_config(*overrides))
    OmegaConf.to_container(cfg, resolve=True)
    return cfg


NEEDS = {"pretrain=distill": ("model=smollm2",)}  # options that only apply with another group's option


def test_every_group_option_composes_and_validates():
    for group in GROUPS:
        options = group_options(group)
        assert len(options) >= 2, group
        for option in options:
            composes_and_validates(f"{group}={option}", *NEEDS.get(f"{group}={option}", ()))


def test_groups_that_interact_compose_together():
    """The pairs the cross-field rules and interpolations tie together (the full product takes minutes)."""
    for task, distill in itertools.product(group_options("task"), group_options("distill")):
        composes_and_validates(f"task={task}", f"distill={distill}")  # k from task.default_k or distillspec
    for task, model in itertools.product(group_options("task"), group_options("model")):
        composes_and_validates(f"task={task}", f"model={model}")  # task.prompt_format from the model
    for model, stage in itertools.product(group_options("model"), group_options("stage")):
        if stage.startswith("pretrain") and compose_config(f"model={model}").model.source == "pretrained":
            with pytest.raises(UserError, match="from-scratch presets"):  # stage 0 is for scratch models
                composes_and_validates(f"model={model}", f"stage={stage}")
        else:
            composes_and_validates(f"model={model}", f"stage={stage}")


def test_hydra_launcher_option_composes():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "stage=draft"], return_hydra_config=True)
    assert cfg.hydra.launcher.timeout_min == 720
    assert cfg.hydra.callbacks.validate._target_ == "adaspec.cli.ValidateBeforeRun"
    validate(cfg)


def test_every_experiment_config_composes_and_validates():
    papers = sorted(p.stem for p in (REPO / "experiments" / "paper").glob("*.yaml"))
    assert papers, "experiments/paper/ holds the paper's configs"
    for paper in papers:
        for extra in ([], ["stage=draft", "k=1.0"], ["distill=distillspec"], ["stage=ref", "seed=2"]):
            cfg = validate(compose_config(f"paper={paper}", *extra))
            OmegaConf.to_container(cfg, resolve=True)


def test_top_level_k_and_gamma_reach_the_groups():
    cfg = compose_config("k=0.25", "gamma=3")
    assert cfg.k == 0.25 and cfg.decode.gamma == 3 and cfg.eval.draft_ks == [0.25, 1.0]
    assert compose_config("distill=distillspec").k == 1.0
    assert compose_config("distill=adaspec").k == 0.4
    assert compose_config("distill=distillspec", "k=0.3").k == 0.3
    # k's default is the task's, one hop away: k -> task.default_k
    assert compose_config("task.default_k=0.3").k == 0.3
    assert compose_config("task=mbpp").k == 0.4 and compose_config("task=mbpp", "domain=note_code").k == 0.33
    assert compose_config("task=mbpp", "distill=distillspec").k == 1.0
    for policy in ("fixed", "adaptive", "hf"):
        decode = compose_config(f"decode={policy}", "gamma=7").decode
        # the decode files set only the policy and the link to `gamma`; the schema gives the rest
        assert (decode.policy, decode.gamma) == (policy, 7)
        assert (decode.temperature, decode.max_new_tokens, decode.draft_quant) == (0.0, 128, "none")


def test_paper_configs_keep_their_k_and_budget():
    assert compose_config("paper=mbpp").k == 0.33
    assert compose_config("paper=mbpp", "distill=distillspec").k == 1.0
    matched = compose_config("paper=gsm8k_matched", "distill=distillspec")
    assert (matched.k, matched.distill.budget_k, matched.distill.teacher) == (1.0, 0.4, "cache")
    assert compose_config("paper=mbpp_matched").distill.budget_k == 0.33


def test_unread_name_keys_are_gone():
    cfg = compose_config()
    assert "name" not in cfg.logger and "name" not in cfg.distill and "k_default" not in cfg.distill


@pytest.mark.parametrize(
    "override, key",
    [
        ("k=1.5", "`k`"),
        ("k=0", "`k`"),
        ("stage.lr=-0.1", "`stage.lr`"),
        ("stage.tag=ref", "`stage.tag`='ref' is invalid: 'ref' names the reference's row"),
        ("task.target_n_train=0", "`task.target_n_train`=0 is invalid: must be >= 1"),
        ("gamma=0", "`gamma`"),
        ("stage.warmup_frac=1.2", "`stage.warmup_frac`"),
        ("task.max_length=4", "`task.max_length`"),
        ("gamma=33", r"`gamma`=33 is invalid: must be an integer in 1\.\.32"),
        ("decode.gamma=0", "`decode.gamma`.*1..32"),
        ("eval.gammas=[1,5,100]", r"`eval.gammas`=\[1, 5, 100\].*1\.\.32"),
        ("trainer.devices=0", "`trainer.devices`=0 is invalid"),
        ("trainer.devices=-2", "`trainer.devices`"),
        ("trainer.devices=[]", "`trainer.devices`"),
        ("trainer.devices=none", "`trainer.devices`"),
        ("model.draft.hidden_size=-4", "`model.draft.hidden_size`=-4 is invalid: must be >= 1"),
        ("model.target.num_hidden_layers=0", "`model.target.num_hidden_layers`"),
        ("model.draft.num_attention_heads=0", "`model.draft.num_attention_heads`"),
        ("model.target.intermediate_size=0", "`model.target.intermediate_size`"),
        (
            "model.draft.hidden_size=65",
            "`model.draft.hidden_size`=65.*divisible by model.draft.num_attention_heads=2",
        ),
        ("decode.long_context_reduction=3", "`decode.long_context_reduction`.*1 or 2"),
        ("decode.compile=true", "`decode.compile`=True is invalid: .*add decode.kv_cache=static"),
        ("stage.accumulate_grad_batches=0", "`stage.accumulate_grad_batches`"),
    ],
)
@pytest.mark.chaos("bad-input")
def test_bad_values_name_the_key(override, key):
    with pytest.raises(UserError, match=key):
        validate(compose_config(override))


def test_the_reference_alone_is_a_valid_evaluation_and_no_draft_at_all_is_not():
    assert validate(compose_config("eval.draft_ks=[]", "eval.reference=true")).eval.draft_ks == []
    with pytest.raises(UserError, match="`eval.draft_ks`=\\[\\] is invalid: .*eval.reference=true"):
        validate(compose_config("eval.draft_ks=[]"))


@pytest.mark.parametrize(
    "override, value",
    [
        ("trainer.devices=auto", "auto"),
        ("trainer.devices=-1", -1),
        ("trainer.devices=4", 4),
        ("trainer.devices=[0,1]", [0, 1]),
        ("gamma=32", 32),
        ("gamma=1", 1),
    ],
)
def test_edge_values_are_accepted(override, value):
    key = override.split("=")[0]
    cfg = validate(compose_config(override))
    got = OmegaConf.select(cfg, key)
    assert (OmegaConf.to_object(got) if OmegaConf.is_config(got) else got) == value


@pytest.mark.parametrize(
    "override, key, value",
    [
        ("distill.selection=global", "distill.selection", "global"),
        ("distill.selection=sequence", "distill.selection", "sequence"),
        ("distill.teacher=cache", "distill.teacher", "cache"),
        ("distill.cache_mode=topk", "distill.cache_mode", "topk"),
        ("task.kind=code", "task.kind", "code"),
        ("model.source=pretrained", "model.source", "pretrained"),
        ("pretrain.corpus=stdlib", "pretrain.corpus", "stdlib"),
        ("model.attn_implementation=eager", "model.attn_implementation", "eager"),
        ("trainer.precision=bf16-mixed", "trainer.precision", "bf16-mixed"),
        ("trainer.precision=32", "trainer.precision", "32"),  # the command line and YAML read 32 as an int
        ("trainer.precision=16", "trainer.precision", "16"),
        ("logger.wandb.mode=online", "logger.wandb.mode", "online"),
        ("stage.name=ref", "stage.name", "ref"),
    ],
)
def test_choices_accept_their_values_and_compare_equal_to_strings(override, key, value):
    chosen = OmegaConf.select(compose_config(override), key)
    assert chosen == value and str(chosen) == value and f"{chosen}" == value
    assert {value: True}[chosen]  # hashes as its string: dict lookups by name keep working


@pytest.mark.parametrize(
    "override, words",
    [
        ("distill.divergence=jensen", ["distill.divergence", "forward_kl"]),
        ("distill.normalize=sum", ["distill.normalize", "all_tokens"]),
        ("decode.policy=magic", ["decode.policy", "adaptive"]),
        ("decode.target_dtype=int4", ["decode.target_dtype", "[float32, bfloat16]"]),
        ("decode.kv_cache=paged", ["decode.kv_cache", "[dynamic, static]"]),
        ("distill.selection=glob", ["distill.selection", f"[{', '.join(Selection)}]", "global"]),
        ("distill.teacher=remote", ["distill.teacher", "[live, cache]"]),
        ("distill.cache_mode=top", ["distill.cache_mode", "[exact, topk]"]),
        ("task.kind=prose", ["task.kind", "[math, code]"]),
        ("model.source=hub", ["model.source", "[scratch, pretrained]"]),
        ("pretrain.corpus=web", ["pretrain.corpus", "[none, stdlib]"]),
        ("model.attn_implementation=flash", ["model.attn_implementation", "flash_attention_2"]),
        ("trainer.precision=8", ["trainer.precision", "bf16-mixed", "16-mixed"]),
        ("trainer.precision=32-mixed", ["trainer.precision", "32-true"]),
        ("logger.wandb.mode=on", ["logger.wandb.mode", "[offline, online, disabled]"]),
        ("stage.name=final", ["stage.name", "pretrain_target"]),
        ("stage.lerning_rate=0.1", ["stage.lerning_rate"]),
        ("stage.lr=fast", ["stage.lr"]),
    ],
)
def test_bad_types_and_unknown_keys_fail_at_composition(override, words):
    with pytest.raises(ConfigCompositionException) as info:
        compose_config(override)
    message = str(info.value) + str(info.value.__cause__)
    for word in words:
        assert word in message


@pytest.mark.chaos("bad-input")
def test_entry_point_prints_one_line_and_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "adaspec.commands.train", "k=1.5", f"paths.root={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: config key `k`=1.5 is invalid: must be in (0, 1], e.g. k=0.4 (AdaSPEC) or k=1.0 (DistillSpec)"
    ]
    assert not any(tmp_path.iterdir()), "nothing, not even Hydra's log folder, is written for a bad config"
