"""The entry points' shared helpers: atomic writes, markdown tables, config composition, device, prompts."""

from __future__ import annotations

import json

import pytest
import torch

from adaspec.data.tokenizer import train_bpe_tokenizer
from adaspec.toolkit import (
    compose_config,
    device_for,
    markdown_table,
    tokenize_prompts,
    wandb_enabled,
    write_json_atomically,
)


def test_a_failed_json_write_leaves_the_old_file_intact(tmp_path):
    path = tmp_path / "deep" / "results.json"
    write_json_atomically(path, {"alpha": 0.5, "missing": float("nan")})
    before = path.read_text()
    assert json.loads(before) == {"alpha": 0.5, "missing": None}  # strict JSON: NaN as null

    with pytest.raises(TypeError):
        write_json_atomically(path, {"alpha": 0.7, "model": object()})  # not serialisable
    assert path.read_text() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["results.json"]  # no temporary file left


def test_a_failed_rename_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "out.json"
    target.mkdir()
    (target / "keep").write_text("x")  # a non-empty folder cannot be replaced by a file
    with pytest.raises(OSError):
        write_json_atomically(target, {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert (target / "keep").read_text() == "x"


def test_markdown_table_formats_cells_and_checks_widths():
    table = markdown_table(["draft", "alpha", "tokens/s"], [["k0.4", 0.51234, None], ["k1", 2, float("inf")]])
    assert table.splitlines() == [
        "| draft | alpha | tokens/s |",
        "|---|---|---|",
        "| k0.4 | 0.512 | n/a |",
        "| k1 | 2 | n/a |",
    ]
    assert markdown_table(["x"], [[1.23456]], cell=lambda v: f"{v:.1f}").splitlines()[-1] == "| 1.2 |"
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        markdown_table(["a", "b", "c"], [["1", "2"]])


def test_compose_config_applies_overrides_over_the_repository_defaults():
    default = compose_config()
    cfg = compose_config("k=0.25", "gamma=3", "model=small", "logger=wandb", "trainer.accelerator=cpu")
    assert (default.k, default.decode.gamma, default.model.name) == (0.4, 5, "tiny")
    assert (cfg.k, cfg.decode.gamma, cfg.model.name, cfg.eval.draft_ks[0]) == (0.25, 3, "small", 0.25)
    assert wandb_enabled(cfg.logger) and not wandb_enabled(default.logger)
    assert not wandb_enabled(compose_config("logger=wandb", "logger.wandb.mode=disabled").logger)
    assert device_for(cfg.trainer) == torch.device("cpu")  # accelerator=cpu, whatever the machine has


def test_tokenize_prompts_gives_one_row_of_ids_per_prompt_without_special_tokens():
    tokenizer = train_bpe_tokenizer(["what is 2+3? #### 5", "a b c"] * 20, vocab_size=300)
    prompts = tokenize_prompts(tokenizer, ["what is 2+3?", "a b"], device="cpu")
    assert [p.shape[0] for p in prompts] == [1, 1]
    assert tokenizer.decode(prompts[0][0]) == "what is 2+3?"
    assert tokenizer.eos_token_id not in prompts[1][0].tolist()
