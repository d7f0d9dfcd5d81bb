"""Per-token divergences: exact values, chunking changes nothing, gradients reach only the student, finite
values for -inf teacher logits, GKD's generalised JSD."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from adaspec.distill.divergence import support_token_divergence, token_divergence, topk_divergence


def logits(n=37, v=50, seed=0):
    return torch.randn(n, v, generator=torch.Generator().manual_seed(seed)) * 3


def test_forward_kl_matches_the_definition():
    t, s = logits(seed=1), logits(seed=2)
    expected = F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True, reduction="none").sum(-1)
    torch.testing.assert_close(token_divergence(t, s, "forward_kl"), expected)
    assert (token_divergence(t, t, "forward_kl").abs() < 1e-5).all()


@pytest.mark.parametrize("kind", ["forward_kl", "reverse_kl", "tvd", "jsd", "nla", "lk"])
def test_chunking_gives_the_same_values_and_gradients(kind):
    t = logits(seed=3)
    s1 = logits(seed=4).requires_grad_()
    s2 = s1.detach().clone().requires_grad_()
    a = token_divergence(t, s1, kind, chunk_size=5)
    b = token_divergence(t, s2, kind, chunk_size=10_000)
    torch.testing.assert_close(a, b)
    a.sum().backward()
    b.sum().backward()
    torch.testing.assert_close(s1.grad, s2.grad)
    assert (a >= -1e-6).all()


def test_teacher_gets_no_gradient():
    t = logits(seed=5).requires_grad_()
    s = logits(seed=6).requires_grad_()
    token_divergence(t, s).sum().backward()
    assert t.grad is None and s.grad is not None


def test_unknown_divergence_is_an_error():
    with pytest.raises(ValueError, match="forward_kl"):
        token_divergence(logits(), logits(seed=9), "js")


KINDS = ["forward_kl", "reverse_kl", "tvd", "jsd", "nla", "lk"]


def masked_teacher(n=12, v=30, seed=11) -> torch.Tensor:
    """Teacher logits with -inf entries: masked vocabulary columns, and a token with a single finite logit."""
    t = logits(n, v, seed)
    t[:, 5:9] = float("-inf")
    t[0, :] = float("-inf")
    t[0, 3] = 2.0
    return t


@pytest.mark.parametrize("kind", KINDS)
def test_minus_inf_teacher_logits_give_finite_values_and_gradients(kind):
    t = masked_teacher()
    s = logits(12, 30, seed=12).requires_grad_()
    values = token_divergence(t, s, kind, chunk_size=5)
    assert torch.isfinite(values).all() and (values >= -1e-6).all()
    values.sum().backward()
    assert torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0


def test_minus_inf_entries_follow_zero_log_zero():
    t, s = masked_teacher(), logits(12, 30, seed=13)
    p, log_q = t.softmax(-1), s.log_softmax(-1)
    expected = torch.xlogy(p, p).sum(-1) - (p * log_q).sum(-1)  # xlogy: 0 log 0 = 0, as KLDivLoss
    torch.testing.assert_close(token_divergence(t, s, "forward_kl"), expected)
    q = log_q.exp()
    torch.testing.assert_close(token_divergence(t, s, "tvd"), 0.5 * (p - q).abs().sum(-1))
    # reverse KL: a teacher probability of 0 counts as float32's smallest normal number
    floor = torch.finfo(torch.float32).tiny
    expected = (q * (log_q - p.clamp_min(floor).log())).sum(-1)
    torch.testing.assert_close(token_divergence(t, s, "reverse_kl"), expected)


def gkd_jsd(t: torch.Tensor, s: torch.Tensor, beta: float) -> torch.Tensor:
    """GKD's generalised JSD (TRL's generalized_jsd_loss, per token) for finite logits."""
    log_p, log_q = F.log_softmax(t, -1), F.log_softmax(s, -1)
    log_m = torch.logsumexp(torch.stack([log_q + math.log(1 - beta), log_p + math.log(beta)]), dim=0)
    kl_teacher = F.kl_div(log_m, log_p, reduction="none", log_target=True).sum(-1)
    kl_student = F.kl_div(log_m, log_q, reduction="none", log_target=True).sum(-1)
    return beta * kl_teacher + (1 - beta) * kl_student


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9])
def test_jsd_matches_gkd(beta):
    t, s = logits(seed=14), logits(seed=15)
    torch.testing.assert_close(token_divergence(t, s, "jsd", jsd_beta=beta), gkd_jsd(t, s, beta))
    assert token_divergence(t, t, "jsd", jsd_beta=beta).abs().max() < 1e-5
    bound = -(beta * math.log(beta) + (1 - beta) * math.log(1 - beta))  # JSD_beta <= the entropy of beta
    assert (token_divergence(t, s, "jsd", jsd_beta=beta) <= bound + 1e-5).all()


def test_jsd_at_beta_zero_and_one_is_the_forward_and_the_reverse_kl_exactly():
    t = masked_teacher()
    s1, s2 = logits(12, 30, seed=16).requires_grad_(), logits(12, 30, seed=16).requires_grad_()
    for beta, kind in ((0.0, "forward_kl"), (1.0, "reverse_kl")):
        jsd, plain = token_divergence(t, s1, "jsd", jsd_beta=beta), token_divergence(t, s2, kind)
        assert torch.equal(jsd, plain)
        jsd.sum().backward()
        plain.sum().backward()
        assert torch.equal(s1.grad, s2.grad)
        s1.grad = s2.grad = None


def test_jsd_of_a_reduced_vocabulary_draft_is_the_jsd_of_its_scattered_distribution():
    teacher, student = logits(9, 30, 17), logits(9, 12, 18)
    support = torch.arange(0, 30, 30 // 12)[:12]
    teacher[:, 1] = float("-inf")  # outside the support
    p = teacher.softmax(-1)
    q = torch.zeros(9, 30).index_copy_(-1, support, student.softmax(-1))
    for beta in (0.3, 0.7):
        m = beta * p + (1 - beta) * q
        expected = beta * (torch.xlogy(p, p) - torch.xlogy(p, m)).sum(-1)
        expected += (1 - beta) * (torch.xlogy(q, q) - torch.xlogy(q, m)).sum(-1)
        got = support_token_divergence(teacher, student, support, "jsd", jsd_beta=beta)
        torch.testing.assert_close(got, expected)
    full = logits(9, 30, 19)
    torch.testing.assert_close(
        support_token_divergence(teacher, full, torch.arange(30), "jsd", jsd_beta=0.4),
        token_divergence(teacher, full, "jsd", jsd_beta=0.4),
    )


def topk_form(teacher: torch.Tensor, k: int):
    values, ids = teacher.log_softmax(-1).topk(k, -1)
    return values, ids, (1 - values.exp().sum(-1)).clamp_min(0)


@pytest.mark.parametrize("kind", ["reverse_kl", "tvd", "jsd", "nla"])
def test_topk_divergences_are_exact_with_the_whole_vocabulary_and_lower_bounds_below_it(kind):
    """The top-K cache's other divergences: the divergence of the coarsened pair (top-K cells + one bucket)."""
    teacher, student = logits(20, 40, 21), logits(20, 40, 22).requires_grad_()
    exact = token_divergence(teacher, student, kind, jsd_beta=0.3)
    whole = topk_divergence(*topk_form(teacher, 40), student, kind, jsd_beta=0.3)
    torch.testing.assert_close(whole, exact, atol=1e-5, rtol=1e-4)
    coarse = topk_divergence(*topk_form(teacher, 6), student, kind, jsd_beta=0.3, chunk_size=7)
    assert (coarse <= exact + 1e-5).all() and (coarse < exact - 1e-3).any()
    coarse.sum().backward()
    assert torch.isfinite(student.grad).all() and student.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["reverse_kl", "tvd", "jsd", "nla", "lk"])
