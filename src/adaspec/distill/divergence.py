"""Per-token divergences between a teacher's and a student's next-token distributions.

Inputs are logits of answer positions only, [N, V]. The work runs in chunks of tokens so that the
float32 log-probabilities of teacher and student never exist for all N tokens at once; with
gradients on, each chunk is recomputed in the backward pass (activation checkpointing) instead of
keeping its [chunk, V] intermediates alive.

Every divergence is finite for teacher logits of -inf (a masked vocabulary entry, probability 0):
0 log 0 = 0 as in `torch.xlogy` and the official code's `KLDivLoss`, so such a token adds nothing to
the forward KL, the JSD or the TVD. The reverse KL KL(q || p) is truly infinite there (the student
always puts some mass on it); it counts teacher probabilities below float32's smallest normal number
(`TINY_LOG_PROB`, log 1.2e-38 = -87.3), zeros included, as that number: finite, and its gradient still
pushes the student's mass off the token.

`jsd` is the generalised Jensen-Shannon divergence of GKD (Agarwal et al., 2024) as TRL's
`generalized_jsd_loss` computes it: with the mixture m = beta p + (1 - beta) q,
JSD_beta = beta KL(p || m) + (1 - beta) KL(q || m) for 0 < beta < 1, and by definition the forward KL
KL(p || q) at beta = 0 and the reverse KL KL(q || p) at beta = 1 (the mixture formula itself tends to
0 at both ends).

`nla` and `lk` optimise acceptance itself, as vllm-project/speculators defines them (`losses/eager.py`,
0.9.0): with alpha = 1 - TVD(p, q), the probability that speculative sampling accepts a draft token,
`nla` = -log(max(alpha, 1e-5)) and `lk` (Samarin et al., arXiv 2602.23881, the hybrid) =
lambda KL(p || q) + (1 - lambda) TVD(p, q) with lambda = exp(-3 alpha) and no gradient through lambda: KL's
strong gradient while the draft is far off, TVD's acceptance-optimal one as it gets close. Over a reduced
vocabulary they use the exact TVD (the teacher's mass off the support counts as rejected) and the credited
forward KL below; from the top-K cache, the coarsened distributions described there.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from adaspec.config.schema import Divergence
from adaspec.distill.teacher_cache import topk_forward_kl

TINY_LOG_PROB = math.log(torch.finfo(torch.float32).tiny)
NLA_EPS = 1e-5  # speculators' floor on alpha in -log(alpha)
LK_ETA = 3.0  # speculators' default blend temperature of the LK hybrid (the paper's best setting)


def _kind(kind: str | Divergence, jsd_beta: float) -> str:
    """The divergence actually computed: jsd at beta 0 or 1 is the forward or reverse KL, exactly."""
    kind = kind.value if isinstance(kind, Divergence) else str(kind)
    if kind not in Divergence._value2member_map_:
        raise ValueError(f"unknown divergence {kind!r}; allowed: {[d.value for d in Divergence]}")
    if kind == Divergence.jsd.value and jsd_beta in (0.0, 1.0):
        return Divergence.forward_kl.value if jsd_beta == 0.0 else Divergence.reverse_kl.value
    return kind


def _plogp_ratio(p: torch.Tensor, log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """``p * (log_p - log_q)`` elementwise with 0 where ``p == 0`` (``log_p`` may then be -inf)."""
    positive = p > 0
    return torch.where(positive, p * (torch.where(positive, log_p, 0.0) - log_q), 0.0)


def lk_hybrid(forward_kl: torch.Tensor, tvd: torch.Tensor) -> torch.Tensor:
    """speculators' LK hybrid of a token's forward KL and TVD: lambda KL + (1 - lambda) TVD, lambda = exp(-3 sg[alpha])."""
    weight = torch.exp(-LK_ETA * (1 - tvd).detach())
    return weight * forward_kl + (1 - weight) * tvd


def _from_log_probs(
    log_p: torch.Tensor, log_q: torch.Tensor, kind: str, jsd_beta: float, rest: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token divergence [T] of the student's log-probabilities ``log_q [T, N]`` from the teacher's on the
    same N tokens, ``log_p [T, N]`` (may hold -inf). ``rest [T]``: the teacher's mass outside those tokens,
    on which the student has none (a reduced-vocabulary draft; None: the N tokens are the whole
    vocabulary). The conventions for `rest` are in the comment above `support_token_divergence`."""
    p, q = log_p.exp(), log_q.exp()
    if kind == Divergence.forward_kl.value:  # KL(p || q)
        kl = _plogp_ratio(p, log_p, log_q).sum(-1)
        if rest is None:
            return kl
        p_support = p.sum(-1)  # credited: p(S) * KL(p(.|S) || q)
        return kl - torch.xlogy(p_support, p_support)
    if kind == Divergence.reverse_kl.value:  # KL(q || p)
        return _plogp_ratio(q, log_q, log_p.clamp_min(TINY_LOG_PROB)).sum(-1)
    if kind == Divergence.tvd.value:
        tvd = 0.5 * (p - q).abs().sum(-1)
        return tvd if rest is None else tvd + 0.5 * rest
    if kind in (Divergence.nla.value, Divergence.lk.value):  # acceptance alpha = 1 - TVD
        tvd = _from_log_probs(log_p, log_q, Divergence.tvd.value, jsd_beta, rest)
        alpha = 1 - tvd
        if kind == Divergence.nla.value:
            return -alpha.clamp_min(NLA_EPS).log()
        return lk_hybrid(_from_log_probs(log_p, log_q, Divergence.forward_kl.value, jsd_beta, rest), tvd)
    if kind == Divergence.jsd.value:  # beta KL(p || m) + (1 - beta) KL(q || m), m = beta p + (1 - beta) q
        log_m = torch.logaddexp(log_q + math.log1p(-jsd_beta), log_p + math.log(jsd_beta))
        to_p = _plogp_ratio(p, log_p, log_m).sum(-1)
        if rest is not None:  # the rest bucket: p(rest) log(p(rest) / (beta p(rest)))
            to_p = to_p - rest * math.log(jsd_beta)
        return jsd_beta * to_p + (1 - jsd_beta) * _plogp_ratio(q, log_q, log_m).sum(-1)
    raise ValueError(f"unknown divergence {kind!r}; allowed: {[d.value for d in Divergence]}")


