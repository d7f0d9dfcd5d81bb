"""On-policy distillation data (`distill.data=draft|mixed`, GKD's lambda): the student writes the answer.

DistillSpec found that training the draft on sequences it generates itself raises acceptance: the draft
then learns the target's distribution exactly where speculative decoding will query it, after its own
tokens. On an on-policy step the batch keeps its prompts, the student samples each continuation
(temperature 1, up to `distill.answer_max_new_tokens`, stopping at the stop token), and the loss is taken
on those sampled tokens only (prompt positions keep label -100), against the target run live on them:
no cache can hold sequences that did not exist before the step.

Which steps are on-policy, and what the student samples there, depends only on the run's seed and the
optimiser step, so a resumed run draws the same as an uninterrupted one.
"""

from __future__ import annotations

import torch

from adaspec.data.encoding import IGNORE, Encoded, collate, left_padded
from adaspec.drafts import ModelDraft


def step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def is_on_policy_step(fraction: float, seed: int, step: int) -> bool:
    """Whether optimiser step `step` trains on student samples: with probability `fraction`."""
    if fraction <= 0:
        return False
    if fraction >= 1:
        return True
    return bool(torch.rand((), generator=step_generator(seed, step)) < fraction)


def batch_prompts(batch: dict[str, torch.Tensor]) -> list[list[int]]:
    """Each row's prompt: its tokens before the first labelled (answer) position."""
    prompts = []
    for ids, labels, attention in zip(batch["input_ids"], batch["labels"], batch["attention_mask"], strict=True):
        answer = (labels != IGNORE).nonzero()
        end = int(answer[0]) if len(answer) else int(attention.sum())
        prompts.append(ids[:end].tolist())
    return prompts


@torch.no_grad()
def student_continuations(
    student: ModelDraft,
    batch: dict[str, torch.Tensor],
    *,
    stop_id: int,
    pad_id: int,
    max_new_tokens: int,
    seed: int,
    step: int,
) -> dict[str, torch.Tensor]:
    """A batch with the same prompts and the student's sampled continuations as answers (target ids; a
    reduced draft samples in its own ids, mapped back). Labels are the sampled tokens, up to and including
    the stop token when it was sampled."""
    prompts = batch_prompts(batch)
    device = batch["input_ids"].device
    ids, mask = left_padded(prompts, pad_id, device)
    width = ids.shape[1]
    ids = student.to_draft_ids(ids)
    stop, pad = (int(student.to_draft_ids(torch.tensor([t], device=device))) for t in (stop_id, pad_id))
    model = student.model
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(int(torch.randint(2**62, (), generator=step_generator(seed, step))))
        out = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0,
            top_k=0, top_p=1.0, eos_token_id=stop, pad_token_id=pad,
        )[:, width:]
    model.train(was_training)
    out = student.to_target_ids(out)
    rows = []
    for i, (prompt, generated) in enumerate(zip(prompts, out.tolist(), strict=True)):
        answer = generated[: generated.index(stop_id) + 1] if stop_id in generated else generated
        rows.append(Encoded(prompt + answer, [IGNORE] * len(prompt) + answer, -1 - i))
    return {k: v.to(device) for k, v in collate(rows, pad_id).items()}