def test_topk_divergences_of_a_reduced_draft_match_its_support_divergence(kind):
    """A reduced draft (12 of 30 ids) against the whole vocabulary as top-K: the support convention exactly
    (the teacher's mass off the support is the bucket, where the draft has none); top-K ids outside the
    support give finite values and gradients."""
    teacher, student = logits(9, 30, 23), logits(9, 12, 24).requires_grad_()
    support = torch.arange(0, 30, 30 // 12)[:12]
    target_to_draft = torch.full((30,), -1).index_copy_(0, support, torch.arange(12))
    expected = support_token_divergence(teacher, student, support, kind, jsd_beta=0.6)
    got = topk_divergence(*topk_form(teacher, 30), student, kind, target_to_draft=target_to_draft, jsd_beta=0.6)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    partial = topk_divergence(*topk_form(teacher, 5), student, kind, target_to_draft=target_to_draft, jsd_beta=0.6)
    partial.sum().backward()
    assert torch.isfinite(partial).all() and torch.isfinite(student.grad).all()


def test_topk_forward_kl_and_jsd_at_beta_zero_are_todays_topk_kl_exactly():
    from adaspec.distill.teacher_cache import topk_forward_kl

    teacher, student = logits(15, 40, 25), logits(15, 40, 26)
    form = topk_form(teacher, 8)
    today = topk_forward_kl(*form, student)
    assert torch.equal(topk_divergence(*form, student, "forward_kl"), today)
    assert torch.equal(topk_divergence(*form, student, "jsd", jsd_beta=0.0), today)


# ---------------------------------------------------------------- acceptance-direct objectives, by hand
# p = (0.5, 0.3, 0.2), q = (0.2, 0.3, 0.5): TVD 0.3, alpha 0.7; KL(p || q) = 0.5 ln 2.5 + 0.2 ln 0.4 = 0.2748872;
# lambda = exp(-3 * 0.7) = 0.1224564.
P, Q = torch.tensor([[0.5, 0.3, 0.2]]).log(), torch.tensor([[0.2, 0.3, 0.5]]).log()


def test_nla_is_minus_log_acceptance_by_hand():
    assert token_divergence(P, Q, "nla").item() == pytest.approx(0.3566749, abs=1e-6)  # -ln 0.7
    disjoint = token_divergence(torch.tensor([[0.0, -math.inf]]), torch.tensor([[-math.inf, 0.0]]), "nla")
    assert disjoint.item() == pytest.approx(11.5129255, abs=1e-4)  # alpha 0, floored at 1e-5 as speculators does


def test_lk_is_speculators_hybrid_by_hand_with_no_gradient_through_its_weight():
    q = Q.clone().requires_grad_()
    lk = token_divergence(P, q, "lk")
    assert lk.item() == pytest.approx(0.1224564 * 0.2748872 + 0.8775436 * 0.3, abs=1e-6)  # 0.2969248
    lk.sum().backward()
    q_kl, q_tv = Q.clone().requires_grad_(), Q.clone().requires_grad_()
    (0.1224564 * token_divergence(P, q_kl, "forward_kl")).sum().backward()
    (0.8775436 * token_divergence(P, q_tv, "tvd")).sum().backward()
    torch.testing.assert_close(q.grad, q_kl.grad + q_tv.grad, atol=1e-6, rtol=1e-5)


def test_acceptance_objectives_of_a_reduced_draft_count_the_teachers_mass_off_its_support_as_rejected():
    """p = (0.4, 0.3, 0.2, 0.1) over 4 target tokens, a draft over tokens {0, 1} with q = (0.5, 0.5): TVD =
    (0.1 + 0.2 + 0.3) / 2 = 0.3, alpha 0.7; the credited forward KL is 0.4 ln(0.4 / 0.35) + 0.3 ln(0.3 / 0.35)."""
    teacher, student, support = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log(), torch.zeros(1, 2), torch.tensor([0, 1])
    kl = 0.4 * math.log(0.4 / 0.35) + 0.3 * math.log(0.3 / 0.35)
    assert support_token_divergence(teacher, student, support, "nla").item() == pytest.approx(-math.log(0.7), abs=1e-6)
    lk = support_token_divergence(teacher, student, support, "lk").item()
    assert lk == pytest.approx(math.exp(-2.1) * kl + (1 - math.exp(-2.1)) * 0.3, abs=1e-6)
