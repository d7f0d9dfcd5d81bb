"""The weights the reference and every stage-3 draft of a seed start from, saved once as an artefact.

A draft built from `model.draft` starts as `model.draft_init` says (random, or from the target artefact:
`adaspec.models.init_from_target`). With `model.draft_vocab_size` > 0 its embedding and head keep only the rows of
the most frequent target tokens of the training split; the id map is saved as `draft_vocab.json` beside
the weights, and every reference and draft trained from it carries it on (`adaspec.drafts.load_draft`).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig
from transformers import AutoConfig, PreTrainedModel, PreTrainedTokenizerBase

from adaspec.artefacts import paths
from adaspec.artefacts.rules import require_artefact
from adaspec.artefacts.store import read_meta, read_metrics, save_artefact, verify_weights
from adaspec.data.datamodule import encode_all
from adaspec.data.tasks import load_task
from adaspec.data.tokenizer import padded_vocab_size
from adaspec.drafts import ModelDraft, TrainedDraft, load_draft, trained_kind
from adaspec.errors import UserError
from adaspec.models.build import load_model, n_params, pretrained_tokenizer, resize_embeddings, scratch_model
from adaspec.models.draft_vocab import DraftVocab, build_draft_vocab, shrink_to_draft_vocab
from adaspec.models.fetch import resolve_pretrained
from adaspec.models.init_from_target import init_draft
from adaspec.models.vocab import vocabulary_mismatch
from adaspec.training.distributed import is_global_zero, wait_for
from adaspec.training.stage_specs import uses_pretrain


def ensure_draft_init(cfg: DictConfig, tokenizer: PreTrainedTokenizerBase) -> Path:
    """The draft initialisation's `final/` folder, made on first use by global rank zero (other ranks wait
    for it). From a pretrained draft (model.draft_path, embeddings resized to the target's tokenizer), from
    stage 0's draft, or built from `model.draft` and initialised by `model.draft_init`; its vocabulary
    reduced when `model.draft_vocab_size` > 0. Saved with the target's tokenizer."""
    folder = paths.final(paths.draft_init_dir(cfg))
    if (folder / "meta.json").is_file():
        verify_weights(folder, f"`make stage2 seed={cfg.seed}` (after deleting {folder})")
        check_init_settings(cfg, folder)
        check_init_source(cfg, folder)
        return folder
    if not is_global_zero():
        wait_for(folder / "meta.json", "the draft initialisation")
        return folder
    model, upstream = initial_draft(cfg, tokenizer)
    save_artefact(
        folder,
        model=model,
        tokenizer=tokenizer,
        cfg=cfg,
        stage="draft_init",
        metrics={**init_settings(cfg), "parameters": n_params(model.model)},
        upstream=upstream,
    )
    return folder


def init_settings(cfg: DictConfig) -> dict[str, str | int]:
    """What decides a draft initialisation besides model.draft (recorded in its metrics.json)."""
    return {"draft_init": str(cfg.model.draft_init), "draft_vocab_size": int(cfg.model.draft_vocab_size),
            "draft_kind": str(cfg.model.draft_kind), "head_output_init": str(cfg.model.head_output_init)}


def check_init_source(cfg: DictConfig, folder: Path) -> None:
    """A UserError when the saved initialisation did not come from this run's stage 0 (another stage-0 draft,
    or none where stage 0 runs, or one where it does not): stage 0's folder is the same either way."""
    made_from = read_meta(folder)["upstream"].get("pretrain_draft")
    stage0 = paths.final(paths.pretrain_draft_dir(cfg))
    wanted = read_meta(stage0)["weights"] if uses_pretrain(cfg) and (stage0 / "meta.json").is_file() else None
    if made_from != wanted:
        made = f"stage 0's draft {made_from}" if made_from else "no stage 0"
        now = f"stage 0's draft {stage0} ({wanted})" if wanted else "no stage 0 (pretrain=none)"
        raise UserError(
            f"the draft initialisation {folder} was made from {made}, this run starts from {now}: use another "
            f"paths.root for one of them, or delete {folder.parent} (it is rebuilt) and retrain the reference and "
            f"drafts with overwrite=true"
        )


def check_init_settings(cfg: DictConfig, folder: Path) -> None:
    """A UserError when the saved initialisation was made with another model.draft_init or draft_vocab_size
    (earlier artefacts without the record were made with the defaults)."""
    recorded = read_metrics(folder)
    for key, wanted in init_settings(cfg).items():
        made = recorded.get(key, {"draft_init": "random", "draft_vocab_size": 0, "draft_kind": "model",
                                  "head_output_init": "random"}[key])
        if made != wanted:
            raise UserError(
                f"the draft initialisation {folder} was made with model.{key}={made}, not {wanted}: delete "
                f"{folder.parent} (it is rebuilt) and retrain the reference and drafts with overwrite=true, or "
                f"keep model.{key}={made}"
            )


def initial_draft(
    cfg: DictConfig, tokenizer: PreTrainedTokenizerBase, from_stage0: bool = True
) -> tuple[TrainedDraft, dict[str, str]]:
    """(the initial draft, with its id map when its vocabulary is reduced, upstream hashes).
    `from_stage0`: stage 0's draft when stage 0 runs (False: what stage 0 itself starts from)."""
    reduce = cfg.model.draft_vocab_size > 0
    kind = trained_kind(cfg.model.draft_kind)
    if kind.starts_from_target:
        return kind_from_target(kind, cfg, tokenizer)
    if cfg.model.source == "pretrained" and cfg.model.draft_path:
        model, upstream = pretrained_draft(cfg, tokenizer), {}
    elif from_stage0 and uses_pretrain(cfg):  # stage 0's draft for this seed
        group = "stdlib" if cfg.pretrain.objective == "lm" else "distill"
        meta = require_artefact(
            paths.pretrain_draft_dir(cfg), "pretrain_draft", cfg.stage.name, cfg, f" pretrain={group}"
        )
        draft = load_draft(paths.final(paths.pretrain_draft_dir(cfg)), cfg.model.attn_implementation)
        upstream = {"pretrain_draft": meta["weights"]}
        if draft.vocab is not None:  # a distilling stage 0 trained the reduced draft already
            return draft, upstream
        model = draft.model
    elif cfg.model.draft_init == "random" and not reduce:  # as before the options existed: same weights
        model, upstream = scratch_draft(cfg, tokenizer, padded_vocab_size(tokenizer)), {}
    else:
        return draft_from_target(cfg, tokenizer)
    vocab = training_vocab(cfg, tokenizer, target_vocab_size(cfg)) if reduce else None
    if vocab is not None:
        shrink_to_draft_vocab(model, vocab)
    return ModelDraft(model, vocab), upstream


def pretrained_draft(cfg: DictConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """model.draft_path with its embeddings resized to the target's tokenizer; refused unless it shares it."""
    source = resolve_pretrained(cfg.model.draft_path, cfg.paths.models)
    own, n_added = pretrained_tokenizer(source)
    why = vocabulary_mismatch(tokenizer, own)
    if why is not None:
        raise UserError(
            f"the draft model.draft_path={cfg.model.draft_path} does not share the target's tokenizer "
            f"{paths.final(paths.target_dir(cfg))} ({why}); use a draft of the target's family"
        )
    return resize_embeddings(load_model(source, cfg.model.attn_implementation), tokenizer, n_added)


def scratch_draft(cfg: DictConfig, tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> PreTrainedModel:
    return scratch_model(
        cfg.model.draft,
        vocab_size=vocab_size,
        max_positions=cfg.model.max_position_embeddings,
        seed=cfg.seed,
        tokenizer=tokenizer,
    )


def target_vocab_size(cfg: DictConfig) -> int:
    """The target artefact's logit width: what a draft vocabulary's ids index."""
    return AutoConfig.from_pretrained(str(paths.final(paths.target_dir(cfg)))).vocab_size


def training_vocab(cfg: DictConfig, tokenizer: PreTrainedTokenizerBase, target_size: int) -> DraftVocab:
    """The model.draft_vocab_size most frequent target tokens of the training split as the stages encode it
    (prompt, template and answer tokens), with every special token."""
    train = load_task(cfg.task)["train"]
    encoded = encode_all(tokenizer, train, cfg.task.max_length, prompt_format=cfg.task.prompt_format)
    return build_draft_vocab((e.input_ids for e in encoded), tokenizer, cfg.model.draft_vocab_size, target_size)


def kind_from_target(kind: type[TrainedDraft], cfg: DictConfig, tokenizer: PreTrainedTokenizerBase
                     ) -> tuple[TrainedDraft, dict[str, str]]:
    """A draft of a kind built from the target artefact alone (an EAGLE-3 head: `kind.from_target`), its output
    over the model.draft_vocab_size most frequent training tokens (0: the target's vocabulary)."""
    target_folder = paths.final(paths.target_dir(cfg))
    target = load_model(target_folder, cfg.model.attn_implementation).eval()
    size = target.config.vocab_size
    vocab = training_vocab(cfg, tokenizer, size) if cfg.model.draft_vocab_size > 0 else None
    return kind.from_target(cfg, target, vocab), {"target": read_meta(target_folder)["weights"]}


def draft_from_target(
    cfg: DictConfig, tokenizer: PreTrainedTokenizerBase
) -> tuple[ModelDraft, dict[str, str]]:
    """A draft of `model.draft`'s shape (at the target's vocabulary, reduced with model.draft_vocab_size)
    initialised by `model.draft_init` from the target artefact."""
    target_folder = paths.final(paths.target_dir(cfg))
    kind = str(cfg.model.draft_init)
    target = None if kind == "random" else load_model(target_folder, cfg.model.attn_implementation).eval()
    size = target_vocab_size(cfg) if target is None else target.config.vocab_size
    vocab = training_vocab(cfg, tokenizer, size) if cfg.model.draft_vocab_size > 0 else None
    config = scratch_draft(cfg, tokenizer, size).config  # the architecture at the target's vocabulary
    model = init_draft(kind, config, target, vocab, seed=cfg.seed)
    return ModelDraft(model, vocab), {"target": read_meta(target_folder)["weights"]}