def _chunk_divergence(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, kind: str, jsd_beta: float
) -> torch.Tensor:
    log_p = F.log_softmax(teacher_logits.float(), dim=-1)
    log_q = F.log_softmax(student_logits.float(), dim=-1)
    return _from_log_probs(log_p, log_q, kind, jsd_beta)


def token_divergence(
    teacher_logits: torch.Tensor,
    student_logits: torch.Tensor,
    kind: str | Divergence = Divergence.forward_kl,
    chunk_size: int = 1024,
    jsd_beta: float = 0.5,
) -> torch.Tensor:
    """Divergence per token, shape [N], float32; differentiable with respect to the student only.
    `jsd_beta` is read only by kind=jsd."""
    kind = _kind(kind, jsd_beta)
    return _in_chunks(
        _chunk_divergence, (teacher_logits.detach(),), (kind, jsd_beta), student_logits, chunk_size
    )


# ---------------------------------------------------------------- a draft with a reduced vocabulary
#
# The draft has logits for N target tokens (its support S, `adaspec.models.draft_vocab`), the teacher for
# all V. Convention (the top-K cache's, `teacher_cache.topk_forward_kl`: the teacher's mass the draft's
# logits cannot describe is one bucket): the teacher's distribution is taken on S plus one bucket
# holding its remaining mass p(rest) = 1 - p(S). The draft puts probability 0 on that bucket, since it
# cannot propose those tokens, so the exact forward KL is infinite whenever p(rest) > 0. The bucket's
# term does not depend on the draft, so it is *credited*: the draft's bucket is given the teacher's mass
# p(rest) and its N probabilities are scaled by p(S) to stay a distribution. Then
#
#     forward KL = sum_{x in S} p(x) log(p(x) / (p(S) q(x))) = p(S) * KL(p(. | S) || q),
#
# finite, >= 0, zero exactly when the draft equals the teacher conditioned on S (EAGLE-3's draft target,
# which renormalises the target's logits on the draft vocabulary) and equal to the full-vocabulary KL
# when S is everything. It differs from the top-K convention's clamped bucket (q(rest) = 1e-12) only by a
# per-token constant, so both give the same gradients; weighting by p(S) makes tokens where the teacher
# mostly wants tokens outside S (which no draft of this vocabulary can get accepted) count less.
# Reverse KL and total variation need no convention (the draft has no mass outside S) and are exact:
# KL(q || p) and TVD(p, q) = 1/2 (sum_S |p - q| + p(rest)), the rejection probability. So is the JSD:
# the mixture m has mass beta p(rest) on the bucket, so KL(p || m) gains p(rest) log(1 / beta) there and
# KL(q || m) nothing. 0 log 0 = 0 throughout, so teacher logits of -inf give finite values (the reverse
# KL floors the teacher's log-probabilities at `TINY_LOG_PROB`, as over the full vocabulary).


