"""How much of the target's temperature-1 distribution a trained head covers, and at which draft temperature.

    .venv/bin/python experiments/smollm2/draft_temperature.py <head's final folder> [--taus 0.6,0.8,1,1.2]

Speculative sampling accepts a token drawn from the draft's q with probability min(1, p/q), so one proposal is
accepted with probability sum_x min(p(x), q(x)) = 1 - TV(p, q), whatever q is: q may be the head's distribution
at another temperature than the target's and the decoding stays exact. This script measures that overlap on
`make demo-real`'s validation answers (the target's greedy answers to 64 held-out training problems), per pass of
the training-time test (pass k: the k-th proposal of a block), against the target's temperature-1 distribution as
the teacher cache holds it (top-64 log-probabilities): the overlap over the top 64 is a lower bound of the whole.
Also: the target's mass outside the head's 8,192-token support (never acceptable), and the share of positions
where the head's argmax is the target's (greedy acceptance of that pass on these contexts).

Contexts are the target's own greedy text, not its samples: the numbers rank draft temperatures, they are not
the decoding's alpha. Writes a JSON beside the head's metrics when `--out` is given.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

TREE_K = 4
DEMO_REAL = ["stage=ref", "model=smollm2", "task=gsm8k", "task.local_dir=../shared/data/gsm8k", "task.n_train=7409",
             "task.n_val=64", "distill.data=target", "distill.teacher=cache", "distill.cache_mode=topk",
             "pretrain=none", "model.draft_kind=eagle3", "distill.ttt_passes=3", "trainer.precision=bf16-mixed"]


def overlaps(head_folder: str, taus: list[float], extra: list[str]) -> dict:
    from adaspec.distill.tokens import answer_mask
    from adaspec.drafts import load_draft
    from adaspec.stages import stage_module
    from adaspec.stages.stage_run import StageRun
    from adaspec.toolkit import checked_config
    from adaspec.training.pipeline import build_data, resolve_stage_config

    torch.set_num_threads(os.cpu_count() or 1)
    cfg, splits = resolve_stage_config(checked_config(*DEMO_REAL, *extra))
    run = StageRun.of(cfg)
    data, _, _ = build_data(run, splits)
    module = stage_module(run).build(run, data.tokenizer, data)
    module.on_fit_start()
    trained = load_draft(head_folder, "sdpa")
    module.draft.model.load_state_dict(trained.model.state_dict())
    module.draft.model.eval()
    t2d = trained.vocab.target_to_draft
    data.setup("fit")
    passes = int(cfg.distill.ttt_passes)
    sums = {"tokens": 0, "outside": 0.0, "argmax": [0] * passes,
            "overlap": {str(t): [0.0] * passes for t in taus}}
    for batch in data.val_dataloader():
        mask = answer_mask(batch["labels"])
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            top_logp, top_ids, _rest = module.teacher.signal(batch, mask).payload
            logits_per_pass: list[torch.Tensor] = []

            def keep(logits: torch.Tensor, into: list = logits_per_pass) -> torch.Tensor:
                into.append(logits.float())
                return torch.zeros(logits.shape[0])

            module.draft.answer_divergence(batch, mask, keep, passes)
        p = top_logp.float().exp()
        draft_ids = t2d[top_ids]
        inside = draft_ids >= 0
        sums["tokens"] += p.shape[0]
        sums["outside"] += float((p * ~inside).sum())
        for k, logits in enumerate(logits_per_pass):
            sums["argmax"][k] += int((logits.argmax(-1) == draft_ids[:, 0]).sum())
            for tau in taus:
                q = torch.softmax(logits / tau, dim=-1)
                q_at = torch.where(inside, q.gather(1, draft_ids.clamp_min(0)), torch.zeros_like(p))
                sums["overlap"][str(tau)][k] += float(torch.minimum(p, q_at).sum())
                if k == 0:
                    add_first_level(sums, tau, first_level(p, draft_ids, q, TREE_K))
    n = sums["tokens"]
    return {"head": head_folder, "tokens": n, "target_mass_outside_support": sums["outside"] / n,
            "argmax_match_per_pass": [a / n for a in sums["argmax"]],
            "overlap_top64_per_pass": {t: [v / n for v in vs] for t, vs in sums["overlap"].items()},
            **first_level_means(sums, n)}


def add_first_level(sums: dict, tau: float, levels: dict[str, torch.Tensor]) -> None:
    """Adds `first_level`'s per-position values to `sums[<its name>][<tau>]`."""
    for name, value in levels.items():
        by_tau = sums.setdefault(name, {})
        by_tau[str(tau)] = by_tau.get(str(tau), 0.0) + float(value.sum())


def first_level_means(sums: dict, n: int) -> dict[str, dict[str, float]]:
    """`add_first_level`'s sums over `n` positions: the mean per name and draft temperature."""
    return {name: {t: v / n for t, v in by_tau.items()} for name, by_tau in sums.items()
            if name.startswith("first_level")}


