"""Stage 3's loss and gradient against the official AdaSPEC `compute_loss`, transcribed line by line from
yuezhouhu/adaspec `utils.py` (branch gsm8k-target-pythia-1.4b-draft-pythia-31m-3epoch, `AdaSPECTrainer`):
raw logits of the three models and the labels in, through its own label shift, masking, float32 softmax,
`KLDivLoss(reduction="none")`, quantile threshold with ties kept and `num_items_in_batch` denominator.
Nothing here calls the project's divergence, selection or masking code."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn import KLDivLoss

from adaspec.distill.teacher import LiveTeacher
from adaspec.drafts import ModelDraft
from adaspec.stages.draft import SelectiveDistill
from tests.stage_helpers import model, tokenizer_and_batch

IGNORE_INDEX = -100


def masked_vocabulary(logits: torch.Tensor) -> torch.Tensor:
    """A teacher that never allows every third token: -inf logits."""
    logits = logits.clone()
    logits[..., 1::3] = float("-inf")
    return logits


def official_loss(draft, target, reference, inputs, k, num_items_in_batch, mask_teacher=False):
    """compute_loss of the official AdaSPECTrainer; `num_items_in_batch` as HF's Trainer passes it (the
    number of label tokens) or None (then the mean over the selected tokens)."""
    labels = inputs["labels"][:, 1:]
    outputs = draft(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    with torch.no_grad():
        target_outputs = target(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False)
        ref_outputs = reference(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False)
    logits = outputs["logits"]
    target_logits = target_outputs["logits"]
    if mask_teacher:
        target_logits = masked_vocabulary(target_logits)
    ref_logits = ref_outputs["logits"]
    loss_fct = KLDivLoss(reduction="none")
    shift_logits = logits[..., :-1, :].contiguous()
    shift_target_logits = target_logits[..., :-1, :].contiguous()
    shift_ref_logits = ref_logits[..., :-1, :].contiguous()
    shift_logits = shift_logits.view(-1, shift_logits.shape[-1])
    shift_target_logits = shift_target_logits.view(-1, shift_target_logits.shape[-1])
    shift_ref_logits = shift_ref_logits.view(-1, shift_ref_logits.shape[-1])
    mask = labels.ne(IGNORE_INDEX).flatten().unsqueeze(-1)
    shift_logits = torch.masked_select(shift_logits, mask=mask).view(-1, shift_logits.shape[-1])
    shift_target_logits = torch.masked_select(shift_target_logits, mask=mask).view(-1, shift_target_logits.shape[-1])
    shift_ref_logits = torch.masked_select(shift_ref_logits, mask=mask).view(-1, shift_ref_logits.shape[-1])
    p = F.softmax(shift_target_logits.float(), dim=-1)
    actual = loss_fct(F.log_softmax(shift_logits.float(), dim=-1), p).sum(dim=-1)
    ref = loss_fct(F.log_softmax(shift_ref_logits.float(), dim=-1), p).sum(dim=-1)
    delta = actual - ref
    mask = delta >= torch.quantile(delta, 1 - k, dim=0, keepdim=True)
    if num_items_in_batch is not None:
        return torch.masked_select(actual, mask=mask).sum() / num_items_in_batch, mask
    return torch.masked_select(actual, mask=mask).mean(), mask


class MaskedLiveTeacher(LiveTeacher):
    def signal(self, batch, mask):
        return masked_vocabulary(super().signal(batch, mask))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, one_torch_thread):
    from adaspec.toolkit import compose_config
    from tests.conftest import TINY

    cfg = compose_config(*TINY, "distill=official", f"paths.root={tmp_path_factory.mktemp('o')}")
    tokenizer, batch = tokenizer_and_batch(cfg)
    assert (batch["attention_mask"] == 0).any() and (batch["labels"] == IGNORE_INDEX).any()  # padding, prompts
    target = model(cfg, tokenizer, "target", 1, frozen=True)
    return cfg, batch, target, {seed: model(cfg, tokenizer, "draft", seed) for seed in (2, 3)}


CASES = {  # name: (draft seed, reference seed, teacher with -inf logits)
    "random": (2, 3, False),
    "draft equal to reference (every dL ties)": (3, 3, False),
    "-inf teacher logits": (2, 3, True),
}


@pytest.mark.parametrize("normalize", ["all_tokens", "selected_tokens"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_loss_and_its_gradient_are_the_official_ones(setup, case, normalize):
    cfg, batch, target, drafts = setup
    draft_seed, ref_seed, mask_teacher = CASES[case]
    draft, reference = copy.deepcopy(drafts[draft_seed]), copy.deepcopy(drafts[ref_seed]).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    n_items = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
    expected, official_mask = official_loss(
        draft, target, reference, batch, 0.4, n_items if normalize == "all_tokens" else None, mask_teacher
    )
    expected.backward()

    distill = copy.deepcopy(cfg.distill)
    distill.normalize = normalize
    teacher = MaskedLiveTeacher(target, "forward_kl", cfg.distill.chunk_size) if mask_teacher else None
    module = SelectiveDistill(
        ModelDraft(copy.deepcopy(drafts[draft_seed])), cfg.stage, distill, target, ModelDraft(reference), k=0.4,
        teacher=teacher,
    )
    loss, _, outputs = module.step(batch)
    loss.backward()

    assert torch.equal(outputs["selection"].selected, official_mask)
    if case.startswith("draft equal"):
        assert official_mask.all()  # the official rule keeps every token tied at the threshold
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-7)
    ours = dict(module.student.named_parameters())
    for name, p in draft.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(ours[name].grad, p.grad, rtol=1e-4, atol=1e-8, msg=name)


def test_the_batch_rule_keeps_ceil_k_n_where_the_official_one_keeps_one_fewer(setup):
    """selection=batch (this project's default) keeps exactly ceil(0.4 N); the official quantile rule keeps
    floor(0.4 N + 0.6) on distinct dL, one fewer when N = 3 mod 5 (README, "Fidelity")."""
    cfg, batch, target, drafts = setup
    distill = copy.deepcopy(cfg.distill)
    sizes = []
    for rows in range(1, batch["input_ids"].shape[0] + 1):
        part = {name: t[:rows] for name, t in batch.items()}
        n = int((part["labels"][:, 1:] != IGNORE_INDEX).sum())
        _, official_mask = official_loss(drafts[2], target, drafts[3], part, 0.4, n)
        counts = {}
        for rule in ("batch", "quantile"):
            distill.selection = rule
            module = SelectiveDistill(ModelDraft(drafts[2]), cfg.stage, distill, target, ModelDraft(drafts[3]), k=0.4)
            with torch.no_grad():
                counts[rule] = int(module.step(part)[2]["selection"].selected.sum())
        assert counts["quantile"] == int(official_mask.sum()) == math.floor(0.4 * n + 0.6)
        assert counts["batch"] == math.ceil(0.4 * n)
        sizes.append(n)
    assert any(n % 5 == 3 for n in sizes), f"no prefix of the batch has N = 3 mod 5 ({sizes}): the case is untested"
