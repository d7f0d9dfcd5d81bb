"""The weights the reference and every stage-3 draft of a seed start from, saved once as an artefact."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig
from transformers import PreTrainedTokenizerBase

from adaspec import paths
from adaspec.artefact_rules import require_artefact
from adaspec.artefacts import save_artefact, verify_weights
from adaspec.data.tokenizer import padded_vocab_size
from adaspec.distributed import is_global_zero, wait_for
from adaspec.errors import UserError
from adaspec.models.build import load_model, pretrained_tokenizer, resize_embeddings, scratch_model
from adaspec.models.vocab import vocabulary_mismatch
from adaspec.pretrain import uses_pretrain


def ensure_draft_init(cfg: DictConfig, tokenizer: PreTrainedTokenizerBase) -> Path:
    """The draft initialisation's `final/` folder, made on first use by global rank zero (other ranks wait
    for it). From scratch, from stage 0's draft, or the pretrained draft (model.draft_path) with its
    embeddings resized to the target's tokenizer, saved with that tokenizer."""
    folder = paths.final(paths.draft_init_dir(cfg))
    if (folder / "meta.json").is_file():
        verify_weights(folder, f"`make stage2 seed={cfg.seed}` (after deleting {folder})")
        return folder
    if not is_global_zero():
        wait_for(folder / "meta.json", "the draft initialisation")
        return folder
    upstream: dict[str, str] = {}
    if cfg.model.source == "pretrained":
        own, n_added = pretrained_tokenizer(cfg.model.draft_path)
        why = vocabulary_mismatch(tokenizer, own)
        if why is not None:
            raise UserError(
                f"the draft model.draft_path={cfg.model.draft_path} does not share the target's tokenizer "
                f"{paths.final(paths.target_dir(cfg))} ({why}); use a draft of the target's family"
            )
        model = resize_embeddings(
            load_model(cfg.model.draft_path, cfg.model.attn_implementation), tokenizer, n_added
        )
    elif uses_pretrain(cfg):  # stage 0's draft for this seed
        meta = require_artefact(
            paths.pretrain_draft_dir(cfg), "pretrain_draft", cfg.stage.name, cfg, " pretrain=stdlib"
        )
        model = load_model(paths.final(paths.pretrain_draft_dir(cfg)), cfg.model.attn_implementation)
        upstream = {"pretrain_draft": meta["weights"]}
    else:
        model = scratch_model(
            cfg.model.draft,
            vocab_size=padded_vocab_size(tokenizer),
            max_positions=cfg.model.max_position_embeddings,
            seed=cfg.seed,
            tokenizer=tokenizer,
        )
    save_artefact(
        folder, model=model, tokenizer=tokenizer, cfg=cfg, stage="draft_init", metrics={}, upstream=upstream
    )
    return folder
