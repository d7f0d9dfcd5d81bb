"""The weights the reference and every stage-3 draft of a seed start from, saved once as an artefact.

A draft built from `model.draft` starts as `model.draft_init` says (random, or from the target artefact:
`adaspec.models.init_from_target`). With `model.draft_vocab_size` > 0 its embedding and head keep only the rows of
the most frequent target tokens of the training split; the id map is saved as `draft_vocab.json` beside
the weights, and every reference and draft trained from it carries it on (`adaspec.drafts.load_draft`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig
from transformers import AutoConfig, PreTrainedModel, PreTrainedTokenizerBase

from adaspec.artefacts import paths
from adaspec.artefacts.rules import require_artefact
from adaspec.artefacts.store import Provenance, read_meta, read_metrics, save_artefact, verify_weights
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


@dataclass(frozen=True)
class InitSpec:
    """What a draft initialisation is made from: the model config (model.draft, model.draft_init, ...), the task
    (whose training text a reduced vocabulary counts), stage 0's config (None: no stage 0), where the run's
    artefacts and the pretrained models are, and the seed."""

    model: DictConfig
    task: DictConfig
    pretrain: DictConfig | None
    layout: paths.Layout
    models_dir: str
    seed: int


def ensure_draft_init(spec: InitSpec, tokenizer: PreTrainedTokenizerBase, made_by: Provenance) -> Path:
    """The draft initialisation's `final/` folder, made on first use by global rank zero (other ranks wait
    for it). From a pretrained draft (model.draft_path, embeddings resized to the target's tokenizer), from
    stage 0's draft, or built from `model.draft` and initialised by `model.draft_init`; its vocabulary
    reduced when `model.draft_vocab_size` > 0. Saved with the target's tokenizer, recording `made_by`."""
    folder = paths.final(spec.layout.draft_init_dir())
    if (folder / "meta.json").is_file():
        verify_weights(folder, f"`make stage2 seed={spec.seed}` (after deleting {folder})")
        check_init_settings(spec.model, folder)
        check_init_source(spec, folder)
        return folder
    if not is_global_zero():
        wait_for(folder / "meta.json", "the draft initialisation")
        return folder
    model, upstream = initial_draft(spec, tokenizer)
    save_artefact(
        folder,
        model=model,
        tokenizer=tokenizer,
        made_by=made_by,
        metrics={**init_settings(spec.model), "parameters": n_params(model.model)},
        upstream=upstream,
    )
    return folder


def init_settings(model: DictConfig) -> dict[str, str | int]:
    """What decides a draft initialisation besides model.draft (recorded in its metrics.json)."""
    return {"draft_init": str(model.draft_init), "draft_vocab_size": int(model.draft_vocab_size),
            "draft_kind": str(model.draft_kind), "head_output_init": str(model.head_output_init)}


def check_init_source(spec: InitSpec, folder: Path) -> None:
    """A UserError when the saved initialisation did not come from this run's stage 0 (another stage-0 draft,
    or none where stage 0 runs, or one where it does not): stage 0's folder is the same either way."""
    made_from = read_meta(folder)["upstream"].get("pretrain_draft")
    stage0 = paths.final(spec.layout.pretrain_draft_dir())
    ran = uses_pretrain(spec.pretrain) and (stage0 / "meta.json").is_file()
    wanted = read_meta(stage0)["weights"] if ran else None
    if made_from != wanted:
        made = f"stage 0's draft {made_from}" if made_from else "no stage 0"
        now = f"stage 0's draft {stage0} ({wanted})" if wanted else "no stage 0 (pretrain=none)"
        raise UserError(
            f"the draft initialisation {folder} was made from {made}, this run starts from {now}: use another "
            f"paths.root for one of them, or delete {folder.parent} (it is rebuilt) and retrain the reference and "
            f"drafts with overwrite=true"
        )


def check_init_settings(model: DictConfig, folder: Path) -> None:
    """A UserError when the saved initialisation was made with another model.draft_init or draft_vocab_size
    (earlier artefacts without the record were made with the defaults)."""
    recorded = read_metrics(folder)
    for key, wanted in init_settings(model).items():
        made = recorded.get(key, {"draft_init": "random", "draft_vocab_size": 0, "draft_kind": "model",
                                  "head_output_init": "random"}[key])
        if made != wanted:
            raise UserError(
                f"the draft initialisation {folder} was made with model.{key}={made}, not {wanted}: delete "
                f"{folder.parent} (it is rebuilt) and retrain the reference and drafts with overwrite=true, or "
                f"keep model.{key}={made}"
            )


def initial_draft(
    spec: InitSpec, tokenizer: PreTrainedTokenizerBase, from_stage0: bool = True
) -> tuple[TrainedDraft, dict[str, str]]:
    """(the initial draft, with its id map when its vocabulary is reduced, upstream hashes).
    `from_stage0`: stage 0's draft when stage 0 runs (False: what stage 0 itself starts from)."""
    model_cfg = spec.model
    reduce = model_cfg.draft_vocab_size > 0
    kind = trained_kind(model_cfg.draft_kind)
    if kind.starts_from_target:
        return kind_from_target(kind, spec, tokenizer)
    if model_cfg.source == "pretrained" and model_cfg.draft_path:
        model, upstream = pretrained_draft(spec, tokenizer), {}
    elif from_stage0 and uses_pretrain(spec.pretrain):  # stage 0's draft for this seed
        group = "stdlib" if spec.pretrain.objective == "lm" else "distill"
        stage0 = spec.layout.pretrain_draft_dir()
        meta = require_artefact(stage0, "pretrain_draft", spec.layout.stage, spec.layout, f" pretrain={group}")
        draft = load_draft(paths.final(stage0), model_cfg.attn_implementation)
        upstream = {"pretrain_draft": meta["weights"]}
        if draft.vocab is not None:  # a distilling stage 0 trained the reduced draft already
            return draft, upstream
        model = draft.model
    elif model_cfg.draft_init == "random" and not reduce:  # as before the options existed: same weights
        model, upstream = scratch_draft(spec, tokenizer, padded_vocab_size(tokenizer)), {}
    else:
        return draft_from_target(spec, tokenizer)
    vocab = training_vocab(spec, tokenizer, target_vocab_size(spec.layout)) if reduce else None
    if vocab is not None:
        shrink_to_draft_vocab(model, vocab)
    return ModelDraft(model, vocab), upstream


def pretrained_draft(spec: InitSpec, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """model.draft_path with its embeddings resized to the target's tokenizer; refused unless it shares it."""
    source = resolve_pretrained(spec.model.draft_path, spec.models_dir)
    own, n_added = pretrained_tokenizer(source)
    why = vocabulary_mismatch(tokenizer, own)
    if why is not None:
        raise UserError(
            f"the draft model.draft_path={spec.model.draft_path} does not share the target's tokenizer "
            f"{paths.final(spec.layout.target_dir())} ({why}); use a draft of the target's family"
        )
    return resize_embeddings(load_model(source, spec.model.attn_implementation), tokenizer, n_added)


def scratch_draft(spec: InitSpec, tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> PreTrainedModel:
    return scratch_model(
        spec.model.draft,
        vocab_size=vocab_size,
        max_positions=spec.model.max_position_embeddings,
        seed=spec.seed,
        tokenizer=tokenizer,
    )


def target_vocab_size(layout: paths.Layout) -> int:
    """The target artefact's logit width: what a draft vocabulary's ids index."""
    return AutoConfig.from_pretrained(str(paths.final(layout.target_dir()))).vocab_size


def training_vocab(spec: InitSpec, tokenizer: PreTrainedTokenizerBase, target_size: int) -> DraftVocab:
    """The model.draft_vocab_size most frequent target tokens of the training split as the stages encode it
    (prompt, template and answer tokens), with every special token."""
    task = spec.task
    train = load_task(task)["train"]
    encoded = encode_all(tokenizer, train, task.max_length, prompt_format=task.prompt_format)
    return build_draft_vocab((e.input_ids for e in encoded), tokenizer, spec.model.draft_vocab_size, target_size)


def kind_from_target(kind: type[TrainedDraft], spec: InitSpec, tokenizer: PreTrainedTokenizerBase
                     ) -> tuple[TrainedDraft, dict[str, str]]:
    """A draft of a kind built from the target artefact alone (an EAGLE-3 head: `kind.from_target`), its output
    over the model.draft_vocab_size most frequent training tokens (0: the target's vocabulary)."""
    target_folder = paths.final(spec.layout.target_dir())
    target = load_model(target_folder, spec.model.attn_implementation).eval()
    size = target.config.vocab_size
    vocab = training_vocab(spec, tokenizer, size) if spec.model.draft_vocab_size > 0 else None
    return kind.from_target(spec.model, spec.seed, target, vocab), {"target": read_meta(target_folder)["weights"]}


def draft_from_target(spec: InitSpec, tokenizer: PreTrainedTokenizerBase) -> tuple[ModelDraft, dict[str, str]]:
    """A draft of `model.draft`'s shape (at the target's vocabulary, reduced with model.draft_vocab_size)
    initialised by `model.draft_init` from the target artefact."""
    target_folder = paths.final(spec.layout.target_dir())
    kind = str(spec.model.draft_init)
    target = None if kind == "random" else load_model(target_folder, spec.model.attn_implementation).eval()
    size = target_vocab_size(spec.layout) if target is None else target.config.vocab_size
    vocab = training_vocab(spec, tokenizer, size) if spec.model.draft_vocab_size > 0 else None
    config = scratch_draft(spec, tokenizer, size).config  # the architecture at the target's vocabulary
    model = init_draft(kind, config, target, vocab, seed=spec.seed)
    return ModelDraft(model, vocab), {"target": read_meta(target_folder)["weights"]}
