"""The practice note's "special positional encoding for operators" (task.domain.operator_embedding).

A learned vector per operator type (adaspec.distill.token_classes.OPERATOR_TYPES), zero at the start, is
added to the input-embedding rows of that type's tokens, so all the tokens of one operator (" *", "*",
"*(" ...) share a trained signal. It is a torch parametrization of the embedding weight: the model stays
the same Hugging Face class with the same modules, and `merge_parametrizations` folds the vectors into
the plain weight before the model is saved, so the saved draft needs no code of ours to load or decode.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize
from transformers import PreTrainedModel

from adaspec.distill.token_classes import OPERATOR_TYPES
from adaspec.errors import UserError


class OperatorTypeVectors(nn.Module):
    """Parametrization of an embedding weight [V, H]: row i gets vectors[type of token i] added."""

    def __init__(self, row_types: torch.Tensor, hidden_size: int, n_types: int = len(OPERATOR_TYPES)):
        super().__init__()
        self.vectors = nn.Parameter(torch.zeros(n_types, hidden_size))
        # rows of non-operators point at an extra all-zero row; not saved (rebuilt from the tokenizer)
        self.register_buffer("row_types", torch.where(row_types < 0, n_types, row_types), persistent=False)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        table = torch.cat([self.vectors, self.vectors.new_zeros(1, self.vectors.shape[1])])
        return weight + table[self.row_types].to(weight.dtype)


def add_operator_embedding(model: PreTrainedModel, operator_types: torch.Tensor) -> PreTrainedModel:
    """Parametrize `model`'s input embedding with operator-type vectors; `operator_types` [<= V] per token id."""
    embedding = model.get_input_embeddings()
    output = model.get_output_embeddings()
    if output is not None and output.weight is embedding.weight:
        raise UserError(
            "task.domain.operator_embedding needs a draft with untied input and output embeddings; "
            "set task.domain.operator_embedding=false for this model"
        )
    rows = torch.full((embedding.num_embeddings,), -1, dtype=torch.long)
    n = min(len(operator_types), embedding.num_embeddings)
    rows[:n] = operator_types[:n]
    vectors = OperatorTypeVectors(rows.to(embedding.weight.device), embedding.embedding_dim)
    parametrize.register_parametrization(embedding, "weight", vectors.to(embedding.weight.device))
    return model


def merge_parametrizations(model: nn.Module) -> nn.Module:
    """Fold every parametrization of `model` into its plain weights, leaving ordinary modules."""
    for module in list(model.modules()):
        if parametrize.is_parametrized(module):
            for name in list(module.parametrizations.keys()):
                parametrize.remove_parametrizations(module, name, leave_parametrized=True)
    return model
