"""`distill.match_token_budget`: the stage-3 budget of the official AdaSPEC scripts.

They train the reference 3 epochs at batch 16 but the AdaSPEC draft 7.5 epochs at batch 40: the same
number of optimiser steps and, with k = 0.4, the same trained (selected) tokens per step, but 2.5x the
data. Here: batch_size / budget_k sequences per step, for the steps the stage would take at
stage.batch_size. The resolved batch size and steps are written into the stage config, so the
artefact's config.yaml and fingerprint show what was trained.
"""

from __future__ import annotations

import copy
import math

from omegaconf import DictConfig

from adaspec.training.trainer import steps_per_epoch, total_steps


def apply_token_budget(cfg: DictConfig, n_train: int, world: int = 1) -> DictConfig:
    """A copy of `cfg` with stage 3's batch size and steps resolved; `cfg` itself when the budget is off."""
    if cfg.stage.name != "draft" or not cfg.distill.match_token_budget:
        return cfg
    budget_k = cfg.distill.budget_k if cfg.distill.budget_k is not None else cfg.k
    steps = total_steps(cfg.stage, n_train, world)  # at the base batch size: the reference's steps
    resolved = copy.deepcopy(cfg)
    resolved.stage.batch_size = max(1, round(cfg.stage.batch_size / budget_k))
    resolved.stage.max_steps = steps
    resolved.stage.max_epochs = math.ceil(steps / steps_per_epoch(resolved.stage, n_train, world))
    resolved.distill.match_token_budget = False  # resolved: applying it again must not divide twice
    resolved.distill.budget_k = float(budget_k)
    return resolved
