"""Issue 48 (1): no model the project loads asks the Hugging Face Hub for kernels. transformers >= 5 kernelizes
every `from_pretrained` with Hub kernels unless `USE_HUB_KERNELS` says no (`model.use_kernels` records it);
importing `adaspec` says no. Each load path runs in a fresh process whose environment does not set it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from adaspec.models.eagle3 import Eagle3Config, Eagle3Head
from tests.conftest import REPO

LOADS = {
    "target (models.build.load_model)":
        "from adaspec.models.build import load_model\nmodel = load_model(FOLDER)",
    "independent draft (drafts.load_draft)":
        "from adaspec.drafts import load_draft\nmodel = load_draft(FOLDER).model",
    "EAGLE-3 head (drafts.load_draft)":
        "from adaspec.drafts import load_draft\nmodel = load_draft(HEAD).model",
}
# the negative control: the same load without importing adaspec kernelizes the model
WITHOUT_ADASPEC = "from transformers import AutoModelForCausalLM\nmodel = AutoModelForCausalLM.from_pretrained(FOLDER)"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(root / "llama")
    Eagle3Head(Eagle3Config(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=2,
                            vocab_size=64, draft_vocab_size=64)).save_pretrained(root / "head")
    return root


def use_kernels_after(load: str, folders) -> bool:
    """`model.use_kernels` after `load` in a fresh Python whose environment does not mention USE_HUB_KERNELS."""
    env = {k: v for k, v in os.environ.items() if k != "USE_HUB_KERNELS"}
    script = (f"FOLDER, HEAD = {str(folders / 'llama')!r}, {str(folders / 'head')!r}\n{load}\n"
              "import json\nprint(json.dumps(bool(model.use_kernels)))")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", LOADS)
def test_every_load_path_leaves_hub_kernels_off(name, folders):
    assert use_kernels_after(LOADS[name], folders) is False


def test_without_the_package_transformers_would_kernelize(folders):
    assert use_kernels_after(WITHOUT_ADASPEC, folders) is True


def test_importing_the_package_overrides_an_environment_that_asks_for_hub_kernels():
    script = "import os, adaspec; print(os.environ['USE_HUB_KERNELS'])"
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "USE_HUB_KERNELS": "YES"})
    assert result.stdout.strip() == "NO", result.stderr[-2000:]
