"""The EAGLE-3 head as a draft: the target's hidden states reach it from the prefill and the verification
forwards, decoding stays exact (greedy and sampling), the decoding path computes what training computes,
the replay walks the real loop's blocks, and a few hundred steps of KL training make the target accept it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from adaspec.decoding import FixedGamma, speculative_generate, target_generate
from adaspec.decoding.serving import Served, Serving
from adaspec.decoding.tree import TreeShape
from adaspec.drafts.eagle3 import Eagle3Draft
from adaspec.drafts.hybrid import HybridDraft
from adaspec.evaluation.replay import replay
from adaspec.models.draft_vocab import DraftVocab
from adaspec.models.eagle3 import Eagle3Head, eagle3_layers
from tests.decoding.test_speculative import P_THRESHOLD, SAMPLING_V, chi2_pvalue, exact_two_token_distribution

V = 64


def tiny_llama(seed: int, vocab: int = V, layers: int = 4, init_std: float = 0.1,
               dtype: torch.dtype = torch.float64) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         initializer_range=init_std, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval().to(dtype)


def prompt(seed: int, length: int = 6) -> torch.Tensor:
    return torch.randint(0, V, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def target():
    """A target a one-layer head can learn from a few sequences: its layers after the first write nothing
    to the residual stream, and its output head is sharpened (a random tiny model is too flat to imitate)."""
    model = tiny_llama(0)
    with torch.no_grad():
        for layer in model.model.layers[1:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.mul_(3)
    return model


def kl_step(draft: Eagle3Draft, target, ids: torch.Tensor, optimizer) -> float:
    """One step of forward KL(target || head) on every position of `ids`."""
    with torch.no_grad():
        p = torch.log_softmax(target(ids).logits, -1)
    q = torch.log_softmax(draft.logits(ids), -1)
    loss = torch.nn.functional.kl_div(q, p, log_target=True, reduction="none").sum(-1).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


@pytest.fixture(scope="module")
def trained(target):
    """(head trained for 200 steps on 64 of the target's own greedy continuations of other prompts, its losses)."""
    torch.manual_seed(1)
    draft = Eagle3Draft(Eagle3Head.from_target(target, V), target=target)
    texts = [torch.cat([prompt(100 + i)[0], torch.tensor(
        target_generate(target, prompt(100 + i), max_new_tokens=26, eos_token_id=None).tokens)]) for i in range(64)]
    data = torch.stack(texts)
    optimizer = torch.optim.AdamW(draft.model.trainable_parameters(), lr=3e-3)
    draft.model.train()
    losses = [kl_step(draft, target, data[torch.randperm(64)[:8]], optimizer) for _ in range(200)]
    return draft.eval(), losses


def test_the_head_reads_the_layers_eagle3_reads_and_keeps_the_targets_embedding_frozen(target):
    assert eagle3_layers(30) == [2, 15, 27] and eagle3_layers(2) == [1, 1, 2]
    head = Eagle3Head.from_target(target, V)
    assert head.config.target_layers == [1, 2, 2]  # 4 layers: inputs of layer 2 and the output of layer 1
    assert torch.equal(head.embed_tokens.weight, target.get_input_embeddings().weight)
    assert not head.embed_tokens.weight.requires_grad
    assert head.fc.weight.shape == (32, 3 * 32) and head.midlayer.self_attn.q_proj.weight.shape == (32, 64)
    assert head.midlayer.self_attn.k_proj.weight.shape == (16, 64)  # 2 key-value heads of 8


def test_the_targets_features_from_its_cached_steps_equal_a_whole_forward(target):
    ids, layers = prompt(3, 10), [1, 2, 4]
    served = Served(target, Serving("float64"))
    cache = served.new_cache(16)
    _, first = served.prefill_with_features(ids[:, :6], cache, layers)
    _, rest = served.step_with_features(ids[:, 6:], cache, layers)
    whole = target(ids, output_hidden_states=True).hidden_states
    expected = torch.cat([whole[i][0] for i in layers], -1)
    torch.testing.assert_close(torch.cat([first, rest]), expected)


def test_decoding_computes_what_training_computes(trained, target):
    """The session's incremental proposals (real pairs from the target's features, then the head's own
    outputs) equal the head run over the whole sequence at once."""
    draft, _ = trained
    ids = prompt(5, 9)
    session = draft.start(ids, V)
    session.read_target(draft.features(ids[:, :-1])[0])
    proposals, _ = session.propose(ids[0], 3, 0.0, None)
    assert len(session.cache) == ids.shape[1]  # only the real pairs stay in the cache
    whole = draft.logits(ids)
    assert proposals[0] == whole[0, -1].argmax()
    # the second proposal: the pair after the last reads the head's own output there, not a target feature
    features = draft.model.project(torch.cat([torch.zeros(1, 1, 96, dtype=torch.float64),
                                              draft.features(ids)[:, :-1]], 1))
    out, _ = draft.model(features, ids)
    _, logits = draft.model(torch.cat([features, out[:, -1:]], 1), torch.cat([ids, proposals[:1].view(1, 1)], 1))
    assert proposals[1] == logits[0, -1].argmax()


def test_the_training_time_test_computes_each_proposal_of_a_block(trained):
    """Pass k of the unrolled head at position L+k-1 equals decoding's (k+1)-th proposal from context L."""
    draft, _ = trained
    ids = prompt(5, 9)
    session = draft.start(ids, V)
    session.read_target(draft.features(ids[:, :-1])[0])
    proposals, _ = session.propose(ids[0], 3, 0.0, None)
    sequence = torch.cat([ids[0], proposals[:2]]).view(1, -1)
    passes = draft.unrolled_logits(sequence, 3)
    assert [int(passes[k][0, 8 + k].argmax()) for k in range(3)] == proposals.tolist()


def test_heads_given_one_feature_source_run_the_target_once_per_batch(target):
    """Stage 3's student and reference read the target through one `FeatureSource` (`attach_training`): one target
    forward per batch for both; another batch runs it again, and a head with a source of its own runs it itself."""
    from adaspec.drafts import FeatureSource

    student, reference, alone = (Eagle3Draft(Eagle3Head.from_target(target, V)) for _ in range(3))
    shared = FeatureSource(target)
    student.attach_training(shared)
    reference.attach_training(shared)
    alone.attach_training(FeatureSource(target))
    ids = prompt(7, 10)
    mask = torch.ones_like(ids)
    calls = []
    hook = target.register_forward_hook(lambda *_: calls.append(1))
    try:
        student.logits(ids, attention_mask=mask)
        reference.logits(ids, attention_mask=mask)
        assert len(calls) == 1
        alone.logits(ids, attention_mask=mask)
        assert len(calls) == 2
        assert torch.equal(student.features(ids, mask), alone.features(ids, mask)) and len(calls) == 2
        student.logits(ids.clone(), attention_mask=mask)  # another batch: the same tokens in another tensor
        assert len(calls) == 3
    finally:
        hook.remove()


def test_kl_training_lowers_the_loss_and_the_target_accepts_the_head(trained, target):
    draft, losses = trained
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    untrained = Eagle3Draft(Eagle3Head.from_target(target, V))
    alphas = []
    for d in (untrained, draft):
        results = [speculative_generate(target, d, prompt(s), gamma_policy=FixedGamma(3), max_new_tokens=24,
                                        eos_token_id=None) for s in range(4)]
        blocks = [b for r in results for b in r.blocks]
        alphas.append(sum(b.accepted for b in blocks) / sum(b.proposed for b in blocks))
    assert alphas[1] > alphas[0] + 0.15  # measured: 0.29 against 0.00 at gamma 3 on held-out prompts


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_output_equals_the_targets(trained, target, gamma):
    draft, _ = trained
    for seed in range(3):
        ids = prompt(seed)
        ref = target_generate(target, ids, max_new_tokens=20, eos_token_id=None)
        out = speculative_generate(target, draft, ids, gamma_policy=FixedGamma(gamma), max_new_tokens=20,
                                   eos_token_id=None)
        assert out.tokens == ref.tokens
        assert out.target_calls < len(ref.tokens) or gamma == 1


def test_a_head_over_a_reduced_vocabulary_decodes_exactly(trained, target):
    """The trained head cut to the even tokens: its proposals map back to the target's ids (odd tokens are
    never proposed, so some blocks are rejected) and the output is the target's."""
    vocab = DraftVocab(torch.arange(0, V, 2), target_size=V, fallback_target_id=0)
    head = Eagle3Head.from_target(target, vocab.size)
    state = trained[0].model.state_dict()
    head.load_state_dict({**state, "lm_head.weight": state["lm_head.weight"][vocab.draft_to_target]})
    draft = Eagle3Draft(head.eval(), vocab)
    accepted = proposed = 0
    for seed in range(2):
        ids = prompt(seed)
        ref = target_generate(target, ids, max_new_tokens=16, eos_token_id=None)
        out = speculative_generate(target, draft, ids, gamma_policy=FixedGamma(3), max_new_tokens=16,
                                   eos_token_id=None)
        assert out.tokens == ref.tokens
        accepted += sum(b.accepted for b in out.blocks)
        proposed += sum(b.proposed for b in out.blocks)
    assert 0 < accepted < proposed  # the map back to the target's ids was used by accepted and rejected tokens
    with pytest.raises(ValueError, match="DraftVocab"):
        Eagle3Draft(Eagle3Head.from_target(target, vocab.size))


def test_a_head_started_from_the_targets_output_maps_features_as_the_target_does(target):
    """output_rows: the head's final norm and output layer are the target's at the draft vocabulary's ids, so a
    feature goes to the target's logits at those ids; a head started at random (the control) does not."""
    rows = torch.arange(0, V, 2)
    x = torch.randn(1, 5, target.config.hidden_size, dtype=torch.float64)
    wanted = target.lm_head(target.model.norm(x))[..., rows]
    started = Eagle3Head.from_target(target, rows.numel(), output_rows=rows)
    torch.testing.assert_close(started.lm_head(started.norm(x)), wanted, atol=1e-5, rtol=1e-5)  # norms round apart
    at_random = Eagle3Head.from_target(target, rows.numel())
    assert not torch.allclose(at_random.lm_head(at_random.norm(x)), wanted, atol=1e-2)


def test_sampling_is_distributed_as_the_target():
    target = tiny_llama(10, vocab=SAMPLING_V, init_std=0.2)
    torch.manual_seed(2)
    head = Eagle3Head.from_target(target, SAMPLING_V)
    with torch.no_grad():
        head.lm_head.weight.mul_(8)  # a peaked head that disagrees with the target
    draft = Eagle3Draft(head)
    prompt_ids, temperature = torch.tensor([[3]]), 0.7
    exact = exact_two_token_distribution(target, prompt_ids, temperature)
    gen = torch.Generator().manual_seed(0)
    runs = [speculative_generate(target, draft, prompt_ids, gamma_policy=FixedGamma(2), max_new_tokens=3,
                                 eos_token_id=None, temperature=temperature, generator=gen) for _ in range(1000)]
    samples = np.array([run.tokens[0] * SAMPLING_V + run.tokens[1] for run in runs])
    assert chi2_pvalue(samples, exact) > P_THRESHOLD
    first_blocks = [run.blocks[0] for run in runs]
    accepted = sum(b.accepted for b in first_blocks)
    assert 0 < accepted < sum(b.proposed for b in first_blocks)  # both the accept and the resample paths taken


def test_the_replay_walks_the_real_loops_blocks(trained, target):
    """One replayer serves every gamma, as the evaluation's sweep uses it: a position's matching run is
    examined once and reused (and extended when a larger gamma asks past a run that had no miss)."""
    draft, _ = trained
    for seed in (1, 2):
        ids = prompt(seed)
        ref = target_generate(target, ids, max_new_tokens=20, eos_token_id=None)
        blocks = draft.greedy_blocks(ids, ref.tokens, V)
        for gamma in (2, 4, 1, 6, 2):
            real = speculative_generate(target, draft, ids, gamma_policy=FixedGamma(gamma), max_new_tokens=20,
                                        eos_token_id=None)
            got = replay(ref.tokens, blocks, policy=FixedGamma(gamma), prompt_len=ids.shape[1],
                         max_new_tokens=20, eos_token_id=None)
            assert got.blocks == real.blocks
            accepted = sum(b.accepted for b in real.blocks)
            assert 0 < accepted < sum(b.proposed for b in real.blocks)  # blocks both accepted and rejected


def test_a_saved_head_loads_with_its_map_and_computes_the_same(trained, target, tmp_path):
    draft, _ = trained
    draft.model.save_pretrained(tmp_path)
    loaded = Eagle3Draft.load(tmp_path, target=target)
    ids = prompt(7, 12)
    torch.testing.assert_close(loaded.logits(ids), draft.logits(ids))
    assert loaded.describe()["target_layers"] == [1, 2, 2]


def test_the_cost_of_one_proposal_is_measured(trained):
    draft, _ = trained
    seconds = draft.step_seconds(prompt(1, 20), V, repeats=3)
    assert isinstance(seconds, float) and math.isfinite(seconds) and seconds > 0  # a duration, whatever its size


def test_a_compiled_target_hands_the_head_its_features_from_a_graph_of_their_own(trained, target):
    """float32-compiled: the verification graphs that return hidden states are compiled beside the plain
    ones (`feature_widths`), warmed before timing, and the output is the eager target's greedy output."""
    import copy

    draft, _ = trained
    head32 = Eagle3Draft(copy.deepcopy(draft.model).float())
    compiled = Served(copy.deepcopy(target), Serving.parse("float32-compiled"))
    seconds = compiled.warm_up([4], feature_layers=head32.target_layers)
    assert set(seconds) == {"4+features"} and compiled.feature_widths == [4] and compiled.widths == []
    eager = copy.deepcopy(target).float()
    for seed in range(2):
        ids = prompt(seed)
        reference = target_generate(eager, ids, max_new_tokens=16, eos_token_id=None).tokens
        out = speculative_generate(compiled, head32, ids, gamma_policy=FixedGamma(3), max_new_tokens=16,
                                   eos_token_id=None)
        assert out.tokens == reference
    assert compiled.feature_widths == [4]  # every verification padded to the warmed width


# ------------------------------------------------------------------------------------------------ trees

TREE_SHAPES = [TreeShape(1, 3, 3), TreeShape(3, 3, 8), TreeShape(4, 5, 20), TreeShape(3, 4, 10, lookup=4), TreeShape(3, 3, 12, lookup=7)]


@pytest.mark.parametrize("shape", TREE_SHAPES, ids=lambda s: s.name)
def test_tree_decoding_with_the_head_emits_the_targets_greedy_output(trained, target, shape):
    draft, _ = trained
    calls = tokens = 0
    for seed in range(3):
        ids = prompt(seed)
        ref = target_generate(target, ids, max_new_tokens=20, eos_token_id=None)
        out = speculative_generate(target, draft, ids, gamma_policy=FixedGamma(shape.reach), max_new_tokens=20,
                                   eos_token_id=None, tree=shape)
        assert out.tokens == ref.tokens
        calls, tokens = calls + out.target_calls, tokens + len(out.tokens)
    assert calls < tokens


def test_a_one_wide_tree_of_the_head_is_its_chain_and_a_wide_one_accepts_more(trained, target):
    draft, _ = trained
    taus, blocks = {}, {}
    for shape in (None, TreeShape(1, 3, 3), TreeShape(4, 3, 12)):
        runs = [speculative_generate(target, draft, prompt(s), gamma_policy=FixedGamma(3), max_new_tokens=20,
                                     eos_token_id=None, tree=shape) for s in range(4)]
        taus[shape] = sum(len(r.tokens) for r in runs) / sum(r.target_calls for r in runs)
        blocks[shape] = [r.blocks for r in runs]
    assert blocks[TreeShape(1, 3, 3)] == blocks[None]
    assert taus[TreeShape(4, 3, 12)] > taus[None]


def test_the_heads_tree_is_one_batched_head_forward_per_depth(trained, target):
    draft, _ = trained
    calls = []
    hook = draft.model.midlayer.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[1]))
    try:
        session = draft.start(prompt(1), V)
        session.read_target(draft.features(prompt(1)[:, :-1])[0])
        calls.clear()
        tree = session.propose_tree(prompt(1)[0], TreeShape(3, 4, 12), 0.0, None)
    finally:
        hook.remove()
    assert len(tree) == 12 and 1 < tree.depth <= 4
    assert calls == [6, 3, 3, 3]  # the prompt's real pairs (catch-up), then each depth's frontier in one forward
    assert len(session.cache) == prompt(1).shape[1]  # the tree's pairs are gone; only real pairs stay


