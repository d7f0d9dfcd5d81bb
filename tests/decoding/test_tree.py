"""Draft trees (adaspec.decoding.tree): one target forward verifies a tree, the output stays the target's own
(greedy: equal for every shape and draft kind and serving configuration; sampling: distributed as the target's,
with negative controls that a wrong residual or an always-accepting verifier fail), the caches keep exactly
the accepted path, and bad shapes are refused with one line naming the key."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from adaspec.decoding import FixedGamma, speculative_generate, target_generate
from adaspec.decoding import speculative as spec_mod
from adaspec.decoding.kv import forward
from adaspec.decoding.serving import Served, Serving, as_served
from adaspec.decoding.tree import Tree, TreeShape, accept_greedy, accept_sampled, tree_shape
from adaspec.drafts import hybrid
from adaspec.drafts.hybrid import HybridDraft
from adaspec.drafts.model import ModelDraft
from adaspec.drafts.prompt_lookup import PromptLookupDraft, lookup, lookup_tree
from adaspec.drafts.tree_expansion import expand
from adaspec.evaluation.replay import replay
from tests.decoding.conftest import noisy_copy, tiny_model
from tests.decoding.test_serving import tiny_llama
from tests.decoding.test_speculative import (
    P_THRESHOLD,
    SAMPLING_V,
    chi2_pvalue,
    exact_two_token_distribution,
    sample_two_tokens,
)

SHAPES = [TreeShape(1, 3, 3), TreeShape(2, 3, 6), TreeShape(4, 4, 16), TreeShape(3, 5, 12, lookup=5), TreeShape(2, 3, 12, lookup=8)]


@pytest.fixture(scope="module")
def target():
    return tiny_model(0)


@pytest.fixture(scope="module")
def model_draft(target):
    return ModelDraft(noisy_copy(target, 0.3, 1))


def prompts(n: int = 4) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randint(0, 64, (1, 4 + 3 * i), generator=gen) for i in range(n)]


# ------------------------------------------------------------------------------------------- the structure


def test_a_tree_knows_its_depths_ancestors_and_positions():
    tree = Tree([5, 6, 7, 8], [-1, -1, 0, 2])
    assert tree.depths == [1, 1, 2, 3] and tree.depth == 3 and tree.children(-1) == [0, 1]
    assert tree.path(3) == [0, 2, 3]
    seen = tree.ancestors(width=6)
    assert seen[4].tolist() == [True, True, False, True, True, False]  # node 3: root, 0, 2, itself
    assert seen[5].tolist() == [False] * 5 + [True]  # a padding row sees only itself
    assert tree.positions(6) == [0, 1, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="parent"):
        Tree([1, 2], [-1, 1])


def test_grafting_shares_nodes_keeps_the_chain_and_drops_the_least_likely():
    tree = Tree([5, 6, 7, 8], [-1, -1, 0, 0], scores=[-0.1, -2.0, -0.5, -3.0])
    grafted, origin = tree.graft([5, 9, 4], budget=5)
    assert len(grafted) == 5
    chain = [grafted.tokens[n] for n in grafted.path(max(range(5), key=lambda n: grafted.depths[n]))]
    assert chain == [5, 9, 4]  # node 5 was shared, 9 and 4 were grafted below it
    assert sorted(grafted.tokens) == [4, 5, 6, 7, 9]  # 8, the least likely node, made room
    assert [origin[n] for n in range(5) if grafted.tokens[n] == 5] == [0]
    assert [origin[n] for n in range(5) if grafted.tokens[n] in (9, 4)] == [None, None]


def test_prompt_lookups_tree_starts_with_its_chain_and_adds_other_continuations():
    ids = [1, 2, 3, 9, 1, 2, 4, 8, 7, 1, 2]
    tree = lookup_tree(ids, TreeShape(4, 3, 6), max_ngram_size=3)
    first = tree.path(max(n for n in range(len(tree)) if tree.parents[n] in (-1, *range(n)) and tree.depths[n] == 3
                         and tree.path(n)[0] == 0))
    assert [tree.tokens[n] for n in first] == lookup(ids, 3, 3) == [4, 8, 7]
    assert {tree.tokens[c] for c in tree.children(-1)} == {4, 3}  # "1 2" was followed by 4 and by 3


def test_the_hybrids_lookup_branch_reaches_past_the_drafts_depth(model_draft):
    """k2-d2-n10+lookup8: the draft's tree is two deep, the lookup branch grafted in eight (the text repeats)."""
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 2, 3, 5, 6]])
    session = HybridDraft(model_draft).start(ids, 64)
    tree = session.propose_tree(ids[0], TreeShape(2, 2, 10, lookup=8), 0.0, None)
    deepest = max(range(len(tree)), key=lambda n: tree.depths[n])
    assert [tree.tokens[n] for n in tree.path(deepest)] == [7, 8, 9, 10, 11, 12, 13, 14] and len(tree) <= 10


