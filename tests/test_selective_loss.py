"""Stage 3's loss on real tiny models: today's batch selection unchanged, the official quantile rule, soft
weights, -inf teacher logits, and dL with the chosen divergence for the draft and the reference alike."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from adaspec.distill.divergence import token_divergence
from adaspec.distill.teacher import LiveTeacher
from adaspec.distill.tokens import answer_logits, answer_mask
from adaspec.drafts import ModelDraft
from adaspec.stages.draft import SelectiveDistill
from tests.stage_helpers import model, tokenizer_and_batch


@pytest.fixture(scope="module")
def models(tmp_path_factory, one_torch_thread):
    from adaspec.toolkit import compose_config
    from tests.conftest import TINY

    cfg = compose_config(*TINY, f"paths.root={tmp_path_factory.mktemp('o')}")
    tokenizer, batch = tokenizer_and_batch(cfg)
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    reference = model(cfg, tokenizer, "draft", 3, frozen=True)
    draft = model(cfg, tokenizer, "draft", 2)
    return cfg, batch, target, reference, draft


def selective(models, k=0.4, teacher=None, **distill):
    cfg, _, target, reference, draft = models
    d = copy.deepcopy(cfg.distill)
    for key, value in distill.items():
        d[key] = value
    return SelectiveDistill(
        ModelDraft(copy.deepcopy(draft)), cfg.stage, d, target, ModelDraft(reference), k=k, teacher=teacher
    )


def top_k_mask(delta: torch.Tensor, k: float) -> torch.Tensor:
    """The previous implementation's selection: the ceil(k N) largest dL, ties to the earlier token."""
    mask = torch.zeros_like(delta, dtype=torch.bool)
    mask[torch.sort(delta, descending=True, stable=True).indices[: math.ceil(k * delta.numel())]] = True
    return mask


@pytest.mark.parametrize("normalize", ["all_tokens", "selected_tokens"])
def test_batch_selection_with_a_constant_k_equals_the_previous_loss(models, normalize):
    module = selective(models, normalize=normalize, k_schedule="constant")
    batch = models[1]
    with torch.no_grad():
        kl_draft, delta, _ = module.token_deltas(batch)
        loss, metrics = module.loss(batch)
    mask = top_k_mask(delta, 0.4)
    denominator = kl_draft.numel() if normalize == "all_tokens" else int(mask.sum())
    assert torch.equal(loss, (kl_draft * mask).sum() / denominator)  # the previous formula, bit for bit
    assert float(metrics["selected_frac"]) == float(mask.float().mean())
    assert "k" not in metrics


def test_quantile_selection_trains_on_the_official_tokens(models):
    module = selective(models, selection="quantile")
    batch = models[1]
    with torch.no_grad():
        kl_draft, delta, _ = module.token_deltas(batch)
        loss, metrics, outputs = module.step(batch)
    official = delta >= torch.quantile(delta, 0.6)
    torch.testing.assert_close(loss, kl_draft[official].sum() / kl_draft.numel())
    assert metrics["threshold"] == float(torch.quantile(delta, 0.6))
    assert torch.equal(outputs["selection"].selected, official)


@pytest.mark.parametrize("normalize", ["all_tokens", "selected_tokens"])
def test_soft_selection_at_low_temperature_equals_the_hard_top_k(models, normalize):
    batch = models[1]
    with torch.no_grad():
        hard, _ = selective(models, normalize=normalize).loss(batch)
        cold, _ = selective(models, normalize=normalize, selection="soft", soft_temperature=1e-7).loss(batch)
        warm, _ = selective(models, normalize=normalize, selection="soft", soft_temperature=0.2).loss(batch)
    torch.testing.assert_close(cold, hard)
    assert torch.isfinite(warm) and not torch.isclose(warm, hard)


class MaskedTeacher(LiveTeacher):
    """The live target with some vocabulary entries masked to -inf (e.g. tokens a task never allows)."""

    def signal(self, batch, mask):
        logits = super().signal(batch, mask).clone()
        logits[:, 1::3] = float("-inf")
        return logits


@pytest.mark.parametrize("kind", ["forward_kl", "reverse_kl", "tvd", "jsd", "nla", "lk"])
@pytest.mark.parametrize("selection", ["batch", "quantile", "sequence", "global", "soft"])
def test_minus_inf_teacher_logits_give_a_finite_loss_and_finite_gradients(models, kind, selection):
    cfg, batch, target, _, _ = models
    teacher = MaskedTeacher(target, kind, cfg.distill.chunk_size, jsd_beta=0.5)
    module = selective(models, teacher=teacher, selection=selection, divergence=kind)
    if selection == "global":
        module.selection_state.threshold = 0.0
    loss, _ = module.loss(batch)
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    grads = [p.grad for p in module.student.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("kind", ["jsd", "nla", "lk"])
def test_delta_uses_the_configured_divergence_for_the_draft_and_the_reference(models, kind):
    cfg, batch, target, reference, _ = models
    module = selective(models, divergence=kind, jsd_beta=0.3)  # the teacher built from distill.*
    with torch.no_grad():
        kl_draft, delta, mask = module.token_deltas(batch)

        def answer(m):
            return answer_logits(m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits, mask)

        teacher = answer(target)
        expected_draft = token_divergence(teacher, answer(module.student), kind, jsd_beta=0.3)
        expected_ref = token_divergence(teacher, answer(reference), kind, jsd_beta=0.3)
    assert mask.equal(answer_mask(batch["labels"]))
    torch.testing.assert_close(kl_draft, expected_draft)
    torch.testing.assert_close(delta, expected_draft - expected_ref)
    assert not torch.allclose(delta, token_divergence(teacher, answer(module.student)) - token_divergence(
        teacher, answer(reference)
    ))
