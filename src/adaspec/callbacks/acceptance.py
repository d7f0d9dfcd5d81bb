"""Training-time acceptance monitor: how well does the draft being trained serve the frozen target?

Stages 2 and 3 train a draft (stage 2's reference is one too); this callback measures it the way it
will be used. Every `every_n_steps` optimiser steps, and once more at the end of training, it runs
the REAL speculative decoding loop (`adaspec.decoding.speculative_generate`, greedy verification,
fixed gamma) of `pl_module.frozen["target"]`, in decode.target_dtype as the evaluation serves it, with
`pl_module.draft` (the student as a `Draft`, in its training dtype) on a small fixed set of held-out
prompts, and logs

    monitor/alpha, monitor/accept_rate, monitor/tau, monitor/reject_rate_at/i (i = 1..gamma)

(the names of `adaspec.decoding.aggregate`) to every logger of the trainer at the current global
step: `metrics.csv` and W&B. It writes through `trainer.loggers` rather than `pl_module.log`, whose
step metrics only reach the loggers every `trainer.log_every_n_steps` steps and which cannot be
called from `on_train_end`.
"""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import torch
from torch import Tensor

from adaspec.data.encoding import IGNORE, Encoded
from adaspec.decoding import FixedGamma, aggregate, speculative_generate
from adaspec.decoding.serving import Served, Serving
from adaspec.decoding.tree import TreeShape
from adaspec.drafts import Draft

PREFIX = "monitor/"


def prompt_ids(examples: list[Encoded], n: int) -> list[list[int]]:
    """The prompt part (label -100 before the first answer token) of the first `n` examples that have one."""
    prompts = []
    for e in examples:
        if len(prompts) == n:
            break
        answer_start = next((i for i, label in enumerate(e.labels) if label != IGNORE), None)
        if answer_start:  # None: truncated inside the prompt; 0: no prompt
            prompts.append(list(e.input_ids[:answer_start]))
    return prompts


@torch.no_grad()
def measure_acceptance(
    target: torch.nn.Module,
    draft: Draft,
    prompts: list[Tensor],
    *,
    gamma: int,
    max_new_tokens: int,
    eos_token_id: int | None,
    num_threads: int | None = 1,
    tree: TreeShape | None = None,
) -> dict[str, float]:
    """Greedy speculative decoding of every prompt ([1, T] on the models' device); the pooled statistics.
    `eos_token_id` is a target id (the task's stop token). The caller puts a trained draft in eval mode.

    On the CPU the measurement runs with `num_threads` torch threads (None: as set), restored after:
    batch-1 decoding steps of small models are dominated by per-operation overhead, which extra
    threads only add to (about 10x slower with 2 threads on a busy 2-core machine). `tree`: decode with draft
    trees of this shape (no deeper than gamma); the statistics then count accepted depth per block.
    """
    threads = torch.get_num_threads()
    on_cpu = prompts[0].device.type == "cpu"
    if on_cpu and num_threads:
        torch.set_num_threads(num_threads)
    try:
        results = [
            speculative_generate(
                target,
                draft,
                ids,
                gamma_policy=FixedGamma(gamma),
                max_new_tokens=max_new_tokens,
                eos_token_id=eos_token_id,
                tree=tree,
            )
            for ids in prompts
        ]
    finally:
        torch.set_num_threads(threads)
    return aggregate(results, max_gamma=gamma)


class AcceptanceMonitor(pl.Callback):
    """Log the acceptance of the current draft every `every_n_steps` (>= 1) optimiser steps and at the end.

    Runs on every rank (identical inputs, so sharded strategies stay in step); only rank zero's
    loggers write. `history` keeps every measurement as (global step, metrics).
    """

    def __init__(
        self,
        prompts: list[list[int]],
        *,
        every_n_steps: int,
        gamma: int = 5,
        max_new_tokens: int = 48,
        eos_token_id: int | None = None,
        target_dtype: str = "float32",
        tree: TreeShape | None = None,
    ) -> None:
        if not prompts:
            raise ValueError("AcceptanceMonitor needs at least one prompt")
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.prompts = prompts
        self.every_n_steps = every_n_steps
        self.gamma = gamma
        self.max_new_tokens = max_new_tokens
        self.eos_token_id = eos_token_id
        self.target_dtype = target_dtype
        self.tree = tree  # decode.tree: the monitor decodes the way the evaluation does
        self._served_target: Served | None = None
        self.history: list[tuple[int, dict[str, float]]] = []  # (global step, metrics) of every measurement
        self._last_step: int | None = None

    def served_target(self, target: torch.nn.Module) -> torch.nn.Module | Served:
        """The target as decoding serves it (decode.target_dtype): the training target itself in float32, else
        a copy cast once (the target is frozen, so one copy serves every measurement; eager, dynamic cache:
        compiling for a few prompts would cost more than the measurement)."""
        if self.target_dtype == "float32":
            return target
        if self._served_target is None:
            self._served_target = Served(copy.deepcopy(target), Serving(dtype=self.target_dtype))
        return self._served_target

    def measure(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, float]:
        step = trainer.global_step
        device = pl_module.device
        was_training = pl_module.student.training
        pl_module.student.eval()
        try:
            stats = measure_acceptance(
                self.served_target(pl_module.frozen["target"]),
                pl_module.draft,
                [torch.tensor([p], device=device) for p in self.prompts],
                gamma=self.gamma,
                max_new_tokens=self.max_new_tokens,
                eos_token_id=self.eos_token_id,
                tree=self.tree,
            )
        finally:
            pl_module.student.train(was_training)
        keys = ["alpha", "accept_rate", "tau", *(f"reject_rate_at/{i}" for i in range(1, self.gamma + 1))]
        if self.tree is not None:
            keys += ["acceptance_length", *(f"accept_at_depth/{i}" for i in range(1, self.gamma + 1))]
        metrics = {PREFIX + key: float(stats[key]) for key in keys}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        self.history.append((step, metrics))
        self._last_step = step
        return metrics

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step > 0 and step % self.every_n_steps == 0 and step != self._last_step:
            self.measure(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_step != self._last_step:
            self.measure(trainer, pl_module)
