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


class TargetReadingSession(DraftSession, Protocol):
    def read_target(self, features: Tensor) -> None:
        """The target's hidden states `[n, F]` (its `target_layers`, concatenated) of the next n context
        positions, after those it has: the prompt's but the last from the prefill, then after each block
        those of the positions verification kept."""
        ...


class Draft(ABC):
    """One kind of draft. `width` is the number of target logits verification compares (`verify_width`)."""

    kind: str  # "model", "prompt_lookup", ...
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

    def step_seconds(self, prompt: Tensor, width: int, repeats: int = 30) -> float:
        """Median seconds of one proposal on top of `prompt [1, T]` (all but its last token already read):
        what one draft call of a block costs."""
        return median_seconds(
            lambda: self.start(prompt, width), lambda session: session.propose(prompt[0], 1, 0.0, None), prompt,
            repeats,
        )

    def hf_assisted_kwargs(self, gamma: int) -> dict[str, Any] | None:
        """What `target.generate` takes to run this draft as HF assisted generation with `gamma` tokens per
        block (`adaspec.evaluation.hf_assisted`); None when HF cannot run it (the results say so instead of
        timing it)."""
        return None

    def int8(self, device: torch.device, folder: Any = None, attn_implementation: str = "auto") -> Draft | None:
        """An int8 copy for `decode.draft_quant=int8` (on a GPU loaded from the artefact `folder`), or None for a
        draft that has none."""
        return None

    def describe(self) -> dict[str, Any]:
        """What results files record about this draft besides its name."""
        return {"kind": self.kind, "parameters": 0}

    def eval(self) -> Draft:
        return self


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