@pytest.mark.parametrize("value, key", [
    ("k0-d4-n16", "top_k"), ("k4-d40-n40", "depth"), ("k4-d4-n2", "nodes"), ("k4-d4-n33", "nodes"),
    ("tree", "k<top_k>"), ({"top_k": 4, "depth": 4, "nodes": 16, "width": 3}, "unknown"),
])
def test_a_shape_the_target_cannot_verify_in_one_forward_is_refused_naming_the_key(value, key):
    with pytest.raises(ValueError, match=key):
        tree_shape(value)
    assert tree_shape("off") is None
    assert tree_shape({"top_k": 2, "depth": 3, "nodes": 6}) == TreeShape(2, 3, 6) == TreeShape.parse("k2-d3-n6")
    assert TreeShape.parse("k3-d5-n12+lookup") == TreeShape(3, 5, 12, lookup=5)  # a branch as deep as the tree
    assert TreeShape.parse("k4-d4-n12+lookup8").lookup == 8 and TreeShape(4, 4, 12, 8).name == "k4-d4-n12+lookup8"
    assert tree_shape({"top_k": 2, "depth": 3, "nodes": 6, "lookup": True}).lookup == 3
    assert TreeShape(4, 4, 12, 8).reach == 8 and TreeShape(4, 4, 12, 8).capped(5).lookup == 5
    with pytest.raises(ValueError, match="lookup"):
        TreeShape(2, 3, 6, lookup=7)  # the branch must fit in the nodes


# ---------------------------------------------------------------------------------------- greedy: exact


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
@pytest.mark.parametrize("kind", ["model", "prompt_lookup"])
def test_greedy_tree_decoding_emits_the_targets_greedy_output(target, model_draft, shape, kind):
    draft = model_draft if kind == "model" else PromptLookupDraft()
    calls = tokens = 0
    for ids in prompts():
        ref = target_generate(target, ids, max_new_tokens=24, eos_token_id=None)
        out = speculative_generate(target, draft, ids, gamma_policy=FixedGamma(shape.reach), max_new_tokens=24,
                                   eos_token_id=None, tree=shape)
        assert out.tokens == ref.tokens
        calls, tokens = calls + out.target_calls, tokens + len(out.tokens)
    assert calls < tokens  # some block accepted a proposal: the check compared something


def test_a_one_wide_tree_is_the_chain(target, model_draft):
    """top_k 1: the tree is the draft's greedy chain, and its blocks are the chain's, block for block."""
    for ids in prompts():
        chain = speculative_generate(target, model_draft, ids, gamma_policy=FixedGamma(3), max_new_tokens=24,
                                     eos_token_id=None)
        tree = speculative_generate(target, model_draft, ids, gamma_policy=FixedGamma(3), max_new_tokens=24,
                                    eos_token_id=None, tree=TreeShape(1, 3, 3))
        assert tree.blocks == chain.blocks and tree.tokens == chain.tokens


