"""The head's training loss path: EAGLE-3's training-time test with the output layer run on the answer rows only
(`Eagle3Head.unrolled(rows=...)`, what stages 2 and 3 train with) equals the form it replaced (every position's
logits, then the answer rows picked: `answer_logits`), in value and in gradient, with right padding and grouped-query
heads, and within a stated tolerance under bfloat16 autocast; the passes' masks are seen by the comparison (a wrong
diagonal shift fails); the head's norms take the fused kernel under autocast and give what the op-by-op form gave."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from adaspec.distill.tokens import answer_logits
from adaspec.models.eagle3 import Eagle3Config, Eagle3Head, KVCache

B, T = 3, 11


def dense_unrolled(head: Eagle3Head, features, input_ids, steps: int, attention_mask=None, off_by: int = 0):
    """`Eagle3Head.unrolled` as it was before `rows`, verbatim but for `off_by` (a wrong shift of the diagonal keys)."""
    t = input_ids.shape[1]
    positions = torch.arange(t)
    embeds, cache, logits = head.embed_tokens(input_ids), KVCache(), []
    keep = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
    for k in range(steps):
        blocks = [positions[None, :] <= positions[:, None] - k]
        blocks += [positions[None, :] == positions[:, None] - (k - m) - (off_by if m < k else 0)
                   for m in range(1, k + 1)]
        masks = [b[None, None] if keep is None else b[None, None] & keep for b in blocks]
        mask = torch.cat(masks, dim=-1)
        mask[..., -t:] |= torch.eye(t, dtype=torch.bool)
        out = head.midlayer(embeds, features, positions, mask, cache)
        logits.append(head.lm_head(head.norm(out)))
        features = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
    return logits


def head_and_batch(dtype=torch.float64, kv_heads: int = 2):
    torch.manual_seed(0)
    config = Eagle3Config(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=kv_heads,
                          vocab_size=50, draft_vocab_size=40, target_layers=[1, 1, 1])
    head = Eagle3Head(config).to(dtype)
    ids = torch.randint(0, 50, (B, T))
    lengths = torch.tensor([T, T - 3, T - 6])  # right-padded, as the loader batches
    attention_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    features = torch.randn(B, T, 32, dtype=dtype)
    answers = torch.zeros(B, T - 1, dtype=torch.bool)  # answer_mask: a suffix of each example's real positions
    for b, n in enumerate(lengths.tolist()):
        answers[b, n // 2 : n - 1] = True
    return head, ids, attention_mask, features, answers


@pytest.mark.parametrize("kv_heads", [2, 4])
@pytest.mark.parametrize("steps", [1, 2, 3, 4])
def test_the_answer_rows_equal_the_full_forms_in_value_and_gradient(steps, kv_heads):
    head, ids, attention_mask, features, answers = head_and_batch(kv_heads=kv_heads)
    dense = dense_unrolled(head, features, ids, steps, attention_mask)
    fast = head.unrolled(features, ids, steps, attention_mask=attention_mask)
    for k in range(steps):
        assert torch.allclose(fast[k], dense[k], rtol=0, atol=1e-12), k
    # the output layer on the answer rows alone: the rows `answer_logits` reads, in its order
    rows = F.pad(answers, (0, 1))
    on_rows = head.unrolled(features, ids, steps, attention_mask=attention_mask, rows=rows)
    weights = [torch.randn_like(x) for x in on_rows]
    for k in range(steps):
        assert torch.allclose(on_rows[k], answer_logits(dense[k], answers), rtol=0, atol=1e-12), k
    grads = []
    for logits in (on_rows, [answer_logits(x, answers) for x in dense]):
        head.zero_grad()
        sum((w * x).sum() for w, x in zip(weights, logits, strict=True)).backward(retain_graph=True)
        grads.append({n: p.grad.clone() for n, p in head.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == 12  # every trainable weight but fc (unused)
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], rtol=0, atol=1e-10), name


def test_a_wrong_diagonal_shift_is_seen():
    head, ids, attention_mask, features, _ = head_and_batch()
    fast = head.unrolled(features, ids, 3, attention_mask=attention_mask)
    wrong = dense_unrolled(head, features, ids, 3, attention_mask, off_by=1)
    assert torch.allclose(fast[1], wrong[1], rtol=0, atol=1e-12)  # pass 1 has no earlier diagonal key to shift
    assert not torch.allclose(fast[2], wrong[2], atol=1e-3)


def test_under_bfloat16_autocast_the_two_forms_agree_within_a_stated_tolerance():
    """The tolerance: 2 % of the logits' spread, per pass (bfloat16 keeps 8 bits of mantissa; the output layer
    over fewer rows may round differently)."""
    head, ids, attention_mask, features, answers = head_and_batch(torch.float32)
    rows = F.pad(answers, (0, 1))
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        fast = head.unrolled(features, ids, 3, attention_mask=attention_mask, rows=rows)
        dense = [answer_logits(x, answers) for x in dense_unrolled(head, features, ids, 3, attention_mask)]
    for k in range(3):
        spread = dense[k].float().std()
        assert (fast[k].float() - dense[k].float()).abs().max() <= 0.02 * spread, k


def test_the_heads_norms_take_the_fused_kernel_under_autocast_and_compute_what_the_op_by_op_form_did():
    """A bfloat16 input to a float32 norm (every norm of the head under bfloat16 autocast but the token
    embedding's) made torch warn and normalise op by op; the head's RMSNorm casts the input to the weight's dtype
    first: the fused kernel, no warning, the same values."""
    import warnings

    from torch import nn

    from adaspec.models.eagle3 import RMSNorm

    torch.manual_seed(0)
    x = torch.randn(4, 7, 32).to(torch.bfloat16)
    ours, plain = RMSNorm(32, eps=1e-5), nn.RMSNorm(32, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_()
        plain.weight.copy_(ours.weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            expected = plain(x)
        assert any("Mismatch dtype" in str(w.message) for w in caught)  # the situation the class exists for
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = ours(x)
    assert got.dtype == expected.dtype == torch.bfloat16
    assert torch.equal(got, expected)
    same = torch.randn(3, 32)  # matching dtypes (decoding, float32 or bfloat16 throughout): untouched
    assert torch.equal(ours(same), F.rms_norm(same, (32,), ours.weight, 1e-5))
