"""Serving configurations (adaspec.decoding.serving): precision, static cache and compiled steps reach the
model, and decoding stays exact in each: greedy speculative output equal to the target's own greedy output in
the same configuration (bfloat16: any difference is a near-tie, described), sampling distributed as the
target's in bfloat16 too."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

from adaspec.decoding import FixedGamma, speculative_generate, target_generate
from adaspec.decoding.exactness import first_divergence
from adaspec.decoding.serving import Served, Serving
from adaspec.decoding.weight_only_int8 import WeightOnlyInt8Linear
from adaspec.drafts import ModelDraft
from tests.decoding.conftest import noisy_copy
from tests.decoding.test_speculative import (
    P_THRESHOLD,
    SAMPLING_V,
    chi2_pvalue,
    exact_two_token_distribution,
    sample_two_tokens,
)

VOCAB = 96


def tiny_llama(seed: int, vocab: int = VOCAB, hidden: int = 32, layers: int = 2, init_std: float = 0.1):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      initializer_range=init_std, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(0, init_std=0.5)  # varied text; at 0.1 a tiny Llama repeats one token


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(7)
    return [torch.randint(0, VOCAB, (1, 3 + 5 * i), generator=gen) for i in range(8)]


def served(model, name: str) -> Served:
    return Served(copy.deepcopy(model), Serving.parse(name))


def test_serving_names_round_trip_and_reject_what_cannot_run():
    for name in ("float32", "bfloat16", "float32-static", "bfloat16-compiled", "bfloat16-compiled-w2",
                 "bfloat16-int8", "float32-attn_eager", "bfloat16-int8-attn_sdpa-compiled-w2"):
        assert Serving.parse(name).name == name
    assert Serving.parse("bfloat16-compiled-w2").min_width == 2
    assert Serving.parse("bfloat16-int8-attn_eager-static") == Serving("bfloat16", "static", False, 1, "int8", "eager")
    for bad in ("float32-static-w2", "float32-w2", "bfloat16-compiled-wx", "float32-attn_eager-int8",
                "float32-attn_flash", "float32-int4", "float32-static-compiled"):
        with pytest.raises(ValueError):
            Serving.parse(bad)
    assert Serving.parse("bfloat16-compiled") == Serving("bfloat16", "static", True)
    with pytest.raises(ValueError, match="kv_cache='static'"):
        Serving("float32", "dynamic", compile=True)
    with pytest.raises(ValueError, match="dtype must be one of"):
        Serving("int4")


def test_the_serving_reaches_the_model(llama):
    s = served(llama, "bfloat16-static")
    assert all(p.dtype == torch.bfloat16 for p in s.model.parameters())
    cache = s.new_cache(700)
    assert isinstance(cache, StaticCache)
    assert cache.layers[0].max_cache_len == 1024  # rounded up to CAPACITY_STEP: one graph for every prompt


def test_static_cache_decodes_as_the_dynamic_one(llama, prompts):
    """float32: the static cache (in-place crop) gives the dynamic cache's outputs, target-only and speculative."""
    draft = ModelDraft(noisy_copy(llama, 0.1, seed=1))
    static = served(llama, "float32-static")
    calls = tokens = 0
    for ids in prompts:
        reference = target_generate(llama, ids, max_new_tokens=20, eos_token_id=None).tokens
        assert target_generate(static, ids, max_new_tokens=20, eos_token_id=None).tokens == reference
        spec = speculative_generate(static, draft, ids, gamma_policy=FixedGamma(3), max_new_tokens=20,
                                    eos_token_id=None)
        assert spec.tokens == reference
        calls, tokens = calls + spec.target_calls, tokens + len(spec.tokens)
    assert calls < 0.8 * tokens  # drafts were accepted and rejected: the cache really was cropped in place


@pytest.mark.parametrize("dtype", ["bfloat16", "bfloat16-static"])
def test_bfloat16_greedy_is_the_targets_own_greedy_up_to_ties(llama, prompts, dtype):
    """In bfloat16 a verification forward may round a near-tie the other way than one-token steps: every prompt
    equals the bfloat16 target's own greedy output, or differs first where its two tokens are within a
    rounding margin. A wrong verifier would differ where the target is sure."""
    target = served(llama, dtype)
    draft = ModelDraft(noisy_copy(llama, 0.1, seed=1).to(torch.bfloat16))
    equal = 0
    for ids in prompts:
        reference = target_generate(target, ids, max_new_tokens=24, eos_token_id=None).tokens
        spec = speculative_generate(target, draft, ids, gamma_policy=FixedGamma(4), max_new_tokens=24,
                                    eos_token_id=None).tokens
        divergence = first_divergence(target, ids, reference, spec)
        if divergence is None:
            equal += 1
        else:
            assert abs(divergence["margin"]) < 0.05, divergence
    assert equal >= len(prompts) // 2


