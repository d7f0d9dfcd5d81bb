"""Draft initialisations that reuse the target (``model.draft_init``):

- ``random``: the draft's architecture, randomly initialised (seeded).
- ``target_embedding``: as ``random``, but the (tied) embedding is the target's embedding projected to
  the draft's width onto its top singular directions: ``E V_r`` for ``E = U S V^T`` (``[V, H_target]``,
  only the rows of the reduced vocabulary when a map is given) and ``r`` the draft's width. It is the
  best rank-r approximation of the target's embedding, expressed in r coordinates.
- ``target_layers``: the target's own embedding, first L decoder layers and final norm (and head), at
  the target's width: a shallow copy of the target, best paired with a reduced vocabulary so that its
  head stays cheap. Works for any decoder whose layer weights are keyed by layer index
  (``LlamaForCausalLM``, ``GPTNeoXForCausalLM``, ...).

Each function returns a new model and leaves the target untouched.
"""

from __future__ import annotations

import copy

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from adaspec.models.draft_vocab import DraftVocab, is_reduced, reduced_config

DRAFT_INITS = ("random", "target_embedding", "target_layers")


def _with_vocab(config: PretrainedConfig, vocab: DraftVocab | None) -> PretrainedConfig:
    """``config`` at the draft's vocabulary: reduced by ``vocab`` unless it already is, or unchanged."""
    if vocab is None or is_reduced(config):
        return config
    return reduced_config(config, vocab)


def random_draft(
    draft_config: PretrainedConfig, vocab: DraftVocab | None = None, seed: int = 0
) -> PreTrainedModel:
    """The draft's architecture (``draft_config`` at the target's vocabulary), randomly initialised."""
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(_with_vocab(draft_config, vocab))


def embedding_projection(embedding: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(E @ basis, basis)``: ``embedding [V, H]`` in the coordinates of its top-``width`` right singular
    vectors ``basis [H, width]`` (orthonormal columns). ``(E @ basis) @ basis.T`` is the best rank-``width``
    approximation of ``E``: its squared error is the sum of the discarded squared singular values."""
    rows, hidden = embedding.shape
    if not 0 < width <= min(rows, hidden):
        raise ValueError(f"cannot project a [{rows}, {hidden}] embedding to width {width}")
    e = embedding.detach().float()
    _, _, vh = torch.linalg.svd(e, full_matrices=False)
    basis = vh[:width].T
    return e @ basis, basis


@torch.no_grad()
def target_embedding(
    draft_config: PretrainedConfig, target: PreTrainedModel, vocab: DraftVocab | None = None, seed: int = 0
) -> PreTrainedModel:
    """A random draft whose input embedding (and output head, tied or not) is the target's input
    embedding projected to the draft's width (`embedding_projection`), on the rows of ``vocab`` if given."""
    draft = random_draft(draft_config, vocab, seed)
    rows = target.get_input_embeddings().weight
    if vocab is not None:
        rows = rows[vocab.draft_to_target.to(rows.device)]
    if draft.config.vocab_size != rows.shape[0]:
        raise ValueError(
            f"the draft has {draft.config.vocab_size} token rows but the target's embedding gives {rows.shape[0]}"
        )
    projected, _ = embedding_projection(rows, draft.config.hidden_size)
    embedding, head = draft.get_input_embeddings(), draft.get_output_embeddings()
    embedding.weight.copy_(projected)
    if head is not None and head.weight is not embedding.weight:
        head.weight.copy_(projected)  # an untied head starts as if tied
    return draft


def _token_row_keys(model: PreTrainedModel) -> set[str]:
    """State-dict keys of the parameters with one row per token (input embedding, output head)."""
    modules = {id(model.get_input_embeddings()), id(model.get_output_embeddings())}
    return {
        f"{name}.{param}"
        for name, module in model.named_modules()
        if id(module) in modules
        for param, _ in module.named_parameters(recurse=False)
    }


@torch.no_grad()
def target_layers(
    target: PreTrainedModel, num_layers: int, vocab: DraftVocab | None = None
) -> PreTrainedModel:
    """The target cut to its first ``num_layers`` decoder layers (embedding, those layers, final norm,
    head: copies of the target's weights), with only the rows of ``vocab`` in embedding and head if given."""
    total = target.config.num_hidden_layers
    if not 0 < num_layers <= total:
        raise ValueError(f"target_layers needs 1..{total} layers of the target, got {num_layers}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = num_layers
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:num_layers]
    draft = type(target)(_with_vocab(config, vocab)).to(target.dtype)
    source = target.state_dict()
    rows = None if vocab is None else vocab.draft_to_target.to(target.device)
    token_rows = _token_row_keys(draft)
    state = {
        key: (source[key][rows] if rows is not None and key in token_rows else source[key]).clone()
        for key in draft.state_dict()
    }
    draft.load_state_dict(state, strict=True)
    return draft


def init_draft(
    kind: str,
    draft_config: PretrainedConfig,
    target: PreTrainedModel,
    vocab: DraftVocab | None = None,
    seed: int = 0,
) -> PreTrainedModel:
    """Dispatch on ``model.draft_init``; ``target_layers`` takes ``draft_config.num_hidden_layers`` layers
    of the target (the rest of ``draft_config`` does not apply: the draft has the target's width)."""
    kind = str(getattr(kind, "value", kind))
    if kind == "random":
        return random_draft(draft_config, vocab, seed)
    if kind == "target_embedding":
        return target_embedding(draft_config, target, vocab, seed)
    if kind == "target_layers":
        return target_layers(target, draft_config.num_hidden_layers, vocab)
    raise ValueError(f"unknown draft initialisation {kind!r}; expected one of {DRAFT_INITS}")
