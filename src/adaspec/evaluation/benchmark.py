"""The timed comparison: target-only decoding, our speculative decoding and HF assisted generation.

Everything runs in one process, on the same prompts, with the same `max_new_tokens` and EOS, one
prompt at a time (batch size 1) and interleaved per prompt (target, the target-only runs in other serving
configurations, then for each draft ours and HF's), so slow drifts of the machine hit every method alike.
Compiled targets compile their step widths first (`warm_widths`), then one untimed warm-up generation of each
method runs. Every call is timed here the same way (`time.perf_counter`, after a device sync on GPU) and that
time replaces the `wall_time_s` a method reports itself.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from adaspec.decoding import GenerationResult, Policy, speculative_generate, target_generate
from adaspec.decoding.serving import Served, as_served
from adaspec.decoding.tree import TreeShape
from adaspec.drafts import Draft
from adaspec.evaluation.hf_assisted import hf_assisted_generate


@dataclass
class Entry:
    """One row of the comparison: a draft under a name (and optionally its own gamma policy)."""

    name: str  # row name in the results, e.g. "k0.4", "k0.4-int8" or "prompt_lookup"
    draft: Draft
    compare_hf: bool = True  # also time HF assisted generation with this draft (where HF can run it)
    policy: Callable[[], Policy] | None = None  # this entry's gamma policy instead of benchmark's make_policy
    hf_gamma: int | None = None  # this entry's HF assisted gamma instead of benchmark's gamma
    tree: TreeShape | None = None  # decode this entry with draft trees of this shape (its policy caps their depth)
    draft_temperature: float | None = None  # temperature > 0: the draft proposes at this one (None: benchmark's)


@dataclass
class Measurements:
    target: list[GenerationResult] = field(default_factory=list)
    target_only: dict[str, list[GenerationResult]] = field(default_factory=dict)  # other serving configurations
    speculative: dict[str, list[GenerationResult]] = field(default_factory=dict)
    hf_assisted: dict[str, list[GenerationResult]] = field(default_factory=dict)


def _timed(run: Callable[[], GenerationResult], device: torch.device) -> GenerationResult:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return dataclasses.replace(result, wall_time_s=time.perf_counter() - start)


def benchmark(
    target: PreTrainedModel | Served,
    drafts: list[Entry],
    prompts: list[Tensor],
    *,
    make_policy: Callable[[], Policy],
    gamma: int,
    max_new_tokens: int,
    temperature: float,
    eos_token_id: int | None,
    pad_token_id: int | None,
    seed: int = 0,
    progress: bool = True,
    desc: str = "evaluate",
    target_only: dict[str, Served] | None = None,
    warm_widths: list[int] = (),
    draft_temperature: float | None = None,
) -> Measurements:
    """Generate from every prompt ([1, T] on the models' device) with each method; see the module docstring.

    HF assisted generation runs only for entries with `compare_hf` whose draft HF can run
    (`Draft.hf_assisted_kwargs`). `make_policy()` gives our engine its gamma policy and HF assisted generation a constant `gamma`, unless
    an entry names its own (`Entry.policy`, `Entry.hf_gamma`: one draft under several policies). With `temperature > 0` every method samples, from a generator seeded with `seed` + the
    prompt's index. `target_only`: the target in other serving configurations, timed target-only beside it.
    `warm_widths`: the step widths a compiled target compiles before anything runs (one token for `target_only`).
    `draft_temperature`: the temperature our engine's drafts propose at when `temperature > 0` (None: the target's;
    `speculative_generate`), unless an entry names its own.
    """
    device = prompts[0].device
    target = as_served(target)
    target_only = target_only or {}
    target.warm_up(list(warm_widths))
    for layers in {tuple(e.draft.target_layers) for e in drafts if e.draft.target_layers}:  # EAGLE-3 heads
        target.warm_up([w for w in warm_widths if w > 1], feature_layers=list(layers))  # verifications
    for entry in drafts:  # tree verifications: a graph per node count (and with the head's features)
        if entry.tree is not None:
            target.warm_up([entry.tree.nodes + 1], feature_layers=entry.draft.target_layers or None, tree=True)
    for served in target_only.values():  # they only decode target-only: one-token steps
        served.warm_up([1])
    for entry in drafts:  # a compiled draft's steps (decode.draft_compile)
        entry.draft.warm_up([ids.shape[1] for ids in prompts])
    drafts = [dataclasses.replace(e, compare_hf=e.compare_hf and e.tree is None
                                  and e.draft.hf_assisted_kwargs(gamma) is not None) for e in drafts]

    def generator(i: int) -> torch.Generator | None:
        return torch.Generator(device=device).manual_seed(seed + i) if temperature > 0 else None

    def run_target(ids: Tensor, i: int, served: Served = target) -> GenerationResult:
        return target_generate(served, ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                               temperature=temperature, generator=generator(i))

    def run_ours(entry: Entry, ids: Tensor, i: int) -> GenerationResult:
        return speculative_generate(target, entry.draft, ids, gamma_policy=(entry.policy or make_policy)(),
                                    max_new_tokens=max_new_tokens,
                                    eos_token_id=eos_token_id, temperature=temperature, generator=generator(i),
                                    tree=entry.tree, draft_temperature=entry.draft_temperature or draft_temperature)

    def run_hf(draft: Entry, ids: Tensor, i: int) -> GenerationResult:
        torch.manual_seed(seed + i)  # HF samples from the global generator
        return hf_assisted_generate(target.model, draft.draft, ids, gamma=draft.hf_gamma or gamma,
                                    max_new_tokens=max_new_tokens,
                                    eos_token_id=eos_token_id, pad_token_id=pad_token_id, temperature=temperature)

    # Warm-up: first calls pay for lazy initialisation (kernels, allocator, caches).
    run_target(prompts[0], 0)
    for served in target_only.values():
        run_target(prompts[0], 0, served)
    for draft in drafts:
        run_ours(draft, prompts[0], 0)
        if draft.compare_hf:
            run_hf(draft, prompts[0], 0)

    out = Measurements(speculative={d.name: [] for d in drafts}, hf_assisted={d.name: [] for d in drafts if d.compare_hf},
                       target_only={name: [] for name in target_only})
    for i, ids in enumerate(tqdm(prompts, desc=desc, unit="prompt", disable=not progress)):
        out.target.append(_timed(lambda: run_target(ids, i), device))  # noqa: B023 (called at once)
        for name, served in target_only.items():
            out.target_only[name].append(_timed(lambda: run_target(ids, i, served), device))  # noqa: B023
        for draft in drafts:
            out.speculative[draft.name].append(_timed(lambda: run_ours(draft, ids, i), device))  # noqa: B023
            if draft.compare_hf:
                out.hf_assisted[draft.name].append(_timed(lambda: run_hf(draft, ids, i), device))  # noqa: B023
    return out
