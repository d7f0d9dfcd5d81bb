"""distill.k_schedule: k from 1.0 down to the configured k over the first k_schedule_frac of the steps."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from adaspec.distill.k_schedule import k_at_step, ramp_steps
from adaspec.drafts import ModelDraft
from adaspec.stages.draft import SelectiveDistill
from tests.stage_helpers import fit_on_fixed_batch, model, tokenizer_and_batch


def test_linear_schedule_starts_at_one_and_reaches_k_at_the_stated_step():
    total, frac, k = 100, 0.2, 0.4
    assert ramp_steps(total, frac) == 20
    ks = [k_at_step(k, step, total, "linear", frac) for step in range(total)]
    assert ks[0] == 1.0
    assert ks[10] == pytest.approx(0.7)
    assert all(a > b for a, b in zip(ks[:20], ks[1:21], strict=True))  # falls at every step of the ramp
    assert ks[19] > k and all(value == k for value in ks[20:])
    assert ramp_steps(3, 0.1) == 1 and k_at_step(k, 1, 3, "linear", 0.1) == k  # a ramp of at least 1 step


def test_constant_schedule_and_k_one_never_change():
    assert {k_at_step(0.4, step, 50, "constant", 0.2) for step in range(50)} == {0.4}
    assert {k_at_step(1.0, step, 50, "linear", 0.2) for step in range(50)} == {1.0}
    with pytest.raises(ValueError, match="linear"):
        k_at_step(0.4, 0, 50, "cosine", 0.2)


class RecordK(pl.Callback):
    def __init__(self):
        self.rows: list[tuple[int, float, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        selected = outputs["selection"].selected
        # the step this batch trained at (global_step has moved on by one)
        self.rows.append((trainer.global_step - 1, pl_module.k_used, float(selected.float().mean())))


class KRecordingDistill(SelectiveDistill):
    def step(self, batch):
        self.k_used = self.current_k()
        return super().step(batch)


def test_training_selects_everything_at_step_zero_and_k_from_the_ramp_end(tiny_cfg, tmp_path):
    cfg = tiny_cfg("distill.k_schedule=linear", "distill.k_schedule_frac=0.5")
    tokenizer, batch = tokenizer_and_batch(cfg)
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    reference = model(cfg, tokenizer, "draft", 3, frozen=True)
    module = KRecordingDistill(
        ModelDraft(model(cfg, tokenizer, "draft", 2)), cfg.stage, cfg.distill, target, ModelDraft(reference), k=0.4
    )
    recorder = RecordK()
    fit_on_fixed_batch(module, batch, 10, tmp_path, callbacks=[recorder])
    steps = [r[0] for r in recorder.rows]
    ks = [r[1] for r in recorder.rows]
    fractions = [r[2] for r in recorder.rows]
    assert steps == list(range(10))
    assert ks[0] == 1.0 and fractions[0] == 1.0  # step 0: every answer token
    assert ks[5:] == [0.4] * 5  # ramp_steps(10, 0.5) = 5
    assert all(0.4 < value < 1.0 for value in ks[1:5])
    n = int(batch["labels"][:, 1:].ne(-100).sum())
    assert fractions[5:] == pytest.approx([-(-n * 4 // 10) / n] * 5)

