"""decode.draft_temperature: at temperature > 0 the draft proposes at its own temperature, and the output stays
distributed as the target's samples (a proposal is accepted with min(1, p/q) of the q it was drawn from)."""

from __future__ import annotations

import pytest
import torch

from adaspec.decoding import FixedGamma, speculative_generate
from adaspec.decoding.tree import TreeShape
from adaspec.drafts import eagle3 as eagle3_mod
from adaspec.drafts.eagle3 import Eagle3Draft
from adaspec.errors import UserError
from adaspec.evaluation.run import setting_name
from adaspec.models.eagle3 import Eagle3Head
from adaspec.toolkit import checked_config
from tests.decoding.test_serving import tiny_llama
from tests.decoding.test_speculative import (
    P_THRESHOLD,
    SAMPLING_V,
    chi2_pvalue,
    exact_two_token_distribution,
    sample_two_tokens,
)

TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(10, vocab=SAMPLING_V, init_std=0.2)
    torch.manual_seed(2)
    head = Eagle3Head.from_target(target, SAMPLING_V)
    with torch.no_grad():
        head.lm_head.weight.mul_(3)  # a head that disagrees with the target
    return target, Eagle3Draft(head)


def generate(pair, gen, draft_temperature=None, tree=None, max_new_tokens=3):
    target, draft = pair
    return speculative_generate(target, draft, torch.tensor([[3]]), gamma_policy=FixedGamma(2),
                                max_new_tokens=max_new_tokens, eos_token_id=None, temperature=TEMPERATURE,
                                generator=gen, tree=tree, draft_temperature=draft_temperature)


@pytest.mark.parametrize("tree", [None, TreeShape(3, 2, 6)], ids=["chain", "tree"])
def test_a_sharpened_draft_keeps_the_target_distribution(pair, tree):
    exact = exact_two_token_distribution(pair[0], torch.tensor([[3]]), TEMPERATURE)
    samples = sample_two_tokens(lambda gen: generate(pair, gen, 0.3, tree).tokens, 1200)
    assert chi2_pvalue(samples, exact) > P_THRESHOLD


def test_a_q_that_is_not_the_one_drawn_from_is_caught(pair, monkeypatch):
    """The control: proposals drawn at the draft's temperature but verified against its q at the target's (what
    a loop that forgot to hand the draft its temperature and the q together would do) are not the target's
    distribution."""
    exact = exact_two_token_distribution(pair[0], torch.tensor([[3]]), TEMPERATURE)
    propose = eagle3_mod._Eagle3Session.propose

    def q_at_the_targets_temperature(self, context, gamma, temperature, generator):
        tokens, q = propose(self, context, gamma, temperature, generator)
        return tokens, torch.softmax(q.clamp_min(1e-30).log() * temperature / TEMPERATURE, dim=-1)

    monkeypatch.setattr(eagle3_mod._Eagle3Session, "propose", q_at_the_targets_temperature)
    samples = sample_two_tokens(lambda gen: generate(pair, gen, 0.2).tokens, 1200)
    assert chi2_pvalue(samples, exact) < P_THRESHOLD


def test_the_draft_temperature_reaches_the_draft(pair):
    """The target's own temperature as the draft's changes nothing, bit for bit; another one changes the blocks."""
    def runs(draft_temperature):
        gen = torch.Generator().manual_seed(0)
        return [generate(pair, gen, draft_temperature, max_new_tokens=8) for _ in range(30)]

    default = runs(None)
    assert [r.tokens for r in runs(TEMPERATURE)] == [r.tokens for r in default]
    assert [r.blocks for r in runs(TEMPERATURE)] == [r.blocks for r in default]
    assert [r.blocks for r in runs(0.2)] != [r.blocks for r in default]


def test_greedy_decoding_ignores_the_draft_temperature(pair):
    target, draft = pair

    def greedy(draft_temperature):
        return speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), gamma_policy=FixedGamma(3),
                                    max_new_tokens=10, eos_token_id=None, draft_temperature=draft_temperature)

    assert greedy(0.2).blocks == greedy(None).blocks


def test_the_setting_is_checked_and_names_its_results_folder():
    with pytest.raises(UserError, match="decode.draft_temperature"):
        checked_config("decode.draft_temperature=0")
    sampled = checked_config("decode.temperature=1", "decode.draft_temperature=0.6")
    assert setting_name(sampled.decode) == "t1-dt0.6-g5"
    assert setting_name(checked_config("decode.temperature=1").decode) == "t1-g5"
    assert setting_name(checked_config("decode.draft_temperature=0.6").decode) == "greedy-g5"  # unread when greedy
