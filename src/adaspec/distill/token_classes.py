"""Which vocabulary entries are digits, operators or whitespace, and the tables the domain strategies
(`task.domain`) derive from that: per-token loss weights, the always-kept tokens of the selection, and
the operator type of every row of the draft's input embedding.

A token is classified by its decoded text, so the same rules serve the byte-level BPE of from-scratch
models and pretrained tokenizers:
- digit: the text without surrounding spaces is one or more ASCII digits ("7", " 42").
- operator: the text has no letter or digit and holds one of + - − * × / ÷ = (" *", "=", "=$", ")/"), or
  is " x" (times, as GSM8K writes "3 x 4"; a bare "x" is mostly a piece of a word like "six"). Its type
  is that of the first such symbol: plus, minus, times, divide or equals. "-" as a hyphen counts too.
- whitespace: the text is only whitespace and holds a line break or tab or at least two spaces ("\\n",
  "\\n   ", "   ", "\\t"): line breaks and indentation. A lone " " is not one: a small BPE that lacks the
  merge of a space with the next character leaves the leading space of " range" or " 0" on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import DictConfig
from transformers import PreTrainedTokenizerBase

OTHER, DIGIT, OPERATOR, WHITESPACE = 0, 1, 2, 3
CLASS_NAMES = ("other", "digit", "operator", "whitespace")
OPERATOR_TYPES = ("plus", "minus", "times", "divide", "equals")
_OPERATOR_TYPE = {"+": 0, "-": 1, "−": 1, "*": 2, "×": 2, "x": 2, "/": 3, "÷": 3, "=": 4}
_SYMBOLS = frozenset("+-−*×/÷=")


def classify_text(text: str) -> tuple[int, int]:
    """(class, operator type index or -1) of one token's text."""
    if text and text.isspace():
        return (WHITESPACE if text != " " else OTHER), -1
    core = text.strip()
    if core and all("0" <= c <= "9" for c in core):
        return DIGIT, -1
    if core == "x" and text[0].isspace():
        return OPERATOR, _OPERATOR_TYPE["x"]
    if core and not any(c.isalnum() for c in core):
        first = next((c for c in core if c in _SYMBOLS), None)
        if first is not None:
            return OPERATOR, _OPERATOR_TYPE[first]
    return OTHER, -1


def token_texts(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The decoded text of every token id 0 .. len(tokenizer) - 1."""
    return tokenizer.batch_decode([[i] for i in range(len(tokenizer))], clean_up_tokenization_spaces=False)


@dataclass(frozen=True)
class TokenClasses:
    classes: torch.Tensor  # [V] long: OTHER, DIGIT, OPERATOR or WHITESPACE per token id
    operator_types: torch.Tensor  # [V] long: index into OPERATOR_TYPES, -1 for non-operators

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase) -> TokenClasses:
        pairs = [classify_text(t) for t in token_texts(tokenizer)]
        return cls(torch.tensor([c for c, _ in pairs], dtype=torch.long), torch.tensor([o for _, o in pairs]))

    def loss_weights(self, digit_weight: float, operator_weight: float) -> torch.Tensor:
        """[V] float: the loss weight of every token as a label (1.0 for everything but digits/operators)."""
        weights = torch.ones(len(self.classes), dtype=torch.float32)
        weights[self.classes == DIGIT] = digit_weight
        weights[self.classes == OPERATOR] = operator_weight
        return weights

    def whitespace(self) -> torch.Tensor:
        """[V] bool: the newline/indentation tokens that the selection always keeps for code."""
        return self.classes == WHITESPACE


@dataclass(frozen=True)
class DomainTables:
    """What the stage modules and the model need from `task.domain`; None where the option is off."""

    token_weights: torch.Tensor | None = None  # [V] float loss weight per label token id (stages 2-3)
    always_keep: torch.Tensor | None = None  # [V] bool, selected whatever their dL (stage 3)
    operator_types: torch.Tensor | None = None  # [V] long operator type per token id (stage 3 embedding)


def domain_tables(domain: DictConfig, tokenizer: PreTrainedTokenizerBase, stage: str) -> DomainTables:
    """The tables of the options of `domain` that act in `stage` (ref or draft)."""
    weighted = domain.digit_weight != 1.0 or domain.operator_weight != 1.0
    keep = stage == "draft" and domain.keep_whitespace_tokens
    embedding = stage == "draft" and domain.operator_embedding
    if not (weighted or keep or embedding):
        return DomainTables()
    classes = TokenClasses.of(tokenizer)
    return DomainTables(
        token_weights=classes.loss_weights(domain.digit_weight, domain.operator_weight) if weighted else None,
        always_keep=classes.whitespace() if keep else None,
        operator_types=classes.operator_types if embedding else None,
    )