def test_first_divergence_measures_the_margin_where_outputs_part(llama, prompts):
    target = served(llama, "float32")
    ids = prompts[2]
    reference = target_generate(target, ids, max_new_tokens=10, eos_token_id=None).tokens
    forged = reference[:4] + [(reference[4] + 1) % VOCAB] + reference[5:]
    found = first_divergence(target, ids, reference, forged)
    with torch.inference_mode():
        logits = llama(torch.cat([ids[0], torch.tensor(reference[:4])]).view(1, -1)).logits[0, -1]
    assert found["position"] == 4 and found["other"] == forged[4]
    assert found["margin"] == pytest.approx(float(logits[reference[4]] - logits[forged[4]]), abs=1e-5)
    assert found["margin"] > 0  # the reference's token is the target's argmax
    assert first_divergence(target, ids, reference, reference) is None
    at_start = first_divergence(target, ids, reference, [(reference[0] + 1) % VOCAB] + reference[1:])
    assert at_start["position"] == 0 and at_start["margin"] > 0  # no common prefix: the prompt alone
    assert first_divergence(target, ids, reference, reference[:6])["position"] == 6


def test_compiled_steps_decode_as_eager_and_reuse_one_graph_per_width(llama, prompts):
    """torch.compile over the static cache: every verification is padded to the one warmed width, the outputs
    are the eager ones, and prompts of other lengths reuse the graphs (no new width compiled)."""
    compiled = served(llama, "float32-compiled")
    seconds = compiled.warm_up([1, 4])
    assert sorted(seconds) == [1, 4] and all(s > 0 for s in seconds.values())
    draft = ModelDraft(noisy_copy(llama, 0.1, seed=1))
    for ids in prompts[:4]:
        reference = target_generate(llama, ids, max_new_tokens=16, eos_token_id=None).tokens
        assert target_generate(compiled, ids, max_new_tokens=16, eos_token_id=None).tokens == reference
        spec = speculative_generate(compiled, draft, ids, gamma_policy=FixedGamma(3), max_new_tokens=16,
                                    eos_token_id=None)
        assert spec.tokens == reference
    assert compiled.widths == [1, 4]  # shorter blocks (the gamma cap near the end) were padded, not compiled
    padded = served(llama, "float32-compiled-w2")  # one-token steps padded to two: the same tokens
    assert padded.warm_up([1, 4]).keys() == {2, 4}
    for ids in prompts[:2]:
        reference = target_generate(llama, ids, max_new_tokens=12, eos_token_id=None).tokens
        assert target_generate(padded, ids, max_new_tokens=12, eos_token_id=None).tokens == reference
    assert padded.widths == [2, 4]


def test_two_compiled_copies_decode_on_their_own_caches(llama, prompts):
    """Frozen graphs hold the address of the cache they were traced with: two compiled copies of one model,
    decoding in turn, must each read their own cache (and a step wider than any warmed compiles at once)."""
    first, second = served(llama, "float32-compiled"), served(llama, "float32-compiled")
    for ids_a, ids_b in zip(prompts[:3], prompts[3:6], strict=True):
        a = target_generate(first, ids_a, max_new_tokens=8, eos_token_id=None).tokens
        b = target_generate(second, ids_b, max_new_tokens=8, eos_token_id=None).tokens
        assert a == target_generate(llama, ids_a, max_new_tokens=8, eos_token_id=None).tokens
        assert b == target_generate(llama, ids_b, max_new_tokens=8, eos_token_id=None).tokens
    assert first.widths == second.widths == [1] and set(first.compile_seconds) == {1}


def test_speculative_sampling_in_bfloat16_is_distributed_as_the_target():
    target = tiny_model_bf16(10)
    draft = ModelDraft(tiny_model_bf16(11, layers=1))
    prompt, temperature = torch.tensor([[3]]), 0.7
    exact = exact_two_token_distribution(target, prompt, temperature)

    def spec(gen):
        return speculative_generate(target, draft, prompt, gamma_policy=FixedGamma(2), max_new_tokens=3,
                                    eos_token_id=None, temperature=temperature, generator=gen).tokens

    assert chi2_pvalue(sample_two_tokens(spec, 1200), exact) > P_THRESHOLD


def tiny_model_bf16(seed: int, layers: int = 2):
    return tiny_llama(seed, vocab=SAMPLING_V, layers=layers, init_std=0.2).to(torch.bfloat16)


