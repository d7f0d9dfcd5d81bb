"""Faults and bad inputs: a crash while saving, a non-finite loss, determinism, mismatched artefacts."""

from __future__ import annotations

import csv

import pytest

from adaspec.artefacts import paths
from adaspec.artefacts.store import provenance, save_artefact, write_atomically
from adaspec.errors import UserError
from adaspec.training.pipeline import run_stage
from tests.stage_helpers import model, tokenizer_and_batch


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class Boom(RuntimeError):
    pass


def test_a_crash_while_saving_leaves_no_final_and_keeps_the_old_one(tiny_cfg, tmp_path):
    final = tmp_path / "stage" / "final"

    def half_then_crash(folder):
        (folder / "model.safetensors").write_bytes(b"half")
        raise Boom("disk full")

    with pytest.raises(Boom):
        write_atomically(final, half_then_crash)
    assert not final.exists() and list(final.parent.iterdir()) == []  # no final/, no temporary folder

    cfg = tiny_cfg()
    tokenizer, _ = tokenizer_and_batch(cfg)
    draft = model(cfg, tokenizer, "draft", seed=0)
    save_artefact(final, model=draft, tokenizer=tokenizer, made_by=provenance(cfg, "target"), metrics={"steps": 1})
    before = snapshot(final)

    class BrokenTokenizer:
        def save_pretrained(self, folder):
            raise Boom("killed while writing the tokenizer")

    with pytest.raises(Boom):  # the model is written, then the save crashes
        save_artefact(final, model=draft, tokenizer=BrokenTokenizer(), made_by=provenance(cfg, "target"),
                      metrics={"steps": 2})
    assert snapshot(final) == before
    assert [p.name for p in final.parent.iterdir()] == ["final"]


def test_a_non_finite_loss_names_the_step_and_the_last_checkpoint(tiny_cfg):
    cfg = tiny_cfg("stage=target", "stage.lr=1e30", "stage.checkpoint_every_n_steps=1")
    last = paths.of(cfg).target_dir() / "checkpoints" / "last.ckpt"
    with pytest.raises(UserError, match=r"non-finite training loss \(nan\) at step 1; last good checkpoint: (.*)") as info:
        run_stage(cfg)
    assert str(last) in str(info.value) and last.is_file()
    assert not paths.final(paths.of(cfg).target_dir()).exists()


def losses(final):
    with open(final.parent / "logs" / "metrics.csv") as fh:
        return [row["train/loss"] for row in csv.DictReader(fh) if row.get("train/loss")]


def test_the_same_seed_gives_the_same_stage_3_loss_curve(tiny_trained):
    runs = [
        run_stage(tiny_trained("stage=draft", "trainer.deterministic=true", f"stage.tag={tag}", "stage.monitor_prompts=0"))
        for tag in ("a", "b")
    ]
    curves = [losses(final) for final in runs]
    assert len(curves[0]) == 4 and curves[0] == curves[1]  # exact: the logged strings are equal


def test_a_stage_refuses_artefacts_with_different_tokenizers(tiny_trained):
    # the target is retrained with another vocabulary; the draft initialisation still has the old one
    run_stage(tiny_trained("stage=target", "task.vocab_size=450", "overwrite=true"))
    cfg = tiny_trained("stage=ref", "task.vocab_size=450", "overwrite=true")
    checkpoints = paths.of(cfg).ref_dir() / "checkpoints"
    stamp = sorted(p.name for p in checkpoints.iterdir())
    with pytest.raises(UserError, match=r"stage ref refuses to start: .*different tokenizers \(\d+ tokens vs \d+ tokens\)"):
        run_stage(cfg)
    assert sorted(p.name for p in checkpoints.iterdir()) == stamp  # nothing trained
