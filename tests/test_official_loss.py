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


# Deliberate deviations from the official loss, for the negative controls: each must make the comparison fail.
STRICT_THRESHOLD = "> for >= at the threshold"
MEAN_FOR_SUM = "a mean over the selected tokens for the sum over num_items_in_batch"
HALF_GRADIENT = "the same loss with half its gradient"
DEVIATIONS = (STRICT_THRESHOLD, MEAN_FOR_SUM, HALF_GRADIENT)


def official_loss(draft, target, reference, inputs, k, num_items_in_batch, mask_teacher=False, deviation=None):
    """compute_loss of the official AdaSPECTrainer; `num_items_in_batch` as HF's Trainer passes it (the
    number of label tokens) or None (then the mean over the selected tokens). `deviation`: one of DEVIATIONS."""
    labels = inputs["labels"][:, 1:]
    outputs = draft(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    if deviation == HALF_GRADIENT:
        outputs = {"logits": 0.5 * outputs["logits"] + 0.5 * outputs["logits"].detach()}
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
    threshold = torch.quantile(delta, 1 - k, dim=0, keepdim=True)
    mask = delta > threshold if deviation == STRICT_THRESHOLD else delta >= threshold
    if num_items_in_batch is not None and deviation != MEAN_FOR_SUM:
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
    "duplicated rows, a few dL tied at the threshold": (2, 3, False),
}
PARTIAL_TIES = "duplicated rows, a few dL tied at the threshold"


def official_dl(draft, target, reference, batch):
    """The official rule's dL per answer token (its KL of the draft minus the reference's)."""
    with torch.no_grad():
        labels = batch["labels"][:, 1:].flatten() != IGNORE_INDEX
        kls = []
        for m in (draft, reference):
            logits = m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            teacher = target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            p = F.softmax(teacher[:, :-1].float(), -1).flatten(0, 1)[labels]
            kls.append(KLDivLoss(reduction="none")(F.log_softmax(logits[:, :-1].float(), -1).flatten(0, 1)[labels], p).sum(-1))
    return kls[0] - kls[1]


def batch_and_k(setup, case):
    """The case's batch and k. With partial ties: the first 4 rows twice (every dL appears twice, bit for bit)
    and a k whose (1 - k) quantile falls between the two copies of one dL: a few tokens tie at the threshold."""
    cfg, batch, target, drafts = setup
    if case != PARTIAL_TIES:
        return batch, 0.4
    doubled = {name: torch.cat([t[:4], t[:4]]) for name, t in batch.items()}
    dl = official_dl(drafts[2], target, drafts[3], doubled)
    ordered, n = dl.sort().values, len(dl)
    pair = next(j for j in range(n // 3, n - 1) if ordered[j] == ordered[j + 1] != ordered[j - 1])
    k = 1 - (pair + 0.5) / (n - 1)
    threshold = torch.quantile(dl, 1 - k)
    tied = int((dl == threshold).sum())
    assert 2 <= tied < n and int((dl >= threshold).sum()) - int((dl > threshold).sum()) == tied, "no partial tie"
    return doubled, k


def official_run(setup, case, normalize, deviation=None):
    """The official loss (and its gradient, in a copy of the draft) on the case; and the batch and k."""
    cfg, _, target, drafts = setup
    batch, k = batch_and_k(setup, case)
    draft_seed, ref_seed, mask_teacher = CASES[case]
    draft, reference = copy.deepcopy(drafts[draft_seed]), copy.deepcopy(drafts[ref_seed]).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    n_items = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
    expected, official_mask = official_loss(
        draft, target, reference, batch, k, n_items if normalize == "all_tokens" else None, mask_teacher, deviation
    )
    expected.backward()
    return draft, expected, official_mask, batch, k


def project_run(setup, case, normalize, batch, k):
    """Stage 3's step (SelectiveDistill, distill=official) on the case: its loss (backpropagated), the module,
    the selection."""
    cfg, _, target, drafts = setup
    draft_seed, ref_seed, mask_teacher = CASES[case]
    reference = copy.deepcopy(drafts[ref_seed]).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    distill = copy.deepcopy(cfg.distill)
    distill.normalize = normalize
    teacher = MaskedLiveTeacher(target, "forward_kl", cfg.distill.chunk_size) if mask_teacher else None
    module = SelectiveDistill(
        ModelDraft(copy.deepcopy(drafts[draft_seed])), cfg.stage, distill, target, ModelDraft(reference), k=k,
        teacher=teacher,
    )
    loss, _, outputs = module.step(batch)
    loss.backward()
    return loss, module, outputs["selection"].selected


def assert_official(official, project) -> None:
    """The project's selection, loss and every parameter's gradient equal the official ones."""
    draft, expected, official_mask = official
    loss, module, selected = project
    assert torch.equal(selected, official_mask)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-7)
    ours = dict(module.student.named_parameters())
    compared = 0
    for name, p in draft.named_parameters():
        assert p.grad is not None and ours[name].grad is not None, f"{name}: no gradient to compare"
        torch.testing.assert_close(ours[name].grad, p.grad, rtol=1e-4, atol=1e-8, msg=name)
        compared += 1
    assert compared == len(ours) > 0  # every parameter of the draft, none skipped


@pytest.mark.parametrize("normalize", ["all_tokens", "selected_tokens"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_loss_and_its_gradient_are_the_official_ones(setup, case, normalize):
    draft, expected, official_mask, batch, k = official_run(setup, case, normalize)
    if case.startswith("draft equal"):
        assert official_mask.all()  # the official rule keeps every token tied at the threshold
    assert_official((draft, expected, official_mask), project_run(setup, case, normalize, batch, k))


@pytest.mark.parametrize("deviation", DEVIATIONS)
def test_each_deviation_from_the_official_loss_fails_the_comparison(setup, deviation):
    """The negative controls: the comparison above, against the official loss changed in one way."""
    case = PARTIAL_TIES if deviation == STRICT_THRESHOLD else "random"
    normalize = "all_tokens"
    draft, expected, official_mask, batch, k = official_run(setup, case, normalize, deviation)
    project = project_run(setup, case, normalize, batch, k)
    with pytest.raises(AssertionError):
        assert_official((draft, expected, official_mask), project)
    if deviation == HALF_GRADIENT:  # the loss agrees: only the gradient comparison catches it
        torch.testing.assert_close(project[0], expected, rtol=1e-5, atol=1e-7)


def test_a_parameter_left_without_gradient_fails_the_comparison(setup):
    """A draft parameter the official loss never reaches (frozen embeddings) is reported, not skipped."""
    cfg, batch, target, drafts = setup
    draft, expected, official_mask, batch, k = official_run(setup, "random", "all_tokens")
    project = project_run(setup, "random", "all_tokens", batch, k)
    draft.get_input_embeddings().weight.grad = None
    with pytest.raises(AssertionError, match="no gradient to compare"):
        assert_official((draft, expected, official_mask), project)


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
