"""Pretrained presets (model=pythia, model=codegen_phi2) on tiny models of the same architectures.

Nothing is downloaded: each architecture is built at a tiny size from its config class (GPTNeoXConfig,
CodeGenConfig, PhiConfig), saved with a byte-level BPE tokenizer that, like Pythia's and CodeGen's, has
no pad token, and the preset's model.target_path / model.draft_path point at those folders.
"""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    CodeGenConfig,
    GPTNeoXConfig,
    PhiConfig,
    PreTrainedTokenizerFast,
)

from adaspec.artefacts import paths
from adaspec.data.tasks import load_task
from adaspec.errors import UserError
from adaspec.stages.tokenizer_source import training_texts
from adaspec.training.pipeline import run_stage
from tests.conftest import compose_config

EOS = "<|endoftext|>"


def pretrained_style_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """bos = eos = unk = <|endoftext|> and no pad token, as the Pythia and CodeGen tokenizers."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=EOS)


@pytest.fixture(scope="module")
def texts():
    return training_texts(load_task(compose_config("task.arith.n_train=64").task)["train"])


def save_tiny(folder, config, tokenizer):
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def gpt_neox(vocab: int, hidden: int, layers: int) -> GPTNeoXConfig:
    return GPTNeoXConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                         intermediate_size=2 * hidden, max_position_embeddings=256, tie_word_embeddings=False,
                         eos_token_id=0, bos_token_id=0)


PAIRS = {
    # preset: (target config, draft config); vocabularies padded past the tokenizer, as the real models are
    "pythia": (gpt_neox(448, 32, 2), gpt_neox(448, 16, 1)),
    "codegen_phi2": (
        PhiConfig(vocab_size=448, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  max_position_embeddings=256, eos_token_id=0, bos_token_id=0),
        CodeGenConfig(vocab_size=448, n_embd=16, n_layer=1, n_head=2, rotary_dim=4, n_positions=256, n_ctx=256,
                      eos_token_id=0, bos_token_id=0, tie_word_embeddings=False),
    ),
}


@pytest.fixture
def pretrained_pair(tiny_cfg, tmp_path, texts):
    def make(preset: str, draft_tokenizer: PreTrainedTokenizerFast | None = None):
        tokenizer = pretrained_style_tokenizer(texts, 400)
        target_config, draft_config = PAIRS[preset]
        target = save_tiny(tmp_path / "hub" / "target", target_config, tokenizer)
        draft = save_tiny(tmp_path / "hub" / "draft", draft_config, draft_tokenizer or tokenizer)
        return lambda *o: tiny_cfg(f"model={preset}", f"model.target_path={target}", f"model.draft_path={draft}",
                                   "stage.max_steps=2", "stage.monitor_prompts=2", *o)

    return make


@pytest.mark.parametrize("preset, stages", [("pythia", ("target", "ref", "draft")), ("codegen_phi2", ("target", "ref"))])
def test_pretrained_preset_trains_from_local_folders(pretrained_pair, preset, stages):
    cfg = pretrained_pair(preset)
    finals = {stage: run_stage(cfg(f"stage={stage}")) for stage in stages}
    tokenizer = AutoTokenizer.from_pretrained(str(finals["target"]))
    assert tokenizer.pad_token == "[PAD]" and tokenizer.pad_token_id == len(tokenizer) - 1 == 400  # added
    init = paths.final(paths.of(cfg()).draft_init_dir())
    source = AutoModelForCausalLM.from_pretrained(cfg().model.draft_path)
    for folder in [*finals.values(), init]:
        m = AutoModelForCausalLM.from_pretrained(str(folder))
        # all three models resized to the same vocabulary, the tokenizer's (as the official code does)
        assert m.config.vocab_size == len(tokenizer) and m.config.pad_token_id == tokenizer.pad_token_id
        assert (folder / "tokenizer.json").read_text() == (finals["target"] / "tokenizer.json").read_text()
    init_model = AutoModelForCausalLM.from_pretrained(str(init))
    old, new = source.get_input_embeddings().weight, init_model.get_input_embeddings().weight
    assert torch.equal(new[:400], old[:400])  # the pretrained draft's rows kept ...
    torch.testing.assert_close(new[400], old[:400].mean(0))  # ... the pad row is their mean
    assert type(init_model).__name__ == type(source).__name__


def test_a_draft_with_another_vocabulary_is_refused_before_training(pretrained_pair, texts):
    cfg = pretrained_pair("pythia", draft_tokenizer=pretrained_style_tokenizer(texts, 420))
    with pytest.raises(UserError, match=r"model.draft_path=.* incompatible vocabularies \(401 tokens vs 421 tokens\)"):
        run_stage(cfg("stage=target"))
    assert not paths.of(cfg()).target_dir().exists()


def test_a_draft_with_the_same_size_but_other_tokens_is_refused(pretrained_pair, texts):
    other = pretrained_style_tokenizer([t[::-1] for t in texts], 400)  # same size, other merges
    cfg = pretrained_pair("pythia", draft_tokenizer=other)
    with pytest.raises(UserError, match=r"incompatible vocabularies \(token id \d+ is .* vs .*\)"):
        run_stage(cfg("stage=target"))
