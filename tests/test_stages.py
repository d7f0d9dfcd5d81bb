"""Each stage module: real Lightning training on tiny models; the losses and the frozen models behave."""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from adaspec.drafts import ModelDraft
from adaspec.stages.draft import SelectiveDistill
from adaspec.stages.ref import ReferenceDistill
from adaspec.stages.target import TargetFinetune
from tests.stage_helpers import fit_on_fixed_batch, model, tokenizer_and_batch


@pytest.fixture
def setup(tiny_cfg):
    cfg = tiny_cfg("stage.lr=3e-3", "stage.warmup_frac=0.0")
    tokenizer, batch = tokenizer_and_batch(cfg)
    return cfg, tokenizer, batch


def falls(losses):
    return sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def test_target_finetune_loss_falls(setup, tmp_path):
    cfg, tokenizer, batch = setup
    module = TargetFinetune(model(cfg, tokenizer, "target", 0), cfg.stage)
    losses = fit_on_fixed_batch(module, batch, 40, tmp_path)
    assert len(losses) == 40 and falls(losses), losses


def test_reference_distill_loss_falls(setup, tmp_path):
    cfg, tokenizer, batch = setup
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    module = ReferenceDistill(ModelDraft(model(cfg, tokenizer, "draft", 2)), cfg.stage, cfg.distill, target)
    assert falls(fit_on_fixed_batch(module, batch, 40, tmp_path))


@pytest.mark.parametrize("selection", ["batch", "sequence", "quantile", "soft"])
def test_selective_distill_loss_falls(setup, tmp_path, selection):
    cfg, tokenizer, batch = setup
    cfg.distill.selection = selection
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    reference = ModelDraft(model(cfg, tokenizer, "draft", 3, frozen=True))
    module = SelectiveDistill(
        ModelDraft(model(cfg, tokenizer, "draft", 2)), cfg.stage, cfg.distill, target, reference, k=0.4
    )
    assert falls(fit_on_fixed_batch(module, batch, 40, tmp_path))


def test_k_one_equals_reference_distill_loss(setup):
    cfg, tokenizer, batch = setup
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    reference = ModelDraft(model(cfg, tokenizer, "draft", 3, frozen=True))
    draft = model(cfg, tokenizer, "draft", 2)
    ref_loss, _ = ReferenceDistill(ModelDraft(copy.deepcopy(draft)), cfg.stage, cfg.distill, target).loss(batch)
    for normalize in ("all_tokens", "selected_tokens"):
        cfg.distill.normalize = normalize
        sel = SelectiveDistill(ModelDraft(copy.deepcopy(draft)), cfg.stage, cfg.distill, target, reference, k=1.0)
        sel_loss, metrics = sel.loss(batch)
        torch.testing.assert_close(sel_loss, ref_loss)
        assert float(metrics["selected_frac"]) == 1.0


def test_normalisation_divides_by_all_or_selected_tokens(setup):
    cfg, tokenizer, batch = setup
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    reference = ModelDraft(model(cfg, tokenizer, "draft", 3, frozen=True))
    draft = model(cfg, tokenizer, "draft", 2)
    losses = {}
    for normalize in ("all_tokens", "selected_tokens"):
        cfg.distill.normalize = normalize
        module = SelectiveDistill(ModelDraft(draft), cfg.stage, cfg.distill, target, reference, k=0.4)
        losses[normalize], metrics = module.loss(batch)
    frac = float(metrics["selected_frac"])
    torch.testing.assert_close(losses["all_tokens"], losses["selected_tokens"] * frac, rtol=1e-4, atol=1e-6)


def test_prompt_and_padding_tokens_are_never_selected(setup):
    cfg, tokenizer, batch = setup
    assert (batch["labels"] == -100).any() and (batch["attention_mask"] == 0).any()
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    module = SelectiveDistill(
        ModelDraft(model(cfg, tokenizer, "draft", 2)), cfg.stage, cfg.distill, target,
        ModelDraft(model(cfg, tokenizer, "draft", 3, True)), k=0.4,
    )
    selected = module.step(batch)[2]["selection"].selected
    mask = module.token_deltas(batch)[2]
    chosen = torch.zeros_like(mask)
    chosen[mask] = selected
    next_labels = batch["labels"][:, 1:]
    assert (next_labels[chosen] != -100).all()
    assert (batch["attention_mask"][:, 1:][chosen] == 1).all()
    assert int(selected.sum()) == -(-int(mask.sum()) * 4 // 10)


def test_frozen_models_stay_frozen_and_out_of_checkpoints(setup, tmp_path):
    cfg, tokenizer, batch = setup
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    reference = ModelDraft(model(cfg, tokenizer, "draft", 3, frozen=True))
    before = {n: p.clone() for n, p in target.named_parameters()}
    module = SelectiveDistill(
        ModelDraft(model(cfg, tokenizer, "draft", 2)), cfg.stage, cfg.distill, target, reference, k=0.4
    )

    class CheckModes(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            assert pl_module.student.training
            for frozen in pl_module.frozen.values():
                assert not frozen.training
                assert not any(p.requires_grad for p in frozen.parameters())

    trainer = pl.Trainer(
        max_steps=3,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[CheckModes()],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(module, train_dataloaders=DataLoader([batch] * 3, batch_size=None))
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    state = torch.load(tmp_path / "c.ckpt", weights_only=False)
    assert all(name.startswith("student.") for name in state["state_dict"])
    n_student = len(list(module.student.parameters()))
    assert len(state["optimizer_states"][0]["state"]) == n_student
    for name, p in target.named_parameters():
        assert torch.equal(p, before[name])