def test_the_training_monitor_decodes_the_target_in_the_serving_dtype(llama, prompts):
    """decode.target_dtype reaches the acceptance monitor of stages 2 and 3: it measures with a bfloat16 copy
    of the frozen target (made once), and leaves the float32 target that training reads untouched."""
    from adaspec.callbacks.acceptance import AcceptanceMonitor, measure_acceptance

    target = copy.deepcopy(llama)
    monitor = AcceptanceMonitor([[1, 2, 3]], every_n_steps=1, target_dtype="bfloat16")
    in_use = monitor.served_target(target)
    assert in_use.model.dtype == torch.bfloat16 and target.dtype == torch.float32
    assert monitor.served_target(target) is in_use
    assert AcceptanceMonitor([[1]], every_n_steps=1).served_target(target) is target  # float32: no copy
    draft = ModelDraft(noisy_copy(llama, 0.05, seed=3))
    settings = dict(gamma=3, max_new_tokens=12, eos_token_id=None)
    timing = ("wall_time_s", "tokens_per_s")
    measured, independent = (
        {k: v for k, v in measure_acceptance(model, draft, prompts[:3], **settings).items() if k not in timing}
        for model in (in_use, copy.deepcopy(llama).to(torch.bfloat16))
    )
    assert measured == independent


def test_int8_weights_and_eager_attention_reach_the_model_and_decode_exactly(llama, prompts):
    """Weight-only int8: every linear layer holds int8 weights (a quarter of the float32 bytes), its logits are
    the float32 model's up to the rounding of the weights, and speculative decoding on it is still exactly its
    own greedy output. Eager attention gives sdpa's outputs."""
    int8 = served(llama, "float32-int8")
    linears = [m for m in int8.model.modules() if isinstance(m, WeightOnlyInt8Linear)]
    assert linears and not any(isinstance(m, torch.nn.Linear) for m in int8.model.modules())
    assert all(m.weight.dtype == torch.int8 for m in linears)
    ids = prompts[3]
    with torch.inference_mode():
        dense, rounded = llama(ids).logits, int8.model(ids).logits
    assert not torch.equal(dense, rounded) and float((dense - rounded).norm() / dense.norm()) < 0.1
    draft = ModelDraft(noisy_copy(llama, 0.1, seed=1))
    for ids in prompts[:4]:
        reference = target_generate(int8, ids, max_new_tokens=16, eos_token_id=None).tokens
        spec = speculative_generate(int8, draft, ids, gamma_policy=FixedGamma(3), max_new_tokens=16,
                                    eos_token_id=None)
        assert spec.tokens == reference
    eager = served(llama, "float32-attn_eager")
    assert eager.model.config._attn_implementation == "eager" and llama.config._attn_implementation == "sdpa"
    for ids in prompts[:4]:
        assert (target_generate(eager, ids, max_new_tokens=16, eos_token_id=None).tokens
                == target_generate(llama, ids, max_new_tokens=16, eos_token_id=None).tokens)


def test_compiled_steps_are_cuda_graphs_on_a_gpu_and_inductor_with_frozen_weights_on_the_cpu(llama):
    from adaspec.decoding.serving import compile_options

    assert compile_options(torch.device("cuda", 0)) == {"mode": "reduce-overhead"}
    assert compile_options(torch.device("cpu")) == {}
    assert served(llama, "float32-compiled").graphs is False  # here: outputs need no copy out of a graph


def test_a_static_cache_cropped_to_its_known_length_equals_the_crop_that_reads_it(llama, prompts):
    from adaspec.decoding.kv import crop_cache, run

    lengths = []
    for current in (None, prompts[3].shape[1]):
        cache = StaticCache(config=llama.config, max_cache_len=64)
        run(llama, prompts[3], cache)
        crop_cache(cache, 5, current)
        lengths.append(int(cache.get_seq_length()))
    assert lengths == [5, 5]


def test_a_compiled_step_that_returns_hidden_states_is_one_graph(llama):
    """A verification that also returns the head's features compiles to ONE graph: transformers installs its
    hidden-state hooks at the first call that asks for them, and inside a trace that install breaks the graph
    (Python between two graphs at every step). `Served` installs them eagerly before compiling."""
    from torch._dynamo.utils import counters

    def graph_breaks(call) -> int:
        counters.clear()
        call()
        return sum(counters["graph_break"].values())

    compiled = served(tiny_llama(0, init_std=0.5), "float32-compiled")
    assert graph_breaks(lambda: compiled.warm_up([3], feature_layers=[0, 2])) == 0
    # the control: the same model compiled as it comes breaks where the hooks are installed
    model = tiny_llama(0, init_std=0.5)
    step = torch.compile(model.forward, dynamic=False)
    cache = StaticCache(config=model.config, max_cache_len=16)
    with torch.inference_mode():
        assert graph_breaks(lambda: step(input_ids=torch.zeros(1, 3, dtype=torch.long), past_key_values=cache,
                                         use_cache=True, output_hidden_states=True)) > 0