def test_wider_trees_accept_more_per_block(target, model_draft):
    def tau(shape):
        runs = [speculative_generate(target, model_draft, ids, gamma_policy=FixedGamma(4), max_new_tokens=24,
                                     eos_token_id=None, tree=shape) for ids in prompts()]
        return sum(len(r.tokens) for r in runs) / sum(r.target_calls for r in runs)

    assert tau(TreeShape(4, 4, 16)) > tau(TreeShape(1, 4, 4)) + 0.1


@pytest.mark.parametrize("name", ["float32-static", "float32-compiled"])
def test_every_serving_verifies_a_tree_in_one_forward_and_a_compiled_graph_is_reused(name):
    llama = tiny_llama(0, init_std=0.5)
    draft = ModelDraft(noisy_copy(llama, 0.2, 1))
    eager = copy.deepcopy(llama)
    served = Served(copy.deepcopy(llama), Serving.parse(name))
    shape = TreeShape(3, 3, 8, lookup=3)
    served.warm_up([shape.nodes + 1], tree=True)
    for ids in prompts(3):
        ids = ids % 96
        ref = target_generate(eager, ids, max_new_tokens=20, eos_token_id=None)
        out = speculative_generate(served, draft, ids, gamma_policy=FixedGamma(3), max_new_tokens=20,
                                   eos_token_id=None, tree=shape)
        assert out.tokens == ref.tokens
    if served.serving.compile:
        assert served.tree_widths == [9]  # every tree, smaller ones too, padded to the warmed width


def test_the_caches_keep_exactly_the_accepted_path(target, model_draft):
    """After a tree verification and keep_path, the target's cache and the draft's hold what reading the kept
    context from scratch would (the path's rows moved next to the root, nothing else)."""
    ids = prompts()[2]
    served = as_served(target)
    cache = served.new_cache(64)
    served.prefill(ids[:, :-1], cache)
    session = model_draft.start(ids, 64)
    tree = session.propose_tree(ids[0], TreeShape(3, 3, 18), 0.0, None)
    path = tree.path(max(range(len(tree)), key=lambda n: (tree.depths[n], -n)))  # a deepest node's path, depth 3
    assert len(path) == 3 and path != [0, 1, 2]  # rows must move
    logits, _ = served.verify_tree(ids[0, -1:], tree, cache)
    served.keep_path(cache, ids.shape[1] - 1, path)
    session.keep_path(path)
    session.rollback(ids.shape[1] + len(path))
    kept = torch.cat([ids[0], torch.tensor([tree.tokens[n] for n in path])]).view(1, -1)
    fresh = DynamicCache(config=target.config)
    forward(target, kept, fresh)
    assert cache.get_seq_length() == kept.shape[1]
    for layer, reference in zip(cache.layers, fresh.layers, strict=True):
        assert torch.allclose(layer.keys, reference.keys) and torch.allclose(layer.values, reference.values)
    # the draft read the path's nodes it expanded (all but the leaf): its cache is the kept context but the leaf
    fresh_draft = DynamicCache(config=model_draft.model.config)
    forward(model_draft.model, kept[:, :-1], fresh_draft)
    assert session.cache.get_seq_length() == kept.shape[1] - 1
    for layer, reference in zip(session.cache.layers, fresh_draft.layers, strict=True):
        assert torch.allclose(layer.keys, reference.keys)
    # the verification's rows are the target's logits of the path, as a plain forward over it computes them
    plain = target(kept).logits[0, ids.shape[1] - 1:]
    rows = [0] + [n + 1 for n in path]
    assert torch.allclose(logits[rows], plain, atol=1e-9)


def test_the_greedy_replay_walks_the_real_tree_loops_blocks(target, model_draft):
    for draft in (model_draft, PromptLookupDraft(), HybridDraft(model_draft)):
        for shape in (TreeShape(2, 3, 6), TreeShape(4, 4, 16)):
            for ids in prompts(2):
                ref = target_generate(target, ids, max_new_tokens=20, eos_token_id=None)
                real = speculative_generate(target, draft, ids, gamma_policy=FixedGamma(shape.reach),
                                            max_new_tokens=20, eos_token_id=None, tree=shape)
                blocks = draft.greedy_tree_blocks(ids, ref.tokens, 64, shape)
                got = replay(ref.tokens, blocks, policy=FixedGamma(shape.reach), prompt_len=ids.shape[1],
                             max_new_tokens=20, eos_token_id=None)
                assert got.blocks == real.blocks


