"""Token classes and the tables derived from them, on real BPE tokenizers trained on the tasks."""

from __future__ import annotations

import re

import pytest
import torch

from adaspec.distill.token_classes import (
    DIGIT,
    OPERATOR,
    OPERATOR_TYPES,
    OTHER,
    WHITESPACE,
    TokenClasses,
    classify_text,
    domain_tables,
    token_texts,
)
from tests.conftest import compose_config


@pytest.mark.parametrize(
    "text, cls, op",
    [
        ("7", DIGIT, None),
        (" 42", DIGIT, None),
        ("3.5", OTHER, None),
        ("*", OPERATOR, "times"),
        (" x", OPERATOR, "times"),
        ("x", OTHER, None),  # a piece of "six", "next", ...
        (" +", OPERATOR, "plus"),
        ("-", OPERATOR, "minus"),
        (" /", OPERATOR, "divide"),
        ("=$", OPERATOR, "equals"),
        ("<<", OTHER, None),
        ("\n", WHITESPACE, None),
        ("\n    ", WHITESPACE, None),
        ("    ", WHITESPACE, None),
        ("\t", WHITESPACE, None),
        (" ", OTHER, None),  # also the leading space of " range" when the BPE lacks the merge
        ("  ", WHITESPACE, None),
        (" return", OTHER, None),
        ("", OTHER, None),
    ],
)
def test_classify_text(text, cls, op):
    got_cls, got_op = classify_text(text)
    assert got_cls == cls
    assert (OPERATOR_TYPES[got_op] if got_op >= 0 else None) == op


def single_id(tokenizer, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, (text, tokenizer.convert_ids_to_tokens(ids))
    return ids[0]


def test_loss_weights_on_a_trained_tokenizer(arith_tokenizer):
    tok = arith_tokenizer
    domain = compose_config("task=arith", "domain=note_math").task.domain  # digits 2.0, operators 1.5
    tables = domain_tables(domain, tok, "ref")
    weights = tables.token_weights
    assert weights.shape == (len(tok),) and tables.always_keep is None and tables.operator_types is None
    for text in ("7", "0", "*", "=", "+", "-", "/", "<<", ">>", " pencils", "The", "\n"):
        expected = 2.0 if text.isdigit() else 1.5 if text in "*=+-/" else 1.0
        assert float(weights[single_id(tok, text)]) == expected, text
    # every token whose text is only digits is weighted 2x, the merges of the BPE (" 12", ...) too
    texts = token_texts(tok)
    digits = [i for i, t in enumerate(texts) if re.fullmatch(r"\s*[0-9]+\s*", t)]
    assert len(digits) > 10 and any(len(texts[i].strip()) > 1 or texts[i][0] == " " for i in digits)
    assert torch.all(weights[digits] == 2.0)
    others = [i for i, t in enumerate(texts) if not re.search(r"[0-9+\-*/=]", t) and t not in (" x",)]
    assert torch.all(weights[others] == 1.0)
    # an answer, token by token: "x" inside "six" is not an operator
    answer = "Ava has six boxes of 12, so 6*12 = <<6*12=72>>72 eggs."
    ids = tok(answer, add_special_tokens=False)["input_ids"]
    for i in ids:
        text = tok.decode([i])
        expected = 2.0 if text.strip().isdigit() else 1.5 if text.strip() in ("*", "=") else 1.0
        assert float(weights[i]) == expected, text


def test_weights_off_gives_no_table(arith_tokenizer):
    domain = compose_config("task=arith", "task.domain.digit_weight=1", "task.domain.operator_weight=1").task.domain
    assert domain_tables(domain, arith_tokenizer, "draft").token_weights is None


def test_whitespace_tokens_of_code(mbpp_tokenizer):
    classes = TokenClasses.of(mbpp_tokenizer)
    keep = classes.whitespace()
    for text in ("\n", "\n   ", "   ", "\t"):
        assert keep[single_id(mbpp_tokenizer, text)], repr(text)
    for text in ("def", " return", "(", ":", " 1"):
        assert not keep[single_id(mbpp_tokenizer, text)], repr(text)
    texts = token_texts(mbpp_tokenizer)
    assert all(texts[i].isspace() and texts[i] != " " for i in keep.nonzero().flatten().tolist())
    # the code strategies act only in stage 3
    code = compose_config("task=mbpp", "domain=note_code").task.domain
    assert domain_tables(code, mbpp_tokenizer, "ref").always_keep is None
    assert torch.equal(domain_tables(code, mbpp_tokenizer, "draft").always_keep, keep)