def test_the_heads_drawn_first_child_carries_its_distribution_over_the_targets_ids(trained, target):
    """+sample over a reduced vocabulary: the drawn child's q row is the head's distribution mapped to the target's
    ids (nothing on the tokens it cannot propose), every other row a one-hot pick; greedy ignores +sample."""
    vocab = DraftVocab(torch.arange(0, V, 2), target_size=V, fallback_target_id=0)
    head = Eagle3Head.from_target(target, vocab.size)
    state = trained[0].model.state_dict()
    head.load_state_dict({**state, "lm_head.weight": state["lm_head.weight"][vocab.draft_to_target]})
    draft, shape = Eagle3Draft(head.eval(), vocab, target), TreeShape(3, 3, 8, sample="first")

    def tree_of(temperature: float, generator: torch.Generator | None):
        session = draft.start(prompt(1), V)
        session.read_target(draft.features(prompt(1)[:, :-1])[0])
        return session.propose_tree(prompt(1)[0], shape, temperature, generator)

    tree = tree_of(1.0, torch.Generator().manual_seed(0))
    assert tree.pinned == (0,) and tree.q.shape == (len(tree), V) and tree.children(-1)[0] == 0
    assert tree.q[0].sum().item() == pytest.approx(1.0, abs=1e-5) and tree.q[0, 1::2].sum() == 0
    assert all(tree.q[n, tree.tokens[n]] == 1.0 for n in range(1, len(tree)))
    greedy_tree = tree_of(0.0, None)
    assert greedy_tree.q is None and greedy_tree.pinned == ()


