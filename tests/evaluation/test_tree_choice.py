"""decode.tree=auto (adaspec.evaluation.tree_choice): every candidate is weighed with the tau real tree decoding of
its shape gets, the choice is the candidate of highest expected speed-up, and each draft weighs only what it can
decode."""

from __future__ import annotations

import pytest
import torch

from adaspec.decoding import FixedGamma, speculative_generate, target_generate
from adaspec.decoding.tree import TreeShape, tree_shape
from adaspec.decoding.tree_shape import monitor_tree
from adaspec.drafts.hybrid import HybridDraft
from adaspec.drafts.model import ModelDraft
from adaspec.drafts.prompt_lookup import PromptLookupDraft
from adaspec.evaluation.tree_choice import CHAIN, candidates_for, choose_tree
from tests.decoding.conftest import noisy_copy, tiny_model
from tests.decoding.test_tree import prompts

SHAPES = [TreeShape(2, 3, 6), TreeShape(4, 4, 16), TreeShape(2, 3, 8, lookup=5)]
MAX_NEW = 20


class Unranked(PromptLookupDraft):
    proposes_trees = False


@pytest.fixture(scope="module")
def target():
    return tiny_model(0)


@pytest.fixture(scope="module")
def model_draft(target):
    """A draft accepted often enough that gamma and the tree's shape change tau."""
    return ModelDraft(noisy_copy(target, 0.1, 1))


def real_tau(target, draft, shape: TreeShape | None, ids_list, gamma: int, temperature: float = 0.0) -> float:
    generator = torch.Generator().manual_seed(0)
    runs = [speculative_generate(target, draft, ids, gamma_policy=FixedGamma(shape.reach if shape else gamma),
                                 max_new_tokens=MAX_NEW, eos_token_id=None, tree=shape, temperature=temperature,
                                 generator=generator) for ids in ids_list]
    return sum(len(r.tokens) for r in runs) / sum(r.target_calls for r in runs)


@pytest.mark.parametrize("kind", ["model", "prompt_lookup", "hybrid", "unranked"])
def test_each_candidate_carries_the_tau_real_decoding_gets_and_the_best_one_wins(target, model_draft, kind):
    draft = {"model": model_draft, "prompt_lookup": PromptLookupDraft(), "hybrid": HybridDraft(model_draft),
             "unranked": Unranked()}[kind]
    ids_list = prompts(3)
    outputs = [target_generate(target, ids, max_new_tokens=MAX_NEW, eos_token_id=None).tokens for ids in ids_list]
    shape, table = choose_tree(target, draft, ids_list, outputs, gamma=3, shapes=SHAPES, max_new_tokens=MAX_NEW,
                               eos_token_id=None)
    candidates = table["candidates"]
    expected_names = {"model": {CHAIN, *(s.name for s in SHAPES)}, "hybrid": {CHAIN, *(s.name for s in SHAPES)},
                      "prompt_lookup": {CHAIN, "k2-d3-n6", "k4-d4-n16"}, "unranked": {CHAIN}}[kind]
    assert set(candidates) == expected_names  # prompt lookup grafts no lookup branch; an unranked draft: chains
    for name, row in candidates.items():
        tree = None if name == CHAIN else TreeShape.parse(name)
        assert row["tau"] == pytest.approx(real_tau(target, draft, tree, ids_list, 3)), name
        assert row["expected_speedup"] == pytest.approx(
            row["tau"] * candidates[CHAIN]["expected_speedup"] / candidates[CHAIN]["tau"]
            * (candidates[CHAIN]["draft_s"] + candidates[CHAIN]["verify_s"]) / (row["draft_s"] + row["verify_s"]))
    best = max(candidates, key=lambda n: candidates[n]["expected_speedup"])
    assert table["chosen"] == best and table["prompts"] == 3
    assert shape == (None if best == CHAIN else TreeShape.parse(best))


def test_a_drawn_first_child_is_a_candidate_only_for_drafts_that_draw(model_draft):
    """`+sample` draws the root's first child from the draft's distribution; prompt lookup has none, so for it the
    shape would be its plain one again (and a hybrid draws as the draft inside it does)."""
    shapes = [TreeShape(2, 3, 6), TreeShape(2, 3, 6, sample="first")]
    assert candidates_for(model_draft, shapes) == candidates_for(HybridDraft(model_draft), shapes) == shapes
    assert candidates_for(PromptLookupDraft(), shapes) == shapes[:1]


def test_at_temperature_1_each_candidate_carries_the_tau_sampled_decoding_gets(target, model_draft):
    """Sampled acceptance is not greedy acceptance: at temperature > 0 every candidate is weighed with the tau that
    sampled speculative decoding of its shape gets on the calibration prompts (the evaluation's seed)."""
    draft = HybridDraft(model_draft)
    ids_list = prompts(3)
    outputs = [target_generate(target, ids, max_new_tokens=MAX_NEW, eos_token_id=None).tokens for ids in ids_list]
    tables = {t: choose_tree(target, draft, ids_list, outputs, gamma=3, shapes=SHAPES, max_new_tokens=MAX_NEW,
                             eos_token_id=None, temperature=t)[1] for t in (0.0, 1.0)}
    assert tables[0.0]["tau_from"] == "greedy replay"
    assert tables[1.0]["tau_from"] == "sampled decoding at temperature 1, seed 0"
    sampled, greedy = tables[1.0]["candidates"], tables[0.0]["candidates"]
    for name, row in sampled.items():
        tree = None if name == CHAIN else TreeShape.parse(name)
        assert row["tau"] == pytest.approx(real_tau(target, draft, tree, ids_list, 3, temperature=1.0)), name
    # the control: the greedy replay's tau, which used to stand in, differs
    assert any(sampled[n]["tau"] != pytest.approx(greedy[n]["tau"]) for n in sampled)


def test_auto_is_resolved_by_the_evaluation_only():
    with pytest.raises(ValueError, match="decode.tree=auto is chosen per draft by the evaluation"):
        tree_shape("auto")
    assert monitor_tree("auto") is None  # training's acceptance monitor decodes chains under auto
    assert monitor_tree("k2-d3-n6") == TreeShape(2, 3, 6)
