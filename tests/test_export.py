"""`python -m adaspec.export`: an EAGLE-3 head in vllm-project/speculators' layout, an independent full-vocabulary
draft as a Hugging Face folder that transformers' assisted generation runs; refusals as one line.

The speculators layout is checked against speculators 0.9.0's source as read by hand (names, shapes, config
fields: adaspec.export.speculators_format cites the files), and its meaning by running the exported tensors
through transformers' own LlamaDecoderLayer the way speculators' first layer does
(`models/eagle3/model_definitions.py`); the load by speculators itself is the slow test below."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from adaspec.artefacts import paths
from adaspec.drafts import Eagle3Draft
from adaspec.errors import UserError
from adaspec.export.__main__ import main as export_main
from adaspec.export.speculators_format import speculators_config, speculators_tensors
from adaspec.models.build import load_model
from adaspec.models.draft_vocab import DraftVocab
from adaspec.models.eagle3 import Eagle3Head
from adaspec.training.pipeline import run_stage
from tests.conftest import TINY, compose_config

H, V, N, HEADS, KV_HEADS, HEAD_DIM, MLP = 32, 96, 24, 4, 2, 8, 64


@pytest.fixture
def head_draft() -> Eagle3Draft:
    torch.manual_seed(0)
    target = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=MLP, num_hidden_layers=8,
                                          num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                                          rope_theta=5000.0, max_position_embeddings=128))
    head = Eagle3Head.from_target(target, draft_vocab_size=N)
    with torch.no_grad():
        for name, p in head.named_parameters():  # every weight away from its initial value, norms included
            p.copy_(torch.rand_like(p) + 0.5 if "norm" in name else torch.randn_like(p) * 0.3)
    ids = torch.sort(torch.randperm(V)[:N]).values
    return Eagle3Draft(head, DraftVocab(ids, V, int(ids[0])), target)


def test_a_head_whose_target_layers_collide_is_refused(head_draft):
    head_draft.model.config.target_layers = [1, 1, 2]
    with pytest.raises(UserError, match="distinct target layers"):
        speculators_config(head_draft, "t", {}, 3)


def test_the_speculators_layout_has_its_names_shapes_and_id_maps(head_draft):
    assert "embed_tokens.weight" not in speculators_tensors(head_draft)  # the server shares the target's
    tensors = speculators_tensors(head_draft, embedding=True)
    expected = {  # speculators 0.9.0, Eagle3DraftModel (models/eagle3/core.py) over LlamaDecoderLayer
        "embed_tokens.weight": (V, H), "fc.weight": (H, 3 * H),
        "layers.0.self_attn.q_proj.weight": (HEADS * HEAD_DIM, 2 * H),
        "layers.0.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, 2 * H),
        "layers.0.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, 2 * H),
        "layers.0.self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
        "layers.0.mlp.gate_proj.weight": (MLP, H), "layers.0.mlp.up_proj.weight": (MLP, H),
        "layers.0.mlp.down_proj.weight": (H, MLP),
        "layers.0.input_layernorm.weight": (H,), "layers.0.hidden_norm.weight": (H,),
        "layers.0.post_attention_layernorm.weight": (H,),
        "norm.weight": (H,), "lm_head.weight": (N, H), "d2t": (N,), "t2d": (V,),
    }
    assert {name: tuple(t.shape) for name, t in tensors.items()} == expected
    assert tensors["d2t"].dtype == torch.int64 and tensors["t2d"].dtype == torch.bool
    targets = torch.arange(N) + tensors["d2t"]  # target id = draft id + d2t[draft id]
    assert torch.equal(targets, head_draft.vocab.draft_to_target)
    assert int(tensors["t2d"].sum()) == N and bool(tensors["t2d"][targets].all())

    config = speculators_config(head_draft, "some/target", {"architectures": ["LlamaForCausalLM"],
                                                            "max_position_embeddings": 128}, 4)
    layer = config["transformer_layer_config"]
    assert config["speculators_model_type"] == "eagle3" and config["draft_vocab_size"] == N
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]  # EAGLE-3's 2, N/2, N-3 of an 8-layer target
    assert (layer["model_type"], layer["vocab_size"], layer["hidden_size"], layer["num_hidden_layers"],
            layer["head_dim"], layer["num_key_value_heads"]) == ("llama", V, H, 1, HEAD_DIM, KV_HEADS)
    assert layer["rope_parameters"]["rope_theta"] == 5000.0
    proposal = config["speculators_config"]["proposal_methods"][0]
    assert (proposal["proposal_type"], proposal["speculative_tokens"]) == ("greedy", 4)
    assert config["speculators_config"]["verifier"] == {"name_or_path": "some/target",
                                                        "architectures": ["LlamaForCausalLM"]}
    assert not any(config[flag] for flag in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"))


def speculators_first_layer_logits(config: dict, tensors: dict, features: torch.Tensor, input_ids: torch.Tensor):
    """speculators' Eagle3 forward of one pass, on transformers' Llama layer: pair j = (fc(features[j]),
    embed(input_ids[j])) at position j (speculators numbers the same pair's position the same way: the token's)."""
    layer_config = LlamaConfig(**config["transformer_layer_config"])
    layer_config._attn_implementation = "eager"
    layer = LlamaDecoderLayer(layer_config, 0)
    for name in ("q_proj", "k_proj", "v_proj"):  # Eagle3FirstLayerMixin._patch_eagle3_projections
        old = getattr(layer.self_attn, name)
        setattr(layer.self_attn, name, nn.Linear(2 * H, old.out_features, bias=False))
    layer.hidden_norm = LlamaRMSNorm(H, eps=layer_config.rms_norm_eps)
    layer.load_state_dict({k.removeprefix("layers.0."): v for k, v in tensors.items() if k.startswith("layers.0.")})
    rope_config = copy.copy(layer_config)
    rope_config.hidden_size *= 2  # as Eagle3DraftModel builds its rotary embedding
    norm = LlamaRMSNorm(H, eps=layer_config.rms_norm_eps)
    norm.load_state_dict({"weight": tensors["norm.weight"]})

    hidden = F.linear(features, tensors["fc.weight"])
    embeds = F.embedding(input_ids, tensors["embed_tokens.weight"])
    x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
    t = input_ids.shape[1]
    positions = torch.arange(t)[None]
    causal = torch.full((t, t), float("-inf")).triu(1)[None, None]
    attn, _ = layer.self_attn(hidden_states=x, position_embeddings=LlamaRotaryEmbedding(rope_config)(x, positions),
                              attention_mask=causal)
    out = hidden + attn
    out = out + layer.mlp(layer.post_attention_layernorm(out))
    return F.linear(norm(out), tensors["lm_head.weight"])


def test_the_exported_head_computes_on_transformers_llama_layer_what_it_computes_here(head_draft):
    config = speculators_config(head_draft, "t", {}, 3)
    tensors = speculators_tensors(head_draft, embedding=True)
    features, input_ids = torch.randn(1, 9, 3 * H), torch.randint(0, V, (1, 9))
    with torch.no_grad():
        ours = head_draft.model(head_draft.model.project(features), input_ids)[1]
        theirs = speculators_first_layer_logits(config, tensors, features, input_ids)
    assert ours.abs().mean() > 0.1  # a real signal, not zeros on both sides
    torch.testing.assert_close(theirs, ours, atol=2e-5, rtol=1e-4)
    draft_ids = theirs.argmax(-1)
    assert torch.equal(draft_ids + tensors["d2t"][draft_ids], head_draft.vocab.to_target(ours.argmax(-1)))


# 8 target layers: EAGLE-3's layers 2, N/2 and N-3 are distinct, as speculators requires
EAGLE3 = ["model.draft_kind=eagle3", "stage.max_steps=6", "stage.monitor_every_n_steps=0",
          "model.target.num_hidden_layers=8"]


def test_make_export_writes_a_trained_head_with_its_provenance(tiny_cfg):
    run_stage(tiny_cfg("stage=target", "stage.max_steps=6", EAGLE3[-1]))
    run_stage(tiny_cfg("stage=ref", *EAGLE3))
    cfg = tiny_cfg("stage=ref", *EAGLE3)
    overrides = [*TINY, f"paths.root={cfg.paths.root}", *EAGLE3]
    out = export_main(["--stage", "ref", "--gamma", "5", *overrides])

    folder = paths.final(paths.of(cfg).ref_dir())
    assert out == folder.parent / "export-speculators"
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(paths.final(paths.of(cfg).target_dir()).resolve())
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 5
    provenance = json.loads((out / "adaspec_export.json").read_text())
    assert provenance["artefact"] == json.loads((folder / "meta.json").read_text())
    assert (out / "adaspec_config.yaml").read_text() == (folder / "config.yaml").read_text()
    head = Eagle3Head.from_pretrained(folder)
    exported = load_file(out / "model.safetensors")
    assert torch.equal(exported["layers.0.self_attn.q_proj.weight"], head.midlayer.self_attn.q_proj.weight)
    assert "embed_tokens.weight" not in exported and provenance["embedding"].startswith("the target's")
    embedded = export_main(["--stage", "ref", "--with-embedding", "--out", str(out.parent / "with-embedding"),
                            *overrides])
    assert torch.equal(load_file(embedded / "model.safetensors")["embed_tokens.weight"], head.embed_tokens.weight)

    with pytest.raises(UserError, match="--overwrite"):  # an export already there is kept
        export_main(["--stage", "ref", *overrides])
    assert json.loads((out / "config.json").read_text()) == config
    export_main(["--stage", "ref", "--overwrite", "--verifier", "org/target", *overrides])
    assert json.loads((out / "config.json").read_text())["speculators_config"]["verifier"]["name_or_path"] == "org/target"


def test_a_full_vocabulary_draft_exports_as_transformers_assistant_model(tiny_trained, tmp_path):
    cfg = tiny_trained("stage=ref")
    folder = paths.final(paths.of(cfg).ref_dir())
    out = export_main(["--draft", str(folder), "--out", str(tmp_path / "assistant")])
    target = AutoModelForCausalLM.from_pretrained(paths.final(paths.of(cfg).target_dir())).eval()
    assistant = AutoModelForCausalLM.from_pretrained(out).eval()
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".safetensors") == ["model.safetensors"]
    prompt = torch.tensor([[1, 5, 9, 12, 7, 3]])
    with torch.no_grad():  # the exported model is the draft: the same logits as the artefact loaded by the project
        torch.testing.assert_close(assistant(prompt).logits, load_model(folder).eval()(prompt).logits, rtol=0, atol=0)
        assert not torch.equal(assistant(prompt).logits, target(prompt).logits)  # the draft, not the target
    plain = target.generate(prompt, max_new_tokens=12, do_sample=False, min_new_tokens=12)
    assisted = target.generate(prompt, max_new_tokens=12, do_sample=False, min_new_tokens=12,
                               assistant_model=assistant)
    assert torch.equal(assisted, plain)  # transformers takes it as an assistant (equal output for any assistant)
    assert json.loads((out / "adaspec_export.json").read_text())["format"] == "hf"


def test_what_cannot_be_exported_is_one_line(tiny_trained, tmp_path):
    cfg = tiny_trained("stage=ref")
    folder = paths.final(paths.of(cfg).ref_dir())
    other = compose_config(*TINY, f"paths.root={tmp_path / 'other'}", "stage=target", "stage.max_steps=5")
    run_stage(other)
    with pytest.raises(UserError, match="the draft was trained against"):  # another target's folder
        export_main(["--draft", str(folder), "--out", str(tmp_path / "x"),
                     "--target", str(paths.final(paths.of(other).target_dir()))])
    assert not (tmp_path / "x").exists()
    with pytest.raises(UserError, match="no trained draft"):
        export_main(["--stage", "draft", "--k", "0.3", *TINY, f"paths.root={cfg.paths.root}"])


def test_a_reduced_vocabulary_draft_is_refused_with_the_way_to_train_one(tiny_cfg, tmp_path):
    run_stage(tiny_cfg("stage=target", "stage.max_steps=4"))
    cfg = tiny_cfg("stage=ref", "model.draft_vocab_size=64")
    run_stage(cfg)
    with pytest.raises(UserError, match="model.draft_vocab_size=0"):
        export_main(["--draft", str(paths.final(paths.of(cfg).ref_dir())), "--out", str(tmp_path / "x")])


SPECULATORS_VENV = Path(os.environ.get("ADASPEC_SPECULATORS_VENV", ".cache/speculators-venv"))


@pytest.mark.slow
def test_speculators_itself_loads_the_exported_head(tiny_cfg, tmp_path):
    """speculators 0.9.0 in its own virtualenv (it pins transformers <= 5.19): built once, kept in
    .cache/speculators-venv. Its loader checks every tensor name and shape (strict)."""
    llama = "model.target.architecture=llama"  # speculators reads a Llama or Qwen3 verifier's embedding
    run_stage(tiny_cfg("stage=target", "stage.max_steps=6", llama, EAGLE3[-1]))
    cfg = tiny_cfg("stage=ref", *EAGLE3, "model.draft_vocab_size=64", llama)
    run_stage(cfg)
    out = export_main(["--draft", str(paths.final(paths.of(cfg).ref_dir())), "--out", str(tmp_path / "spec"),
                       "--with-embedding"])  # speculators' loader is strict: every tensor of its model
    python = SPECULATORS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(SPECULATORS_VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "torch==2.13.0", "transformers>=5.0,<=5.19", "pydantic>=2", "pydantic-settings>=2",
                        "loguru>=0.7.2,<=0.7.3", "safetensors", "huggingface-hub", "numpy>=2,<=2.5.4", "rich", "click",
                        "typer", "tqdm", "datasets>=4,<=5.1", "psutil", "protobuf", "openai", "aiohttp",
                        "httpx"], check=True)
        # torchvision and torchaudio (unused by the model classes) would pull another torch build
        subprocess.run([*pip, "--no-deps", "speculators==0.9.0", "hs-connectors==0.9.0"], check=True)
    check = (
        "import sys, torch; from speculators.models.eagle3 import Eagle3DraftModel;"
        "m = Eagle3DraftModel.from_pretrained(sys.argv[1]);"
        "from safetensors.torch import load_file; w = load_file(sys.argv[1] + '/model.safetensors');"
        "sd = m.state_dict();"
        "assert all(torch.equal(sd[k].to(w[k].dtype), w[k]) for k in w), 'weights differ';"
        "import json; print(json.dumps([m.config.draft_vocab_size, [int(i) for i in m.target_layer_ids]]))"
    )
    result = subprocess.run([str(python), "-c", check, str(out)], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    head = Eagle3Head.from_pretrained(paths.final(paths.of(cfg).ref_dir()))
    vocab, layers = json.loads(result.stdout.strip().splitlines()[-1])
    assert vocab == 64 and layers == list(head.config.target_layers)