def test_the_heads_tree_replay_walks_the_real_loops_blocks(trained, target):
    draft, _ = trained
    for shape in (TreeShape(3, 3, 8), TreeShape(3, 4, 10, lookup=4), TreeShape(2, 2, 9, lookup=6)):
        runner = draft if not shape.lookup else HybridDraft(draft)
        for seed in (1, 2):
            ids = prompt(seed)
            ref = target_generate(target, ids, max_new_tokens=20, eos_token_id=None)
            real = speculative_generate(target, draft, ids, gamma_policy=FixedGamma(shape.reach), max_new_tokens=20,
                                        eos_token_id=None, tree=shape)
            got = replay(ref.tokens, runner.greedy_tree_blocks(ids, ref.tokens, V, shape),
                         policy=FixedGamma(shape.reach), prompt_len=ids.shape[1], max_new_tokens=20,
                         eos_token_id=None)
            assert got.blocks == real.blocks


def test_the_heads_tree_sampling_is_distributed_as_the_target(monkeypatch):
    from adaspec.decoding import speculative as spec_mod
    from tests.decoding.test_tree import wrong_residual

    target = tiny_llama(10, vocab=SAMPLING_V, init_std=0.2)
    torch.manual_seed(2)
    head = Eagle3Head.from_target(target, SAMPLING_V)
    with torch.no_grad():
        head.lm_head.weight.mul_(8)
    draft = Eagle3Draft(head)
    prompt_ids, temperature = torch.tensor([[3]]), 0.7
    exact = exact_two_token_distribution(target, prompt_ids, temperature)

    def samples():
        gen = torch.Generator().manual_seed(0)
        return np.array([
            (lambda t: t[0] * SAMPLING_V + t[1])(speculative_generate(
                target, draft, prompt_ids, gamma_policy=FixedGamma(2), max_new_tokens=3, eos_token_id=None,
                temperature=temperature, generator=gen, tree=TreeShape(2, 2, 4)).tokens)
            for _ in range(1000)])

    assert chi2_pvalue(samples(), exact) > P_THRESHOLD
    monkeypatch.setattr(spec_mod, "accept_sampled", wrong_residual)
    assert chi2_pvalue(samples(), exact) < P_THRESHOLD


