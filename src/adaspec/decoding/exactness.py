"""Where a greedy speculative output leaves the target's own greedy output, and by how little.

In float32 the two agree on every prompt; in bfloat16 a multi-token verification forward rounds differently
from one-token steps (other matrix shapes, other summation orders), so where the target's two best tokens
are nearly tied, the verification may pick the other one. Such a prompt is counted (`greedy_mismatches`)
and described here: the first differing position, both tokens, and the target's logit margin between them
at that position, from one teacher-forced forward over the prompt and the common prefix.
"""

from __future__ import annotations

import torch
from torch import Tensor

from adaspec.decoding.serving import Served


@torch.inference_mode()
def first_divergence(served: Served, prompt: Tensor, reference: list[int], other: list[int]) -> dict | None:
    """None when `other` equals `reference` (the target-only output after `prompt [1, T]`); else the first
    position where they differ, the two tokens there and `margin`: the target's logit of the reference's
    token minus that of the other's (small against the logits' scale: a rounding tie). One output ending
    earlier than the other (EOS or the limit) is described at that position with no margin."""
    if other == reference:
        return None
    position = next((i for i, (a, b) in enumerate(zip(reference, other, strict=False)) if a != b), None)
    if position is None:
        position = min(len(reference), len(other))
        return {"position": position, "reference": None, "other": None, "margin": None}
    ids = torch.cat([prompt[0], torch.tensor(reference[:position], dtype=torch.long, device=prompt.device)]).view(1, -1)
    cache = served.new_cache(ids.shape[1])
    logits = served.prefill(ids, cache).float()
    return {
        "position": position,
        "reference": reference[position],
        "other": other[position],
        "margin": float(logits[reference[position]] - logits[other[position]]),
    }
