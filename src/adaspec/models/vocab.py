"""Draft/target vocabulary compatibility.

Distillation compares the target's and the draft's next-token distributions position by position, and
speculative decoding feeds the draft's token ids to the target: both only make sense when the two
models share one tokenizer. `vocabulary_mismatch` compares two tokenizers by size, special tokens and
the token strings of a sample of ids; `check_pretrained_vocabularies` runs it on a pretrained pair
before any model is loaded, `check_artefact_vocabularies` on the saved artefacts a stage trains from.

A draft with a reduced vocabulary (model.draft_vocab_size, `adaspec.models.draft_vocab`) still saves the
target's tokenizer; its `draft_vocab.json` must map into the target's vocabulary (`check_draft_vocab_maps`).
`adaspec.drafts.load_draft` loads a saved draft with that map.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase

from adaspec.artefacts import paths
from adaspec.errors import UserError
from adaspec.models.build import pretrained_tokenizer
from adaspec.models.draft_vocab import DraftVocab, load_draft_vocab
from adaspec.models.fetch import resolve_pretrained
from adaspec.training.stage_specs import STAGES, Data

SPECIAL = ("pad_token", "eos_token", "bos_token", "unk_token")


def sample_ids(n: int, size: int = 512, tail: int = 64) -> list[int]:
    """Evenly spaced ids over [0, n) plus the last `tail` ids (where added tokens live)."""
    step = max(1, n // size)
    return sorted(set(range(0, n, step)) | set(range(max(0, n - tail), n)))


def vocabulary_mismatch(
    a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase, sample: int = 512
) -> str | None:
    """Why `a` and `b` cannot serve one target/draft pair, or None when they agree."""
    if len(a) != len(b):
        return f"{len(a)} tokens vs {len(b)} tokens"
    for name in SPECIAL:
        left = (getattr(a, name), getattr(a, f"{name}_id"))
        right = (getattr(b, name), getattr(b, f"{name}_id"))
        if left != right:
            return f"{name} {left[0]!r} (id {left[1]}) vs {right[0]!r} (id {right[1]})"
    ids = sorted(set(sample_ids(len(a), sample)) | set(a.all_special_ids) | set(b.all_special_ids))
    for i, x, y in zip(ids, a.convert_ids_to_tokens(ids), b.convert_ids_to_tokens(ids), strict=True):
        if x != y:
            return f"token id {i} is {x!r} vs {y!r}"
    return None


def check_pretrained_vocabularies(target_path: str, draft_path: str) -> None:
    """A UserError when the pretrained draft cannot draft for the pretrained target (tokenizers only)."""

    target, _ = pretrained_tokenizer(target_path)
    draft, _ = pretrained_tokenizer(draft_path)
    why = vocabulary_mismatch(target, draft)
    if why is not None:
        raise UserError(
            f"the draft model.draft_path={draft_path} and the target model.target_path={target_path} have "
            f"incompatible vocabularies ({why}); a draft must share its target's tokenizer: pick a pair of one "
            f"family (model=pythia, model=codegen_phi2) or a draft trained with the target's tokenizer"
        )


def check_artefact_vocabularies(folders: dict[str, Path], stage: str) -> None:
    """A UserError when the saved artefacts a stage trains from do not share one tokenizer."""
    names = list(folders)
    loaded = {name: AutoTokenizer.from_pretrained(str(folders[name])) for name in names}
    first = names[0]
    for name in names[1:]:
        why = vocabulary_mismatch(loaded[first], loaded[name])
        if why is not None:
            raise UserError(
                f"stage {stage} refuses to start: the {first} artefact {folders[first]} and the {name} artefact "
                f"{folders[name]} have different tokenizers ({why}). Rebuild the stale one from the current target: "
                f"delete {folders[name]} (draft_init is recreated from the target's tokenizer) and retrain the "
                f"stages after it with overwrite=true"
            )


def check_draft_vocab_maps(folders: dict[str, Path], stage: str) -> None:
    """A UserError when a reduced draft's id map (`draft_vocab.json` in a draft artefact of `folders`) does
    not map into the target artefact's vocabulary, or the reference's map is not its initialisation's."""
    target_size = AutoConfig.from_pretrained(str(folders["target"])).vocab_size
    maps = {name: load_draft_vocab(folder) for name, folder in folders.items() if name != "target"}
    for name, vocab in maps.items():
        if vocab is not None and vocab.target_size != target_size:
            raise UserError(
                f"stage {stage} refuses to start: the {name} artefact {folders[name]} has a draft vocabulary over "
                f"{vocab.target_size} target tokens, but the target {folders['target']} has {target_size}. "
                f"Delete {folders[name]} (draft_init is rebuilt from the current target) and retrain the stages "
                f"after it with overwrite=true"
            )
    if "draft_init" in maps and "ref" in maps and not same_map(maps["draft_init"], maps["ref"]):
        raise UserError(
            f"stage {stage} refuses to start: the reference {folders['ref']} and the draft initialisation "
            f"{folders['draft_init']} have different draft vocabularies; retrain the reference (`make stage2` "
            f"with overwrite=true)"
        )


def same_map(a: DraftVocab | None, b: DraftVocab | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.target_size == b.target_size and torch.equal(a.draft_to_target, b.draft_to_target)


def check_stage_vocabularies(layout: paths.Layout, model, models_dir: str, pretrain) -> None:
    """Before `layout`'s stage loads any model: a pretrained pair (`model`, found under `models_dir`) must share
    a vocabulary (checked while its draft initialisation is still to be made), the artefacts a stage trains
    from must share one tokenizer, and a reduced draft's id map must map into the target's vocabulary."""

    stage = STAGES[layout.stage]
    init = paths.final(layout.draft_init_dir())
    pretrained_pair = model.source == "pretrained" and model.draft_path
    if pretrained_pair and (stage.name == "target" or not (init / "meta.json").is_file()):
        check_pretrained_vocabularies(
            str(resolve_pretrained(model.target_path, models_dir)),
            str(resolve_pretrained(model.draft_path, models_dir)),
        )
    if stage.data != Data.training:  # stages 0 and 1 train from no draft
        return
    folders = {name: paths.final(STAGES[name].folder(layout)) for name in (*stage.needs(pretrain), "draft_init")}
    if not (init / "meta.json").is_file():  # stage 2 makes it after this check
        folders.pop("draft_init")
    check_artefact_vocabularies(folders, stage.name)
    check_draft_vocab_maps(folders, stage.name)