def test_a_compiled_bfloat16_target_verifies_the_heads_trees_from_one_graph(trained, target):
    """bfloat16-compiled, as bench-real serves: the tree graph with the head's features is compiled once and
    reused; the output is the same serving's own greedy output, or parts from it first at a rounding near-tie
    (`first_divergence`'s margin; a wrong verifier parts where the target is sure)."""
    import copy

    from adaspec.decoding.exactness import first_divergence

    draft, _ = trained
    head = Eagle3Draft(copy.deepcopy(draft.model).to(torch.bfloat16))
    compiled = Served(copy.deepcopy(target), Serving.parse("bfloat16-compiled"))
    shape = TreeShape(3, 3, 8)
    compiled.warm_up([shape.nodes + 1], feature_layers=head.target_layers, tree=True)
    plain = Served(copy.deepcopy(target), Serving.parse("bfloat16"))
    for seed in range(4):
        ids = prompt(seed)
        reference = target_generate(plain, ids, max_new_tokens=16, eos_token_id=None).tokens
        out = speculative_generate(compiled, head, ids, gamma_policy=FixedGamma(3), max_new_tokens=16,
                                   eos_token_id=None, tree=shape)
        divergence = first_divergence(plain, ids, reference, out.tokens)
        assert divergence is None or abs(divergence["margin"]) < 0.05, divergence
    assert compiled.tree_feature_widths == [9] and compiled.widths == []


