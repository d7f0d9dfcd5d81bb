"""Which tokenizer a stage uses: the stage that makes it trains it (or takes a pretrained model's);
every later stage reads it from that artefact."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from adaspec.artefacts import paths
from adaspec.data.example import Example
from adaspec.data.tokenizer import frequent_dotted_names, train_bpe_tokenizer
from adaspec.models.build import pretrained_tokenizer
from adaspec.models.fetch import resolve_pretrained
from adaspec.stages.stage_run import StageRun
from adaspec.training.stage_specs import STAGES


def training_texts(examples: list[Example]) -> list[str]:
    """The text a from-scratch tokenizer is trained on: each example's prompt and answer."""
    return [e.prompt + e.target for e in examples]


def tokenizer_home(layout: paths.Layout, pretrain: DictConfig | None) -> Path | None:
    """The artefact whose tokenizer `layout`'s stage uses: the first it trains from (the target, or stage 0's
    target); None for a stage that trains from none, which makes the tokenizer (stage 1, or stage 0 with
    pretrain=stdlib)."""
    needs = STAGES[layout.stage].needs(pretrain)
    return paths.final(STAGES[needs[0]].folder(layout)) if needs else None


def load_tokenizer(
    run: StageRun, splits: dict[str, list[Example]], corpus: list[str] = ()
) -> PreTrainedTokenizerBase:
    """Stage 1 (stage 0 with pretrain=stdlib) trains the tokenizer, on the task's training text and stage
    0's `corpus`, or loads a pretrained model's; later stages read it from that artefact."""
    home = tokenizer_home(run.layout, run.pretrain)
    if home is not None:
        return AutoTokenizer.from_pretrained(str(home))
    if run.model.source == "pretrained":  # with a pad token added if it had none
        return pretrained_tokenizer(resolve_pretrained(run.model.target_path, run.models_dir))[0]
    texts = training_texts(splits["train"]) + list(corpus)
    api_names = frequent_dotted_names([e.target for e in splits["train"]], run.task.domain.api_vocab_size)
    return train_bpe_tokenizer(texts, run.task.vocab_size, added_tokens=api_names)
