"""The guard on every piece of advice: never tell the user to set what is already set.

An action names a setting as `key=value` (`stage.warmup_frac=0.1`, `gamma=1`). Actions are clauses
joined by "; "; a clause naming a setting that the config it is about already has is dropped, and
the verdict says which setting is already in force instead. `make ... ARGS="..."` commands are
instructions to produce a missing artefact, not advice to change a setting, and are not checked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from adaspec.diagnostics.checks import Verdict

# key=value; the value stops at a space or punctuation and never ends in a full stop
SETTING = re.compile(r"(?<![\w.=-])([A-Za-z_]\w*(?:\.\w+)*)=([^\s,;:)\"'`]*[^\s,;:)\"'`.])")
COMMAND_ARGS = re.compile(r'ARGS="[^"]*"')
_ABSENT = object()


def settings_named(text: str) -> list[tuple[str, str]]:
    """The `key=value` settings an action names, outside `ARGS="..."` commands."""
    return SETTING.findall(COMMAND_ARGS.sub("", text))


def setting(settings: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted `key` in the nested `settings`; _ABSENT where there is none."""
    current: Any = settings
    for part in key.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return _ABSENT
        current = current[part]
    return current


def in_force(settings: Mapping[str, Any], key: str, value: str) -> bool:
    current = setting(settings, key)
    if current is _ABSENT or isinstance(current, Mapping):
        return False
    try:
        return math.isclose(float(current), float(value), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(current).lower() == value.lower()


def without_settings_in_force(verdict: Verdict, settings: Mapping[str, Any]) -> Verdict:
    kept, already = [], []
    for clause in filter(None, verdict.action.split("; ")):
        set_here = [(k, v) for k, v in settings_named(clause) if in_force(settings, k, v)]
        if set_here:
            already += [f"{k} is already {v}" for k, v in set_here]
        else:
            kept.append(clause)
    if not already:
        return verdict
    return replace(verdict, action=" ".join(filter(None, ["; ".join(kept), f"({', '.join(already)})"])))


def guarded(verdicts: list[Verdict], settings: Mapping[str, Any]) -> list[Verdict]:
    """`verdicts` about `settings` (a stage artefact's recorded config, or the run's, as a resolved nested
    mapping), guarded."""
    return [without_settings_in_force(v, settings) for v in verdicts]