# ------------------------------------------------------------------------------------------------ compiled steps

def test_compiled_head_steps_on_a_static_cache_emit_the_eager_heads_blocks(trained, target):
    """decode.draft_compile (issue 48): the head's steps compiled over a preallocated cache (on a GPU: CUDA graphs)
    propose what the eager head proposes, chains and trees, and the cache grows when a generation outgrows it."""
    draft, _ = trained
    compiled = Eagle3Draft(draft.model, draft.vocab, target)
    assert compiled.compile_steps() and not draft.compiled_step  # the fixture's draft stays eager
    assert compiled.graphs is False  # the CPU: inductor, no graphs to copy out of
    compiled.warm_up([prompt(0).shape[1]])
    for shape in (None, TreeShape(3, 3, 8)):
        for seed in range(2):
            ids = prompt(seed)
            runs = [speculative_generate(target, d, ids, gamma_policy=FixedGamma(3), max_new_tokens=16,
                                         eos_token_id=None, tree=shape) for d in (draft, compiled)]
            assert runs[0].tokens == runs[1].tokens and runs[0].blocks == runs[1].blocks
    session = compiled.start(prompt(0), V)  # sized for the prompt and 512 more pairs: 1024
    assert session.cache.capacity == 1024
    long = torch.randint(0, V, (1, 1100), generator=torch.Generator().manual_seed(5))
    session.read_target(draft.features(long[:, :-1])[0])
    eager = draft.start(long, V)
    eager.read_target(draft.features(long[:, :-1])[0])
    assert torch.equal(session.propose(long[0], 3, 0.0, None)[0], eager.propose(long[0], 3, 0.0, None)[0])
    assert session.cache.capacity == 2048 and len(session.cache) == 1100  # grown, then cropped to the real pairs
