"""What a draft is to the rest of the pipeline: something that proposes tokens for the target to verify.

Every kind of draft (a small causal LM, with or without a reduced vocabulary; prompt lookup; later a head
that reads the target's hidden states) implements `Draft`. The speculative loop, the greedy replay, the
call-cost measurements, diagnose, the training-time acceptance monitor and HF assisted generation use
only this interface, so a new kind is one module here plus one config.

Tokens are target ids everywhere outside a draft: a draft that works in ids of its own maps them itself.
A generation opens a `DraftSession` (its KV cache, or whatever state it keeps): the loop gives it the
whole context before every block and tells it how much of that context survived verification. A draft
that reads the target's hidden states (`target_layers` not empty: `adaspec.drafts.eagle3`) also gets them
from the target's own prefill and verification forwards (`read_target`): no extra target call.
"""

from __future__ import annotations

import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

from adaspec.decoding.tree import Tree, TreeShape

# (position in the target's output, gamma) -> (tokens proposed, tokens accepted) of a greedy block there
GreedyBlocks = Callable[[int, int], tuple[int, int]]


class DraftSession(Protocol):
    def propose(
        self, context: Tensor, gamma: int, temperature: float, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor | None]:
        """At most `gamma` proposals ([n] target ids) to follow `context` ([L] target ids: the prompt and
        every token emitted so far); with `temperature > 0` also the distributions `[n, width]` they were
        drawn from (None when greedy). Fewer than `gamma` means the draft has nothing better to offer."""
        ...

    def rollback(self, length: int) -> None:
        """Only the first `length` context positions are still valid: forget what came after them."""
        ...


class TreeSession(DraftSession, Protocol):
    """A session of a draft that ranks alternatives (`Draft.proposes_trees`): the tree decoding loop's."""

    def propose_tree(self, context: Tensor, shape: TreeShape, temperature: float,
                     generator: torch.Generator | None) -> Tree:
        """A tree of at most `shape.nodes` nodes and `shape.depth` levels below the last token of `context`."""
        ...

    def keep_path(self, path: list[int]) -> None:
        """Verification kept the nodes `path` of the last tree (`rollback` follows): keep what was computed
        for them, drop the rest of the tree."""
        ...


class TargetReadingSession(DraftSession, Protocol):
    def read_target(self, features: Tensor) -> None:
        """The target's hidden states `[n, F]` (its `target_layers`, concatenated) of the next n context
        positions, after those it has: the prompt's but the last from the prefill, then after each block
        those of the positions verification kept."""
        ...


