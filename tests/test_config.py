"""Config composition: every group combination composes; bad values fail naming the key."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from adaspec.config import validate
from adaspec.errors import UserError
from tests.conftest import CONF, REPO, compose_config


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_every_group_combination_composes():
    groups = ["task", "model", "stage", "distill", "decode", "trainer", "logger"]
    combos = 0
    for task, model, stage, distill in itertools.product(*(group_options(g) for g in groups[:4])):
        overrides = [f"task={task}", f"model={model}", f"stage={stage}", f"distill={distill}"]
        if stage.startswith("pretrain"):  # stage 0: from-scratch presets with a corpus only
            if model in ("pythia", "codegen_phi2"):
                continue
            overrides.append("pretrain=stdlib")
        cfg = compose_config(*overrides)
        validate(cfg)
        OmegaConf.to_container(cfg, resolve=True)
        combos += 1
    for group in [*groups[4:], "pretrain"]:
        for option in group_options(group):
            validate(compose_config(f"{group}={option}"))
    assert combos >= 3 * 4 * 3 * 2 + 3 * 2 * 2 * 2


def test_top_level_k_and_gamma_reach_the_groups():
    cfg = compose_config("k=0.25", "gamma=3")
    assert cfg.k == 0.25 and cfg.decode.gamma == 3
    assert compose_config("distill=distillspec").k == 1.0
    assert compose_config("distill=adaspec").k == 0.4
    assert compose_config("distill=distillspec", "k=0.3").k == 0.3


@pytest.mark.parametrize(
    "override, key",
    [
        ("k=1.5", "`k`"),
        ("k=0", "`k`"),
        ("stage.lr=-0.1", "`stage.lr`"),
        ("gamma=0", "`gamma`"),
        ("stage.warmup_frac=1.2", "`stage.warmup_frac`"),
        ("task.max_length=4", "`task.max_length`"),
        ("distill.selection=random", "`distill.selection`.*batch, sequence, global"),
    ],
)
def test_bad_values_name_the_key(override, key):
    with pytest.raises(UserError, match=key):
        validate(compose_config(override))


@pytest.mark.parametrize(
    "override, words",
    [
        ("distill.divergence=jensen", ["distill.divergence", "forward_kl"]),
        ("distill.normalize=sum", ["distill.normalize", "all_tokens"]),
        ("decode.policy=magic", ["decode.policy", "adaptive"]),
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


def test_entry_point_prints_one_line_and_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "adaspec.train", "k=1.5", f"paths.root={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: config key `k`=1.5")
    written = {p.name for p in tmp_path.iterdir()}
    assert written <= {"hydra"}, f"no stage folder may be written before the config is valid: {written}"
