"""Digit/operator loss weights, the always-kept whitespace tokens and the operator-type embedding, on
real tiny models and batches."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.nn.utils import parametrize
from transformers import AutoModelForCausalLM

from adaspec.data.datamodule import encode_all
from adaspec.data.encoding import collate
from adaspec.distill.selection import select
from adaspec.distill.token_classes import OPERATOR_TYPES, TokenClasses, domain_tables
from adaspec.distill.tokens import answer_targets
from adaspec.drafts import ModelDraft
from adaspec.models.operator_embedding import add_operator_embedding, merge_parametrizations
from adaspec.stages.draft import SelectiveDistill
from adaspec.stages.ref import ReferenceDistill
from tests.conftest import shared_data
from tests.stage_helpers import model, tokenizer_and_batch


@pytest.fixture
def math_setup(tiny_cfg):
    cfg = tiny_cfg("domain=note_math")  # digit_weight 2.0, operator_weight 1.5
    tokenizer, batch = tokenizer_and_batch(cfg)
    tables = domain_tables(cfg.task.domain, tokenizer, "draft")
    models = {
        "target": model(cfg, tokenizer, "target", 1, frozen=True),
        "reference": model(cfg, tokenizer, "draft", 3, frozen=True),
        "draft": model(cfg, tokenizer, "draft", 2),
    }
    return cfg, tokenizer, batch, tables, models


def test_weighted_loss_divides_by_the_token_count(math_setup):
    cfg, _, batch, tables, m = math_setup
    weighted = ReferenceDistill(ModelDraft(copy.deepcopy(m["draft"])), cfg.stage, cfg.distill, m["target"],
                                token_weights=tables.token_weights)
    plain = ReferenceDistill(ModelDraft(copy.deepcopy(m["draft"])), cfg.stage, cfg.distill, m["target"])
    kl, _, mask = weighted.student_divergence(batch)
    w = tables.token_weights[answer_targets(batch["labels"], mask)]
    assert (w == 2.0).any() and (w == 1.5).any() and (w == 1.0).any()
    loss, _ = weighted.loss(batch)
    torch.testing.assert_close(loss, (kl * w).sum() / kl.numel())
    assert float(loss) > float(plain.loss(batch)[0])


def test_k_one_equals_reference_distill_with_weights(math_setup):
    cfg, _, batch, tables, m = math_setup
    ref_loss, _ = ReferenceDistill(
        ModelDraft(copy.deepcopy(m["draft"])), cfg.stage, cfg.distill, m["target"], token_weights=tables.token_weights
    ).loss(batch)
    for normalize in ("all_tokens", "selected_tokens"):
        cfg.distill.normalize = normalize
        sel = SelectiveDistill(ModelDraft(copy.deepcopy(m["draft"])), cfg.stage, cfg.distill, m["target"],
                               ModelDraft(m["reference"]), k=1.0, token_weights=tables.token_weights)
        sel_loss, metrics = sel.loss(batch)
        torch.testing.assert_close(sel_loss, ref_loss)
        assert float(metrics["selected_frac"]) == 1.0


def test_selection_ranks_by_unweighted_delta(math_setup):
    cfg, _, batch, tables, m = math_setup
    runs = {}
    for name, weights in (("plain", None), ("weighted", tables.token_weights)):
        module = SelectiveDistill(ModelDraft(copy.deepcopy(m["draft"])), cfg.stage, cfg.distill, m["target"],
                                  ModelDraft(m["reference"]), k=0.4, token_weights=weights)
        loss, _, outputs = module.step(batch)
        runs[name] = (loss, outputs["selection"].selected)
    assert torch.equal(runs["plain"][1], runs["weighted"][1])
    assert not torch.isclose(runs["plain"][0], runs["weighted"][0])


def test_whitespace_tokens_are_always_selected_for_code(tiny_cfg, mbpp_splits, mbpp_tokenizer):
    cfg = tiny_cfg("task=mbpp", "domain=note_code", f"task.local_dir={shared_data('mbpp')}", "task.max_length=256")
    tok = mbpp_tokenizer
    batch = collate(encode_all(tok, mbpp_splits["train"][:8], cfg.task.max_length), tok.pad_token_id)
    tables = domain_tables(cfg.task.domain, tok, "draft")
    assert tables.always_keep is not None and tables.token_weights is None
    module = SelectiveDistill(
        ModelDraft(model(cfg, tok, "draft", 2)), cfg.stage, cfg.distill, model(cfg, tok, "target", 1, frozen=True),
        ModelDraft(model(cfg, tok, "draft", 3, frozen=True)), k=0.1, always_keep=tables.always_keep,
    )
    _, metrics, outputs = module.step(batch)
    record = outputs["selection"]
    selected = record.selected
    whitespace = tables.always_keep[record.answer_ids]
    with torch.no_grad():
        ranked = select("batch", module.token_deltas(batch)[1], 0.1).selected
    assert whitespace.any() and (whitespace & ~ranked).any()  # the rule keeps tokens the top-k would drop
    assert selected[whitespace].all()
    assert torch.equal(selected, ranked | whitespace)
    assert float(metrics["selected_frac"]) > 0.1


def test_operator_embedding_trains_and_merges_into_a_plain_model(math_setup, tmp_path):
    cfg, tokenizer, batch, _, m = math_setup
    draft = m["draft"]
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        before = draft(**inputs).logits
    operator_types = TokenClasses.of(tokenizer).operator_types
    add_operator_embedding(draft, operator_types)
    embedding = draft.get_input_embeddings()
    with torch.no_grad():
        torch.testing.assert_close(draft(**inputs).logits, before)  # the vectors start at zero

    labels = batch["labels"]
    draft(**inputs, labels=labels).loss.backward()
    vectors = embedding.parametrizations.weight[0].vectors
    original = embedding.parametrizations.weight.original
    for t in range(len(OPERATOR_TYPES)):  # each type's vector gets the summed gradient of its tokens' rows
        rows = (operator_types == t).nonzero().flatten()
        torch.testing.assert_close(vectors.grad[t], original.grad[rows].sum(0))
    assert vectors.grad.abs().sum() > 0
    torch.optim.SGD(draft.parameters(), lr=1.0).step()
    assert vectors.abs().sum() > 0
    with torch.no_grad():
        trained = draft(**inputs).logits

    merge_parametrizations(draft)
    assert not parametrize.is_parametrized(embedding)
    assert set(draft.state_dict()) == set(model(cfg, tokenizer, "draft", 2).state_dict())
    draft.save_pretrained(tmp_path / "draft")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "draft")
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, trained)