class Draft(ABC):
    """One kind of draft. `width` is the number of target logits verification compares (`verify_width`)."""

    kind: str  # "model", "prompt_lookup", ...
    proposes_trees: bool = False  # its sessions are `TreeSession`s (decode.tree)
    takes_lookup_branch: bool = True  # decode.tree.lookup may graft prompt lookup's chain onto its trees
    # at temperature > 0 it proposes from a distribution it can draw from (a tree's `+sample`); prompt lookup's
    # proposals are fixed, so `+sample` changes nothing for it
    draws_proposals: bool = True
    # indices into the target's `hidden_states` the draft reads (`TargetReadingSession`); none for most
    target_layers: list[int] = []

    @abstractmethod
    def verify_width(self, target_vocab_size: int) -> int:
        """How many of the target's logits take part in verification (vocabularies may be padded)."""

    @abstractmethod
    def start(self, prompt: Tensor, width: int) -> DraftSession:
        """A session for one generation after `prompt [1, T]`; it may read all but the last prompt token now."""

    @abstractmethod
    def greedy_blocks(self, prompt: Tensor, tokens: list[int], width: int) -> GreedyBlocks:
        """How greedy blocks go when the emitted text is `tokens` (the target's greedy output after `prompt`):
        what the replay needs to walk the loop's blocks without running the target."""

    def greedy_tree_blocks(self, prompt: Tensor, tokens: list[int], width: int, shape: TreeShape) -> GreedyBlocks:
        """`greedy_blocks` for tree decoding of `shape`: at position p the draft's tree after `prompt + tokens[:p]`
        and how deep `tokens[p:]` runs down it (gamma caps the depth). One session walks the whole output."""
        context = torch.cat([prompt[0], torch.tensor(tokens, device=prompt.device, dtype=prompt.dtype)])
        session, rewind = self.replay_session(prompt, context, width)
        return tree_replay(session, rewind, context, prompt.shape[1], tokens, shape)

    def replay_session(self, prompt: Tensor, context: Tensor, width: int) -> tuple[Any, Callable[[int], None]]:
        """A session for a replay along `context` (the prompt and the target's output) and how to bring it back to
        its first n positions before each block: by default a fresh session and its `rollback`."""
        session = self.start(prompt, width)
        return session, session.rollback

    def step_seconds(self, prompt: Tensor, width: int, repeats: int = 30) -> float:
        """Median seconds of one proposal on top of `prompt [1, T]` (all but its last token already read):
        what one draft call of a block costs."""
        return median_seconds(
            lambda: self.start(prompt, width), lambda session: session.propose(prompt[0], 1, 0.0, None), prompt,
            repeats,
        )

    def compile_steps(self) -> bool:
        """Decode with this draft's steps compiled (`decode.draft_compile`); False when it has none to compile."""
        return False

    def warm_up(self, prompt_lengths: list[int]) -> None:
        """Compile what decoding prompts of these lengths runs, before anything is timed (a compiled draft's)."""
        return None  # most drafts compile nothing

    def hf_assisted_kwargs(self, gamma: int) -> dict[str, Any] | None:
        """What `target.generate` takes to run this draft as HF assisted generation with `gamma` tokens per
        block (`adaspec.evaluation.hf_assisted`); None when HF cannot run it (the results say so instead of
        timing it)."""
        return None

    def hf_assisted_refusal(self) -> str:
        """Why HF assisted generation cannot run it (`hf_assisted_kwargs` is None), after the draft's name."""
        return f"is a {self.kind} draft, which HF assisted generation cannot run"

    def int8(self, device: torch.device, folder: Any = None, attn_implementation: str = "auto") -> Draft | None:
        """An int8 copy for `decode.draft_quant=int8` (on a GPU loaded from the artefact `folder`), or None for a
        draft that has none."""
        return None

    def describe(self) -> dict[str, Any]:
        """What results files record about this draft besides its name."""
        return {"kind": self.kind, "parameters": 0}

    def eval(self) -> Draft:
        return self


def matched_path(tree: Tree, expected: list[int]) -> list[int]:
    """The nodes of `tree` that `expected` (the tokens after the root) runs down, in order."""
    path, node = [], -1
    for token in expected:
        node = next((c for c in tree.children(node) if tree.tokens[c] == token), None)
        if node is None:
            break
        path.append(node)
    return path


def tree_replay(session: TreeSession, rewind: Callable[[int], None], context: Tensor, prompt_len: int,
                tokens: list[int], shape: TreeShape) -> GreedyBlocks:
    """Greedy tree blocks read off `session`'s trees along `context` (the prompt and the target's greedy output
    `tokens`); `rewind(length)` brings the session back to the first `length` positions before each block."""

    def block(position: int, gamma: int) -> tuple[int, int]:
        length = prompt_len + position
        rewind(length)
        tree = session.propose_tree(context[:length], shape.capped(gamma), 0.0, None)
        return tree.depth, len(matched_path(tree, tokens[position:]))

    return block


def median_seconds(prepare: Callable[[], Any], call: Callable[[Any], Any], on: Tensor, repeats: int) -> float:
    """Median seconds of `call(prepare())` over `repeats` fresh preparations, only the call timed (with the
    device of `on` synchronised around it)."""
    times = []
    for _ in range(repeats):
        prepared = prepare()
        sync(on)
        started = time.perf_counter()
        call(prepared)
        sync(on)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def sync(tensor: Tensor) -> None:
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)