def _support_chunk(
    teacher_logits: torch.Tensor,
    student_logits: torch.Tensor,
    draft_to_target: torch.Tensor,
    kind: str,
    jsd_beta: float,
) -> torch.Tensor:
    log_p = F.log_softmax(teacher_logits.float(), dim=-1).index_select(-1, draft_to_target)  # [T, N]
    rest = (1 - log_p.exp().sum(-1)).clamp_min(0)
    log_q = F.log_softmax(student_logits.float(), dim=-1)
    return _from_log_probs(log_p, log_q, kind, jsd_beta, rest)

def _in_chunks(
    fn, per_token: tuple[torch.Tensor, ...], shared: tuple, student: torch.Tensor, chunk_size: int
):
    """``fn(*per_token_chunk, student_chunk, *shared)`` over chunks of tokens, checkpointed with gradients."""
    use_checkpoint = torch.is_grad_enabled() and student.requires_grad
    pieces = []
    for start in range(0, student.shape[0], chunk_size):
        args = (
            *(t[start : start + chunk_size] for t in per_token),
            student[start : start + chunk_size],
            *shared,
        )
        pieces.append(checkpoint(fn, *args, use_reentrant=False) if use_checkpoint else fn(*args))
    return torch.cat(pieces) if pieces else student.new_zeros(0, dtype=torch.float32)


def support_token_divergence(
    teacher_logits: torch.Tensor,
    student_logits: torch.Tensor,
    draft_to_target: torch.Tensor,
    kind: str | Divergence = Divergence.forward_kl,
    chunk_size: int = 1024,
    jsd_beta: float = 0.5,
) -> torch.Tensor:
    """Divergence per token, [T] float32, of a reduced-vocabulary draft's logits ``[T, N]`` from the
    teacher's ``[T, V]``; ``draft_to_target [N]`` gives each draft logit's target id. The convention for
    the teacher's mass outside the draft's support is in the comment above. Differentiable with respect
    to the student only; with ``draft_to_target = arange(V)`` it equals `token_divergence`."""
    kind = _kind(kind, jsd_beta)
    draft_to_target = draft_to_target.to(teacher_logits.device)
    return _in_chunks(
        _support_chunk, (teacher_logits.detach(),), (draft_to_target, kind, jsd_beta), student_logits, chunk_size
    )


def _support_topk_chunk(
    top_logp: torch.Tensor,
    top_ids: torch.Tensor,
    rest: torch.Tensor,
    student_logits: torch.Tensor,
    target_to_draft: torch.Tensor,
) -> torch.Tensor:
    draft_ids = target_to_draft[top_ids]  # [T, K], -1 where the draft cannot propose the token
    reachable = draft_ids >= 0
    p = torch.where(reachable, top_logp.exp(), 0.0)
    log_q = F.log_softmax(student_logits.float(), dim=-1)
    log_q_top = log_q.gather(-1, draft_ids.clamp_min(0))
    q_rest = (1 - torch.where(reachable, log_q_top.exp(), 0.0).sum(-1)).clamp_min(1e-12)
    reachable_mass = p.sum(-1) + rest
    kl_top = _plogp_ratio(p, top_logp, log_q_top).sum(-1)
    kl_rest = _plogp_ratio(rest, rest.clamp_min(1e-12).log(), q_rest.log())
    return kl_top + kl_rest - torch.xlogy(reachable_mass, reachable_mass)


