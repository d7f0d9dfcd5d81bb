"""`decode.tree=auto`: each draft's tree shape, or chains, chosen by expected speed-up before anything is timed.

A candidate's expected speed-up is tau x (the target's one-token step) / (the draft's proposal of a block + the
target's verification of it), every factor measured here, in this process, on the serving that runs:

- tau, the tokens a block emits, by the exact greedy replay (`adaspec.evaluation.replay`) on calibration prompts:
  the `eval.tree_calibration_prompts` test prompts after the evaluated ones, so no row is timed on a prompt that
  chose its shape. At temperature > 0 greedy acceptance says little about sampled acceptance (on GSM8K the head's
  hybrid tree emits the most tokens a block greedy and fewer than its chain at temperature 1), so there tau is
  what sampled speculative decoding of each candidate emits on those prompts (a fixed seed; `tau_from`);
- the draft's seconds per block: for a tree, the median of its `propose_tree` calls during that replay; for a chain
  of gamma, gamma times its one-token proposal (`Draft.step_seconds`);
- the verification's seconds (each timed once per evaluation, shared by its drafts): `tree_verify_seconds` of the candidate's node count (its compiled graph, with the
  head's features when it reads them), or `forward_seconds` of gamma + 1 tokens for the chain.

Candidates: `decode.gamma`'s chain and every shape of `eval.tree_candidates`; shapes with a lookup branch only for
drafts that can carry one (not prompt lookup itself). The table of every candidate goes into results.json
(`tree_choice`), so a reader sees what the choice weighed.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import Tensor

from adaspec.decoding import FixedGamma, GenerationResult, speculative_generate
from adaspec.decoding.serving import as_served
from adaspec.decoding.tree import TreeShape
from adaspec.drafts import Draft, hybrid
from adaspec.drafts.base import tree_replay
from adaspec.evaluation.cost import forward_seconds, tree_verify_seconds
from adaspec.evaluation.replay import replay

CHAIN = "chain"


class _TimedSession:
    """A tree session whose `propose_tree` calls are timed (the replay's rewinds are not)."""

    def __init__(self, session) -> None:
        self.session, self.seconds = session, []

    def propose_tree(self, *args) -> Any:
        started = time.perf_counter()
        tree = self.session.propose_tree(*args)
        self.seconds.append(time.perf_counter() - started)
        return tree


def _tau(results: list[GenerationResult]) -> float:
    return sum(len(r.tokens) for r in results) / max(1, sum(r.target_calls for r in results))


def candidates_for(draft: Draft, shapes: list[TreeShape]) -> list[TreeShape]:
    """The shapes `draft` can decode: none for a draft that cannot rank alternatives, no lookup branch for one
    that takes none (prompt lookup itself: it would graft itself), no drawn children (`+sample...`) for one that
    draws nothing (the plain shape's tree again)."""
    if not draft.proposes_trees:
        return []
    return [s for s in shapes if (draft.takes_lookup_branch or not s.lookup)
            and (draft.draws_proposals or not s.sample)]


@torch.inference_mode()
def choose_tree(target, draft: Draft, prompts: list[Tensor], outputs: list[list[int]], *, gamma: int,
                shapes: list[TreeShape], max_new_tokens: int, eos_token_id: int | None,
                target_s: dict[tuple, float] | None = None, temperature: float = 0.0,
                seed: int = 0, draft_temperature: float | None = None) -> tuple[TreeShape | None, dict[str, Any]]:
    """(the shape with the highest expected speed-up, or None for the chain of `gamma`; the table of candidates).

    `target` is the target as it serves (`Served`; a plain model runs eager), `outputs[i]` its greedy tokens after
    `prompts[i]` (the calibration prompts). `target_s`: the target's timed calls (its step, the chain's verification,
    a tree's by node count and the draft's target layers), shared between the drafts of one evaluation: each is
    timed once, when a draft first needs it. `temperature` > 0: tau from sampled decoding (`seed`), module
    docstring, the draft proposing at `draft_temperature` (None: `temperature`)."""
    target, target_s = as_served(target), {} if target_s is None else target_s
    width = draft.verify_width(target.config.vocab_size)
    # the calls are timed mid-generation: after the first prompt and its output
    timing = torch.cat([prompts[0][0], torch.tensor(outputs[0], device=prompts[0].device)]).view(1, -1)

    def seconds_of(key: tuple, measure) -> float:
        if key not in target_s:
            target_s[key] = measure()
        return target_s[key]

    step_s = seconds_of(("step",), lambda: forward_seconds(target, timing))

    def expected(tau: float, block_s: float) -> float:
        return tau * step_s / block_s

    def replayed(blocks, ids: Tensor, out: list[int], policy_gamma: int) -> GenerationResult:
        return replay(out, blocks, policy=FixedGamma(policy_gamma), prompt_len=ids.shape[1],
                      max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)

    def sampled_tau(shape: TreeShape | None) -> float:
        generator = torch.Generator(device=prompts[0].device).manual_seed(seed)
        return _tau([speculative_generate(target, draft, ids, gamma_policy=FixedGamma(shape.reach if shape else gamma),
                                          max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                          temperature=temperature, generator=generator, tree=shape,
                                          draft_temperature=draft_temperature)
                     for ids in prompts])

    def tau_of(shape: TreeShape | None, results: list[GenerationResult]) -> float:
        return sampled_tau(shape) if temperature > 0 else _tau(results)

    def chain_replays() -> list[GenerationResult]:
        return [replayed(draft.greedy_blocks(ids, out, width), ids, out, gamma)
                for ids, out in zip(prompts, outputs, strict=True)]

    draft_s = draft.step_seconds(timing, width)
    chain_verify_s = seconds_of(("verify", gamma + 1), lambda: forward_seconds(target, timing, gamma + 1))
    tau = sampled_tau(None) if temperature > 0 else _tau(chain_replays())  # no greedy replay where it is unread
    table = {CHAIN: {"gamma": gamma, "tau": tau, "draft_s": gamma * draft_s, "verify_s": chain_verify_s,
                     "expected_speedup": expected(tau, gamma * draft_s + chain_verify_s)}}
    layers = draft.target_layers or None
    for shape in candidates_for(draft, shapes):
        runner = hybrid.for_shape(draft, shape)
        results, seconds = [], []
        for ids, out in zip(prompts, outputs, strict=True):
            context = torch.cat([ids[0], torch.tensor(out, device=ids.device, dtype=ids.dtype)])
            session, rewind = runner.replay_session(ids, context, width)
            timed = _TimedSession(session)
            results.append(replayed(tree_replay(timed, rewind, context, ids.shape[1], out, shape), ids, out,
                                    shape.reach))
            seconds += timed.seconds

        def verification(nodes: int = shape.nodes) -> float:
            target.warm_up([nodes + 1], feature_layers=layers, tree=True)  # compiled: its graph, untimed
            return tree_verify_seconds(target, timing, nodes, layers)

        verify_s = seconds_of(("tree", shape.nodes, tuple(draft.target_layers)), verification)
        tau, block_s = tau_of(shape, results), statistics.median(seconds)
        table[shape.name] = {"tau": tau, "draft_s": block_s, "verify_s": verify_s,
                             "expected_speedup": expected(tau, block_s + verify_s)}
    best = max(table, key=lambda name: table[name]["expected_speedup"])
    tau_from = "greedy replay" if temperature == 0 else f"sampled decoding at temperature {temperature:g}, seed {seed}"
    if temperature > 0 and draft_temperature is not None:
        tau_from += f", the draft at temperature {draft_temperature:g}"
    return (None if best == CHAIN else TreeShape.parse(best)), {"chosen": best, "prompts": len(prompts),
                                                                "tau_from": tau_from, "candidates": table}