def test_a_draft_that_cannot_rank_alternatives_is_refused(target):
    class Ranked(PromptLookupDraft):
        proposes_trees = False

    with pytest.raises(ValueError, match="decode.tree"):
        speculative_generate(target, Ranked(), prompts()[0], gamma_policy=FixedGamma(2), max_new_tokens=4,
                             eos_token_id=None, tree=TreeShape(2, 2, 4))


# ------------------------------------------------------------------------------------ sampling: exact


TOY_TREE = Tree([1, 2, 3, 4, 5], [-1, -1, -1, 0, 0])  # three children of the root; two below the first


def toy_rows(seed: int) -> torch.Tensor:
    """Target rows p [N + 1, V] for TOY_TREE: the root's and each node's next-token distribution."""
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(len(TOY_TREE) + 1, SAMPLING_V, generator=gen) * 1.5, -1).double()


def emitted(verifier, tree: Tree, p: torch.Tensor, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n verifications: the first emitted token, and the second where the first was node 0's token (else -1)."""
    gen = torch.Generator().manual_seed(0)
    first, second = np.empty(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    for i in range(n):
        path, token = verifier(p, tree, gen)
        tokens = [tree.tokens[node] for node in path] + [token]
        first[i] = tokens[0]
        if path[:1] == [0]:
            second[i] = tokens[1]
    return first, second


def wrong_residual(probs, tree, generator):
    """The acceptance test of `accept_sampled`, but every rejection leaves p as it was (no residual)."""
    path, node = [], -1
    while True:
        p = probs[node + 1]
        child = next((c for c in tree.children(node)
                      if float(torch.rand((), generator=generator)) < float(p[tree.tokens[c]])), None)
        if child is None:
            return path, int(torch.multinomial(p, 1, generator=generator))
        path.append(child)
        node = child


@pytest.mark.parametrize("seed", [0, 1])
def test_tree_sampling_emits_the_targets_distribution_at_every_depth(seed):
    p = toy_rows(seed)
    first, second = emitted(accept_sampled, TOY_TREE, p, 12_000)
    assert chi2_pvalue(first, p[0].numpy()) > P_THRESHOLD
    assert chi2_pvalue(second[second >= 0], p[1].numpy()) > P_THRESHOLD  # after node 0: node 0's row
    # acceptance is the target's mass on the root's children (deterministic picks): sum of p over tokens 1..3
    accepted = np.isin(first, [1, 2, 3]).mean()
    assert abs(accepted - p[0, 1:4].sum().item()) < 0.02


def test_sampled_siblings_with_their_distribution_are_exact_too():
    """Children drawn independently from q (repeats allowed) and verified with q: SpecInfer's case."""
    p = toy_rows(3)
    gen = torch.Generator().manual_seed(1)
    q = torch.softmax(torch.randn(SAMPLING_V, generator=gen) * 2, -1).double()
    firsts = []
    for _ in range(6000):
        tokens = torch.multinomial(q, 3, replacement=True, generator=gen).tolist()
        tree = Tree(tokens, [-1, -1, -1], q.expand(3, -1))
        path, token = accept_sampled(p, tree, gen)
        firsts.append(tree.tokens[path[0]] if path else token)
    assert chi2_pvalue(np.array(firsts), p[0].numpy()) > P_THRESHOLD


def test_a_wrong_residual_is_detected():
    p = toy_rows(0)
    first, _ = emitted(wrong_residual, TOY_TREE, p, 12_000)
    assert chi2_pvalue(first, p[0].numpy()) < P_THRESHOLD


@pytest.fixture(scope="module")
def sampling_models():
    return (tiny_model(10, vocab=SAMPLING_V, init_std=0.2),
            ModelDraft(tiny_model(11, vocab=SAMPLING_V, layers=1, init_std=0.2)))


def test_tree_sampling_end_to_end_is_distributed_as_the_target(sampling_models, monkeypatch):
    target, draft = sampling_models
    prompt, temperature = torch.tensor([[3]]), 0.7
    exact = exact_two_token_distribution(target, prompt, temperature)

    def spec(gen):
        return speculative_generate(target, draft, prompt, gamma_policy=FixedGamma(2), max_new_tokens=3,
                                    eos_token_id=None, temperature=temperature, generator=gen,
                                    tree=TreeShape(3, 2, 6)).tokens

    assert chi2_pvalue(sample_two_tokens(spec, 1200), exact) > P_THRESHOLD
    monkeypatch.setattr(spec_mod, "accept_sampled", wrong_residual)
    assert chi2_pvalue(sample_two_tokens(spec, 1200), exact) < P_THRESHOLD


def test_greedy_verification_follows_the_targets_argmax():
    logits = torch.full((len(TOY_TREE) + 1, SAMPLING_V), -5.0)
    logits[0, 1] = logits[1, 5] = logits[5, 0] = 5.0  # root -> 1 (node 0) -> 5 (node 4) -> 0 (not a child)
    assert accept_greedy(logits, TOY_TREE) == ([0, 4], 0)


# ------------------------------------------------------------------- sampling: the root's children drawn


def test_drawn_root_children_are_named_parsed_and_ignored_when_greedy():
    shape = TreeShape.parse("k4-d3-n12+lookup8+sample")
    assert shape == TreeShape(4, 3, 12, 8, sample="first") and shape.name == "k4-d3-n12+lookup8+sample"
    assert TreeShape.parse("k4-d4-n8+sample").lookup == 0 and TreeShape.parse("k4-d4-n8").sample == ""
    for how in ("last", "all"):
        assert TreeShape.parse(f"k4-d3-n12+lookup8+sample-{how}") == TreeShape(4, 3, 12, 8, sample=how)
        assert TreeShape(4, 3, 12, 8, sample=how).name == f"k4-d3-n12+lookup8+sample-{how}"
        assert tree_shape({"top_k": 4, "depth": 4, "nodes": 8, "sample": how}).name == f"k4-d4-n8+sample-{how}"
    assert tree_shape({"top_k": 4, "depth": 4, "nodes": 8, "sample_first": True}).name == "k4-d4-n8+sample"
    assert tree_shape({"top_k": 4, "depth": 4, "nodes": 8, "sample": False}).name == "k4-d4-n8"
    assert TreeShape.parse("k4-d4-n8+sample-all").capped(2).sample == "all"
    with pytest.raises(ValueError, match="sample_first"):
        tree_shape({"top_k": 4, "depth": 4, "nodes": 8, "sample_first": "yes"})
    with pytest.raises(ValueError, match="decode.tree.sample must be off or one of first, last, all"):
        tree_shape({"top_k": 4, "depth": 4, "nodes": 8, "sample": "middle"})
    with pytest.raises(ValueError, match=r"\+sample"):
        TreeShape.parse("k4-d4-n8+sample+lookup4")
    with pytest.raises(ValueError, match=r"\+sample"):
        TreeShape.parse("k4-d4-n8+sample-middle")
    assert TreeShape.parse("k4-d2-n3+sample").nodes == 3  # one pinned child fits any budget
    with pytest.raises(ValueError, match=r"decode.tree.nodes \(3\) must be at least decode.tree.top_k \(4\)"):
        TreeShape.parse("k4-d2-n3+sample-all")


def test_ranked_draws_are_named_parsed_and_refused_without_draws():
    shape = TreeShape.parse("k4-d3-n12+lookup8+sample-all+ranked")
    assert shape == TreeShape(4, 3, 12, 8, sample="all", ranked=True)
    assert shape.name == "k4-d3-n12+lookup8+sample-all+ranked" and shape.capped(2).ranked
    assert TreeShape.parse("k4-d4-n8+sample+ranked").name == "k4-d4-n8+sample+ranked"
    assert tree_shape({"top_k": 4, "depth": 4, "nodes": 8, "sample": "all", "ranked": True}).ranked
    assert not TreeShape.parse("k4-d4-n8+sample-all").ranked
    with pytest.raises(ValueError, match="decode.tree.ranked ranks the root's drawn children: it needs"):
        TreeShape.parse("k4-d4-n8+ranked")
    with pytest.raises(ValueError, match="decode.tree.ranked must be true or false"):
        tree_shape({"top_k": 4, "depth": 4, "nodes": 8, "sample": "all", "ranked": "yes"})
    with pytest.raises(ValueError, match="both sample and sample_first"):
        tree_shape({"top_k": 4, "depth": 4, "nodes": 8, "sample": "all", "sample_first": True})


def test_ranked_draws_give_an_unlikely_drawn_child_a_top_picks_room():
    q = torch.full((SAMPLING_V,), 0.05 / (SAMPLING_V - 3)).index_put((torch.tensor([0, 1, 2]),),
                                                                     torch.tensor([0.6, 0.25, 0.1]))
    unlikely, likely = 2, 0
    under_unlikely = torch.log_softmax(torch.tensor([3.0] + [0.0] * (SAMPLING_V - 1)), -1)  # a sure next token
    under_others = torch.log_softmax(torch.tensor([1.5] + [0.0] * (SAMPLING_V - 1)), -1)  # a likelier guess

    def step(pool, frontier):
        return torch.stack([under_unlikely if pool.tokens[n] == unlikely else under_others for n in frontier])

    seed = next(s for s in range(1000) if int(torch.multinomial(q, 1, generator=torch.Generator().manual_seed(s)))
                == unlikely)

    def tree(ranked):  # the first child drawn: the unlikely token; the second the likeliest; room for one more
        shape = TreeShape(2, 2, 3, sample="first", ranked=ranked)
        out = expand(q.log(), step, shape, lambda ids: ids, temperature=1.0,
                     generator=torch.Generator().manual_seed(seed))
        assert [out.tokens[n] for n in out.children(-1)] == [unlikely, likely]
        return out

    assert tree(ranked=True).children(0) != [] and tree(ranked=True).children(1) == []
    assert tree(ranked=False).children(0) == [] and tree(ranked=False).children(1) != []  # negative control


def drawn_tree(q_log: torch.Tensor, generator: torch.Generator, shape: TreeShape, unpinned: bool = False) -> Tree:
    """`expand` below a root whose children have log q, deeper levels from a fixed random draft. Negative control
    `unpinned`: the first drawn child (and what hangs below it) dropped unless it drew the likeliest token it could,
    so that whether it is in the tree depends on what was drawn (what the pin rules out)."""
    rows = torch.log_softmax(torch.randn(64, SAMPLING_V, generator=torch.Generator().manual_seed(7)), -1).double()
    tree = expand(q_log, lambda pool, frontier: rows[torch.tensor(frontier) % 64], shape, lambda ids: ids,
                  temperature=1.0, generator=generator)
    drawn = drawn_children(tree)[0]
    if unpinned and tree.tokens[drawn] != int(tree.q[drawn].argmax()):
        keep = [n for n in range(len(tree)) if tree.depths[n] == 1 and n != drawn]
        tree = Tree([tree.tokens[n] for n in keep], [-1] * len(keep), tree.q[keep])
    return tree


def drawn_children(tree: Tree) -> list[int]:
    """The nodes verified as draws: those whose row of q is not one-hot."""
    return [n for n in range(len(tree)) if tree.q is not None and float(tree.q[n].max()) < 1.0]


def against_a_sharper_q(probs, tree, generator):
    """`accept_sampled` told that every drawn child came from its q^2 (normalised), not from its q."""
    if tree.q is None:  # no room left for a proposal
        return accept_sampled(probs, tree, generator)
    q = tree.q.clone()
    for n in drawn_children(tree):
        q[n] = q[n] ** 2 / (q[n] ** 2).sum()
    return accept_sampled(probs, Tree(tree.tokens, tree.parents, q), generator)


def first_tokens(p: torch.Tensor, q_log: torch.Tensor, shape: TreeShape, n: int, verify=accept_sampled,
                 **kw) -> np.ndarray:
    gen = torch.Generator().manual_seed(0)
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        tree = drawn_tree(q_log, gen, shape, **kw)
        rows = p.expand(len(tree) + 1, -1)
        path, token = verify(rows, tree, gen)
        out[i] = tree.tokens[path[0]] if path else token
    return out


@pytest.mark.parametrize("how, drawn", [("first", [0]), ("last", [2]), ("all", [0, 1, 2])])
def test_drawn_root_children_verified_as_draws_emit_the_targets_distribution(how, drawn):
    p = toy_rows(4)[0]
    q_log = torch.log_softmax(torch.randn(SAMPLING_V, generator=torch.Generator().manual_seed(5)) * 2, -1).double()
    shape = TreeShape(3, 2, 5, sample=how)
    tree = drawn_tree(q_log, torch.Generator().manual_seed(1), shape)
    assert tree.pinned == tuple(range(drawn[-1] + 1)) and tree.children(-1)[: len(tree.pinned)] == list(tree.pinned)
    assert drawn_children(tree) == drawn and all(tree.q[n].sum().item() == pytest.approx(1.0) for n in drawn)
    for n in drawn:  # drawn from q without the children before it
        assert all(float(tree.q[n, tree.tokens[c]]) == 0.0 for c in range(n))
    assert chi2_pvalue(first_tokens(p, q_log, shape, 8000), p.numpy()) > P_THRESHOLD

    # negative controls: the draw verified against a sharper q than it came from; its presence depending on it
    assert chi2_pvalue(first_tokens(p, q_log, shape, 8000, verify=against_a_sharper_q), p.numpy()) < P_THRESHOLD
    assert chi2_pvalue(first_tokens(p, q_log, shape, 8000, unpinned=True), p.numpy()) < P_THRESHOLD


def test_grafting_keeps_the_drawn_child_and_its_distribution():
    q = torch.eye(8)[[5, 6, 7, 0]]
    q[0] = torch.full((8,), 1 / 8)
    # the drawn child ranks last, so only its pin keeps it; the chain is cut to 3 so that it fits
    tree = Tree([5, 6, 7, 0], [-1, -1, 1, -1], q, scores=[-3.0, -0.1, -0.2, -0.3], pinned=(0,))
    grafted, origin = tree.graft([1, 2, 3, 4], budget=4)
    assert grafted.pinned == (0,) and grafted.tokens[0] == 5 and origin[0] == 0 and len(grafted) == 4
    assert torch.equal(grafted.q[0], q[0]) and [grafted.tokens[n] for n in grafted.children(-1)] == [5, 1]
    assert all(grafted.q[n, grafted.tokens[n]] == 1.0 for n in range(1, 4))


# +sample-last pins the root's children as +sample-all does, and +ranked changes only which deterministic nodes are
# kept: +sample-last's and plain +sample-all's own exactness is the unit test's above
@pytest.mark.parametrize("shape", [TreeShape(3, 2, 6, sample="first"), TreeShape(3, 2, 6, lookup=2, sample="first"),
                                   TreeShape(3, 2, 6, lookup=2, sample="all", ranked=True)],
                         ids=["tree", "hybrid", "hybrid-all-ranked"])
def test_trees_with_drawn_root_children_end_to_end_are_distributed_as_the_target(sampling_models, monkeypatch,
                                                                                  shape):
    target, draft = sampling_models
    prompt, temperature = torch.tensor([[3, 1, 3]]), 0.7
    exact = exact_two_token_distribution(target, prompt, temperature)

    def spec(gen):
        return speculative_generate(target, draft, prompt, gamma_policy=FixedGamma(2), max_new_tokens=3,
                                    eos_token_id=None, temperature=temperature, generator=gen, tree=shape).tokens

    session = hybrid.for_shape(draft, shape).start(prompt, SAMPLING_V)
    pinned = (0,) if shape.sample == "first" else (0, 1, 2)
    assert session.propose_tree(prompt[0], shape, temperature, torch.Generator().manual_seed(0)).pinned == pinned
    assert chi2_pvalue(sample_two_tokens(spec, 1200), exact) > P_THRESHOLD
    monkeypatch.setattr(spec_mod, "accept_sampled", wrong_residual)  # negative control (the drawn child's own: above)
    assert chi2_pvalue(sample_two_tokens(spec, 1200), exact) < P_THRESHOLD


# ------------------------------------------------------------------- sampling: every depth drawn


def test_every_depth_drawn_is_named_and_refused_where_its_draws_do_not_fit():
    shape = TreeShape.parse("k4-d3-n20+lookup8+sample-deep")
    assert shape == TreeShape(4, 3, 20, 8, sample="deep") and shape.name == "k4-d3-n20+lookup8+sample-deep"
    assert tree_shape({"top_k": 1, "depth": 3, "nodes": 11, "lookup": 8, "sample": "deep"}).name == \
        "k1-d3-n11+lookup8+sample-deep"
    with pytest.raises(ValueError, match=r"decode.tree.nodes \(12\) must be at least top_k \* depth \(16\)"):
        TreeShape.parse("k4-d4-n12+sample-deep")


def test_every_depth_drawn_keeps_top_k_draws_per_depth_each_with_its_distribution():
    q_log = torch.log_softmax(torch.randn(SAMPLING_V, generator=torch.Generator().manual_seed(5)) * 2, -1).double()
    tree = drawn_tree(q_log, torch.Generator().manual_seed(1), TreeShape(3, 3, 9, sample="deep"))
    assert [tree.depths.count(d) for d in (1, 2, 3)] == [3, 3, 3] and tree.pinned == tuple(range(9))
    assert drawn_children(tree) == list(range(9))  # every node verified as a draw
    for n in range(9):  # drawn from its parent's q without the siblings drawn before it
        earlier = [c for c in tree.children(tree.parents[n]) if c < n]
        assert all(float(tree.q[n, tree.tokens[c]]) == 0.0 for c in earlier)
        assert tree.q[n].sum().item() == pytest.approx(1.0)


def deeper_draws_against_a_sharper_q(probs, tree, generator):
    """`accept_sampled` told that every draw below the root's children came from its q^2 (normalised), not its q."""
    if tree.q is None:
        return accept_sampled(probs, tree, generator)
    q = tree.q.clone()
    for n in drawn_children(tree):
        if tree.depths[n] >= 2:
            q[n] = q[n] ** 2 / (q[n] ** 2).sum()
    return accept_sampled(probs, Tree(tree.tokens, tree.parents, q), generator)


def test_a_hybrid_drawn_at_every_depth_end_to_end_is_distributed_as_the_target(sampling_models, monkeypatch):
    target, draft = sampling_models
    prompt, temperature, shape = torch.tensor([[3, 1, 3]]), 0.7, TreeShape(3, 2, 8, lookup=2, sample="deep")
    exact = exact_two_token_distribution(target, prompt, temperature)

    def spec(gen):
        return speculative_generate(target, draft, prompt, gamma_policy=FixedGamma(2), max_new_tokens=3,
                                    eos_token_id=None, temperature=temperature, generator=gen, tree=shape).tokens

    session = hybrid.for_shape(draft, shape).start(prompt, SAMPLING_V)
    tree = session.propose_tree(prompt[0], shape, temperature, torch.Generator().manual_seed(0))
    assert len(tree.pinned) == 6 and set(drawn_children(tree)) <= set(tree.pinned)  # the graft moved no draw out
    assert sorted(tree.depths[n] for n in tree.pinned) == [1, 1, 1, 2, 2, 2]
    assert chi2_pvalue(sample_two_tokens(spec, 1200), exact) > P_THRESHOLD
    monkeypatch.setattr(spec_mod, "accept_sampled", deeper_draws_against_a_sharper_q)  # negative control: depth 2
    assert chi2_pvalue(sample_two_tokens(spec, 1200), exact) < P_THRESHOLD
