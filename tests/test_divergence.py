"""Per-token divergences: exact values, chunking changes nothing, gradients reach only the student."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from adaspec.distill.divergence import token_divergence


def logits(n=37, v=50, seed=0):
    return torch.randn(n, v, generator=torch.Generator().manual_seed(seed)) * 3


def test_forward_kl_matches_the_definition():
    t, s = logits(seed=1), logits(seed=2)
    expected = F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True, reduction="none").sum(-1)
    torch.testing.assert_close(token_divergence(t, s, "forward_kl"), expected)
    assert (token_divergence(t, t, "forward_kl").abs() < 1e-5).all()


@pytest.mark.parametrize("kind", ["forward_kl", "reverse_kl", "tvd"])
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
