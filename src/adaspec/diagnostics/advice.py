"""The guard on every piece of advice: never tell the user to set what is already set.

An action names a setting as `key=value` (`stage.warmup_frac=0.1`, `gamma=1`). Actions are clauses
joined by "; "; a clause naming a setting that the config it is about already has is dropped, and
the verdict says which setting is already in force instead. `make ... ARGS="..."` commands are
instructions to produce a missing artefact, not advice to change a setting, and are not checked.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from omegaconf import DictConfig, OmegaConf

from adaspec.diagnostics.checks import Verdict

# key=value; the value stops at a space or punctuation and never ends in a full stop
SETTING = re.compile(r"(?<![\w.=-])([A-Za-z_]\w*(?:\.\w+)*)=([^\s,;:)\"'`]*[^\s,;:)\"'`.])")
COMMAND_ARGS = re.compile(r'ARGS="[^"]*"')
_ABSENT = object()


def settings_named(text: str) -> list[tuple[str, str]]:
    """The `key=value` settings an action names, outside `ARGS="..."` commands."""
    return SETTING.findall(COMMAND_ARGS.sub("", text))


def in_force(cfg: DictConfig, key: str, value: str) -> bool:
    current = OmegaConf.select(cfg, key, default=_ABSENT)
    if current is _ABSENT or isinstance(current, DictConfig):
        return False
    try:
        return math.isclose(float(current), float(value), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(current).lower() == value.lower()


def without_settings_in_force(verdict: Verdict, cfg: DictConfig) -> Verdict:
    kept, already = [], []
    for clause in filter(None, verdict.action.split("; ")):
        set_here = [(k, v) for k, v in settings_named(clause) if in_force(cfg, k, v)]
        if set_here:
            already += [f"{k} is already {v}" for k, v in set_here]
        else:
            kept.append(clause)
    if not already:
        return verdict
    return replace(verdict, action=" ".join(filter(None, ["; ".join(kept), f"({', '.join(already)})"])))


def guarded(verdicts: list[Verdict], cfg: DictConfig) -> list[Verdict]:
    """`verdicts` about the config `cfg` (a stage artefact's config.yaml, or the run's config), guarded."""
    return [without_settings_in_force(v, cfg) for v in verdicts]
