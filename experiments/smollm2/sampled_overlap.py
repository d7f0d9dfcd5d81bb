"""A head's first-proposal acceptance on the target's own temperature-1 samples, at several draft temperatures.

    .venv/bin/python experiments/smollm2/sampled_overlap.py <head's final folder> [--prompts 20] [--taus 0.6,1,1.4]

`draft_temperature.py` measures the overlap on the target's greedy answers; temperature-1 decoding reads other
contexts (the target's samples), and there the ranking of draft temperatures can differ. This script samples the
target at temperature 1 after GSM8K test prompts (128 new tokens, seed i for prompt i, as bench-real seeds them),
then at every generated position takes the target's exact distribution p (one forward over prompt and sample) and
the head's q from the target's features there (its first proposal of a block), and averages sum_x min(p, q) at each
draft temperature: the acceptance probability of a block's first proposal, without the sampling noise of a run.
Also the same for a tree's first level (`draft_temperature.first_level`). Writes JSON with `--out`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from draft_temperature import TREE_K, add_first_level, first_level, first_level_means, report  # noqa: E402

TARGET = "outputs/gsm8k/smollm2/seed0/target/final"


@torch.inference_mode()
def overlaps(head_folder: str, prompts: int, taus: list[float], max_new_tokens: int) -> dict:
    from transformers import AutoTokenizer

    from adaspec.data.encoding import prompt_ids, stop_token_id
    from adaspec.data.tasks import load_task
    from adaspec.decoding import target_generate
    from adaspec.drafts import load_draft
    from adaspec.models.build import load_model
    from adaspec.toolkit import checked_config

    torch.set_num_threads(os.cpu_count() or 1)
    cfg = checked_config("model=smollm2", "task=gsm8k", "task.local_dir=../shared/data/gsm8k")
    tokenizer = AutoTokenizer.from_pretrained(TARGET)
    target = load_model(TARGET).eval()
    draft = load_draft(head_folder, target=target).eval()
    support = draft.model.config.draft_vocab_size
    t2d = draft.vocab.target_to_draft
    fmt = str(cfg.task.prompt_format)
    stop = stop_token_id(tokenizer, fmt)
    sums = {"positions": 0, "overlap": {str(t): 0.0 for t in taus}}
    for i, example in enumerate(load_task(cfg.task)["test"][:prompts]):
        ids = torch.tensor([prompt_ids(tokenizer, example.prompt, fmt)])
        sample = target_generate(target, ids, max_new_tokens=max_new_tokens, eos_token_id=stop, temperature=1.0,
                                 generator=torch.Generator().manual_seed(i)).tokens
        full = torch.cat([ids[0], torch.tensor(sample)]).view(1, -1)
        rows = slice(ids.shape[1] - 1, full.shape[1] - 1)  # positions whose next token is a sampled one
        p_full = torch.softmax(target(full).logits[0, rows].float(), dim=-1)  # [n, V]
        q_logits = draft.logits(full, features=draft.features(full))[0, rows, :support].float()
        inside = t2d >= 0
        p_on = torch.zeros(p_full.shape[0], support)
        p_on.index_add_(1, t2d[inside], p_full[:, inside])
        top_p, top_ids = p_on.topk(64, dim=-1)
        sums["positions"] += p_full.shape[0]
        for tau in taus:
            q = torch.softmax(q_logits / tau, dim=-1)
            sums["overlap"][str(tau)] += float(torch.minimum(p_on, q).sum())
            add_first_level(sums, tau, first_level(top_p, top_ids, q, TREE_K))
        print(f"prompt {i}: {len(sample)} tokens", flush=True)
    n = sums["positions"]
    return {"head": head_folder, "prompts": prompts, "positions": n,
            "overlap": {t: v / n for t, v in sums["overlap"].items()},
            **first_level_means(sums, n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("head")
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--taus", default="0.6,0.8,1,1.2,1.4")
    parser.add_argument("--out")
    args = parser.parse_args()
    report(overlaps(args.head, args.prompts, [float(t) for t in args.taus.split(",")], args.max_new_tokens), args.out)


if __name__ == "__main__":
    main()
