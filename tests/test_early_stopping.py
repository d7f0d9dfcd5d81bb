"""stage.early_stop_patience: the paper's "optimal epoch" arm stops when the held-out KL stops falling and
keeps the best validated weights."""

from __future__ import annotations

import csv
import json

from adaspec.artefacts import paths
from adaspec.config.rules import validate
from adaspec.training.pipeline import run_stage


def validations(folder) -> list[tuple[int, float]]:
    """(optimiser steps done, val/kl) of every validation; the log's step column counts from 0."""
    with open(folder / "logs" / "metrics.csv") as fh:
        return [(int(r["step"]) + 1, float(r["val/kl"])) for r in csv.DictReader(fh) if r.get("val/kl")]


def test_a_diverging_draft_stops_early_and_keeps_its_best_validated_weights(tiny_trained):
    # an absurd learning rate makes the held-out KL rise after the first validations
    cfg = validate(tiny_trained("stage=draft", "k=0.4", "stage.lr=0.5", "stage.warmup_frac=0", "stage.max_epochs=6", "stage.max_steps=-1",
                                "stage.val_every_n_steps=2", "stage.early_stop_patience=2",
                                "stage.monitor_every_n_steps=0"))
    run_stage(cfg)
    folder = paths.of(cfg).draft_dir()
    metrics = json.loads((paths.final(folder) / "metrics.json").read_text())
    seen = validations(folder)[:-1]  # the last row is the final validation of the kept weights
    best_step, best = min(seen, key=lambda sv: sv[1])
    assert metrics["early_stop/stopped"] is True and metrics["steps"] < 6 * 2  # 64 examples, batch 32
    assert metrics["early_stop/best_step"] == best_step and metrics["early_stop/best_val_kl"] == best
    after = [kl for step, kl in seen if step > best_step]
    assert len(after) == 2 and all(kl >= best for kl in after)  # patience 2: two validations without a gain
    assert abs(metrics["val/kl"] - best) < 1e-5  # the saved draft is the best one, validated again


def test_patience_zero_leaves_the_fingerprint_of_earlier_artefacts(tiny_cfg):
    from adaspec.artefacts.store import fingerprint

    plain, off = validate(tiny_cfg("stage=ref")), validate(tiny_cfg("stage=ref", "stage.early_stop_patience=0"))
    on = validate(tiny_cfg("stage=ref", "stage.early_stop_patience=2"))
    assert fingerprint(plain, "ref") == fingerprint(off, "ref") != fingerprint(on, "ref")
