"""model=smollm2: composition (chat prompts, the target under paths.models, a Llama draft) and the target
path resolving offline to an already converted folder."""

from __future__ import annotations

import pytest

from adaspec.models.build import n_params, scratch_model
from adaspec.models.fetch import SMOLLM2, resolve_pretrained
from adaspec.models.gguf import convert_gguf
from tests.conftest import compose_config
from tests.models.tiny_gguf import chat_tokenizer, tiny_llama, write_tiny_gguf


@pytest.mark.parametrize("task", ["gsm8k", "mbpp"])
def test_smollm2_prompts_in_chat_and_reads_its_target_from_paths_models(task, tmp_path):
    cfg = compose_config("model=smollm2", f"task={task}", f"paths.models={tmp_path}")
    assert cfg.task.prompt_format == "chat"
    assert cfg.model.source == "pretrained" and cfg.model.target_path == f"{tmp_path}/{SMOLLM2.name}"
    assert cfg.model.draft.architecture == "llama"
    assert compose_config("model=smollm2", "task.prompt_format=plain").task.prompt_format == "plain"


@pytest.mark.parametrize("model", ["tiny", "small", "pythia"])
def test_other_presets_keep_plain_prompts(model):
    assert compose_config(f"model={model}", "task=gsm8k").task.prompt_format == "plain"


def test_paths_models_follows_adaspec_models(monkeypatch, tmp_path):
    monkeypatch.delenv("ADASPEC_MODELS", raising=False)
    assert compose_config().paths.models == "models"
    monkeypatch.setenv("ADASPEC_MODELS", str(tmp_path))
    assert compose_config("model=smollm2").model.target_path == f"{tmp_path}/{SMOLLM2.name}"


def test_the_preset_draft_is_the_7_1m_llama():
    draft = compose_config("model=smollm2").model.draft
    tokenizer = chat_tokenizer()
    model = scratch_model(draft, vocab_size=49152, max_positions=2048, seed=0, tokenizer=tokenizer)
    assert model.config.model_type == "llama" and n_params(model) == 7_144_576


def test_a_converted_target_in_paths_models_is_used_without_fetching(tmp_path):
    tokenizer = chat_tokenizer()
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", tokenizer, tiny_llama(len(tokenizer)))
    cfg = compose_config("model=smollm2", f"paths.models={tmp_path / 'models'}")
    convert_gguf(gguf, tmp_path / "models" / SMOLLM2.name)
    assert resolve_pretrained(cfg.model.target_path, cfg.paths.models) == tmp_path / "models" / SMOLLM2.name
    assert not (tmp_path / "models" / "downloads").exists()  # nothing was downloaded