def support_topk_forward_kl(
    top_logp: torch.Tensor,
    top_ids: torch.Tensor,
    rest: torch.Tensor,
    student_logits: torch.Tensor,
    target_to_draft: torch.Tensor,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """`topk_forward_kl` for a reduced-vocabulary draft, [T]: the teacher's top-K log-probabilities
    ``top_logp [T, K]`` of target ids ``top_ids [T, K]`` and remaining mass ``rest [T]`` (the teacher
    cache's top-K form) against the draft's logits ``[T, N]``; ``target_to_draft [V]`` maps target ids to
    draft ids (-1 outside). Buckets: the top-K tokens in the draft's support, and the rest bucket with
    the draft's mass on its other tokens (clamped at 1e-12 as in `topk_forward_kl`); the teacher's mass
    on top-K tokens outside the support is credited as above. Equals `topk_forward_kl` when every top-K
    token is in the support (with the draft's logits in draft ids)."""
    target_to_draft = target_to_draft.to(top_ids.device)
    return _in_chunks(
        _support_topk_chunk, (top_logp, top_ids, rest), (target_to_draft,), student_logits, chunk_size
    )


# ---------------------------------------------------------------- other divergences from the top-K cache
#
# The top-K cache keeps the teacher's K largest log-probabilities and its remaining mass. The forward KL
# above has its own (historical) bucket convention. The reverse KL, the TVD and the JSD are taken on the
# same partition of the vocabulary for teacher and student alike: one cell per top-K token the student can
# propose, and one bucket for everything else (the teacher's remaining mass plus its mass on top-K tokens
# outside a reduced draft's support; the student's mass off those cells). That is the exact divergence of
# the two coarsened distributions, a lower bound of the full one (coarsening never increases an
# f-divergence), and equal to it when the teacher's mass outside the top K is zero and the student's too.


def _topk_bucket_chunk(
    top_logp: torch.Tensor,
    top_ids: torch.Tensor,
    rest: torch.Tensor,
    student_logits: torch.Tensor,
    target_to_draft: torch.Tensor | None,
    kind: str,
    jsd_beta: float,
) -> torch.Tensor:
    draft_ids = top_ids if target_to_draft is None else target_to_draft[top_ids]  # -1: not proposable
    reachable = draft_ids >= 0
    log_q_all = F.log_softmax(student_logits.float(), dim=-1)
    # a cell the student cannot fill has p = q = 0 there (log -inf, constant: no gradient through it)
    log_q_top = torch.where(reachable, log_q_all.gather(-1, draft_ids.clamp_min(0)), -torch.inf)
    log_p_top = torch.where(reachable, top_logp, -torch.inf)
    p_bucket = (rest + torch.where(reachable, 0.0, top_logp.exp()).sum(-1)).clamp(1e-12, 1.0)
    q_bucket = (1 - log_q_top.exp().sum(-1)).clamp_min(1e-12)
    log_p = torch.cat([log_p_top, p_bucket.log().unsqueeze(-1)], dim=-1)
    log_q = torch.cat([log_q_top, q_bucket.log().unsqueeze(-1)], dim=-1)
    return _from_log_probs(log_p, log_q, kind, jsd_beta)


def topk_divergence(
    top_logp: torch.Tensor,
    top_ids: torch.Tensor,
    rest: torch.Tensor,
    student_logits: torch.Tensor,
    kind: str | Divergence,
    *,
    target_to_draft: torch.Tensor | None = None,
    chunk_size: int = 1024,
    jsd_beta: float = 0.5,
) -> torch.Tensor:
    """Per-token divergence [T] of the student's logits from the teacher's top-K form (log-probabilities
    ``top_logp [T, K]`` of target ids ``top_ids [T, K]``, remaining mass ``rest [T]``). The forward KL (jsd
    at beta 0 included) is `teacher_cache.topk_forward_kl` or `support_topk_forward_kl` exactly; the other
    divergences are taken on the coarsened distributions described above (the LK hybrid: its forward KL as
just said, its TVD coarsened). `target_to_draft [V]` (a reduced
    draft's id map, -1 outside its support) or None when the student's logits are over the target's ids."""
    kind = _kind(kind, jsd_beta)
    if kind == Divergence.lk.value:  # its KL term with the forward KL's own convention, as everywhere else
        def part(name: str) -> torch.Tensor:
            return topk_divergence(top_logp, top_ids, rest, student_logits, name, target_to_draft=target_to_draft,
                                   chunk_size=chunk_size, jsd_beta=jsd_beta)

        return lk_hybrid(part(Divergence.forward_kl.value), part(Divergence.tvd.value))
    if kind == Divergence.forward_kl.value:
        if target_to_draft is None:
            return topk_forward_kl(top_logp, top_ids, rest, student_logits, chunk_size)
        return support_topk_forward_kl(top_logp, top_ids, rest, student_logits, target_to_draft, chunk_size)
    if target_to_draft is not None:
        target_to_draft = target_to_draft.to(top_ids.device)
    return _in_chunks(
        _topk_bucket_chunk, (top_logp, top_ids, rest), (target_to_draft, kind, jsd_beta), student_logits, chunk_size
    )