def first_level(p: torch.Tensor, draft_ids: torch.Tensor, q: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """[N] probability that a tree's first level is accepted at temperature > 0 (recursive rejection sampling,
    siblings tried in order), from the target's top-64 `p [N, 64]` at draft ids `draft_ids` (-1 outside the
    support) and the head's `q [N, support]`: `k` deterministic picks (the head's top k: the target's mass on
    them), and one child sampled from q tried first, then the head's top k-1 other tokens (after the sampled
    child's rejection the target's residual is norm(max(0, p - q)), whichever token was rejected)."""
    top_q, top = q.topk(k, dim=-1)  # [N, k]
    p_on = torch.zeros_like(q)
    p_on.scatter_add_(1, draft_ids.clamp_min(0), torch.where(draft_ids >= 0, p, torch.zeros_like(p)))
    deterministic = p_on.gather(1, top).sum(-1)
    overlap = torch.minimum(p_on, q).sum(-1)
    residual = (p_on - q).clamp_min(0) / (1 - overlap).clamp_min(1e-9).unsqueeze(-1)
    r_top = residual.gather(1, top)  # [N, k]
    rejected = q * (1 - torch.minimum(torch.ones_like(q), p_on / q.clamp_min(1e-30)))  # q(x) (1 - a(x))
    rejected_top = rejected.gather(1, top)
    outside_top = rejected.sum(-1) - rejected_top.sum(-1)  # x outside the top k: the top k-1 follow
    after_top = r_top.sum(-1, keepdim=True) - r_top  # x = the j-th of the top k: the other k-1 follow
    sampled_first = overlap + (rejected_top * after_top).sum(-1) + outside_top * r_top[:, : k - 1].sum(-1)
    # the head's top k-1 tried first, then one child drawn from q outside them (r = q there, renormalised), tried
    # against what is left of p (p outside the top k-1, renormalised): p(S) + sum_{x not in S} min(p, (1 - p(S)) r)
    first = top[:, : k - 1]
    p_first = p_on.gather(1, first).sum(-1, keepdim=True)
    r = q.scatter(1, first, 0.0)
    r = r / r.sum(-1, keepdim=True).clamp_min(1e-30)
    rest = p_on.scatter(1, first, 0.0)
    top_then_sampled = p_first.squeeze(-1) + torch.minimum(rest, (1 - p_first) * r).sum(-1)
    return {f"first_level_top{k}": deterministic, f"first_level_sampled_then_top{k - 1}": sampled_first,
            f"first_level_top{k - 1}_then_sampled": top_then_sampled,
            f"first_level_{k}_sampled_without_replacement": without_replacement(p_on, q, k)}


def without_replacement(p: torch.Tensor, q: torch.Tensor, k: int, draws: int = 32, seed: int = 0) -> torch.Tensor:
    """[N] probability that `k` children drawn from q without replacement (Gumbel top-k), tried in the order drawn,
    accept one (recursive rejection sampling without replacement, arXiv 2402.14160): child i comes from q_i = q
    without the earlier children, renormalised, and is accepted with min(1, p_i / q_i), p_i the residual
    norm(max(0, p_{i-1} - q_{i-1})). Exact given the draws; averaged over `draws` Monte Carlo draws per position."""
    generator = torch.Generator().manual_seed(seed)
    out = torch.zeros(q.shape[0])
    log_q = q.clamp_min(1e-30).log()
    for _ in range(draws):
        gumbel = -torch.empty_like(q).exponential_(generator=generator).log()
        children = (log_q + gumbel).topk(k, dim=-1).indices  # [N, k], in the order drawn
        residual, q_i, none_yet = p.clone(), q.clone(), torch.ones(q.shape[0])
        for i in range(k):
            x = children[:, i : i + 1]
            q_i = q_i / q_i.sum(-1, keepdim=True).clamp_min(1e-30)
            a = torch.minimum(torch.ones(q.shape[0]), (residual.gather(1, x) / q_i.gather(1, x).clamp_min(1e-30))[:, 0])
            out += none_yet * a / draws
            none_yet = none_yet * (1 - a)
            residual = (residual - q_i).clamp_min(0)
            residual = residual / residual.sum(-1, keepdim=True).clamp_min(1e-30)
            q_i = q_i.scatter(1, x, 0.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("head")
    parser.add_argument("--taus", default="0.5,0.7,0.8,0.9,1,1.1,1.3")
    parser.add_argument("--out")
    args, extra = parser.parse_known_args()
    report(overlaps(args.head, [float(t) for t in args.taus.split(",")], extra), args.out)


def report(result: dict, out: str | None) -> None:
    """Prints `result` as JSON, and writes it to `out` when given."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")


if __name__ == "__main__":
    main()
