"""Artefact identity: which config fields make a stage's artefact what it is, declared beside the fields.

A field of the schema (adaspec.config.schema) counts in a stage's fingerprint wherever its section counts, unless
it says otherwise with `counted(default, when=rule)`, where `rule(stage, section, cfg)` (the field's
section and the whole config as plain dicts) says whether it counts. A schema class may set
`IDENTITY_DEFAULT` to the rule of its undeclared fields (the top level: none count; `distill`: stage 3's).
A top-level section none of whose fields count is left out, so adding a field that does not count, or
counts only away from its default, leaves every earlier artefact its fingerprint
(tests/test_fingerprint_unchanged.py holds them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
from collections.abc import Callable
from typing import Any, Union, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, OmegaConf

IDENTITY = "identity"  # field metadata key: the rule
FLAT_FOR = "flat_for"  # field metadata key: stages that record a section's counted fields at the top level
TARGET_STAGES = ("target", "pretrain_target")

Rule = Callable[[str, dict, dict], bool]


def counted(default: Any = dataclasses.MISSING, *, when: Rule, flat_for: tuple[str, ...] = (), **field_args):
    """A dataclass field whose place in artefact identity is `when` (see the module docstring)."""
    return dataclasses.field(default=default, metadata={IDENTITY: when, FLAT_FOR: flat_for}, **field_args)


def always(stage: str, section: dict, cfg: dict) -> bool:
    return True


def never(stage: str, section: dict, cfg: dict) -> bool:
    return False


def for_stages(*stages: str) -> Rule:
    return lambda stage, section, cfg: stage in stages


def unless_at(default: Any, name: str) -> Rule:
    """Counts only away from `default` (a field added after artefacts existed that acts only away from it)."""
    return lambda stage, section, cfg: section.get(name, default) != default


def _schema_of(annotation: Any) -> type | None:
    """The dataclass in `annotation` (`X`, `X | None`), if any."""
    if dataclasses.is_dataclass(annotation):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        return next((a for a in get_args(annotation) if dataclasses.is_dataclass(a)), None)
    return None


def _counted(schema: type, section: dict, stage: str, cfg: dict) -> tuple[dict, dict]:
    """(the counted fields of `section`, those of them recorded at the top level)."""
    default = getattr(schema, "IDENTITY_DEFAULT", always)
    hints = get_type_hints(schema)
    declared = {f.name: f.metadata for f in dataclasses.fields(schema)}
    kept: dict = {}
    flat: dict = {}
    for name, value in section.items():
        metadata = declared.get(name, {})
        if not metadata.get(IDENTITY, default)(stage, section, cfg):
            continue
        inner = _schema_of(hints.get(name))
        if inner is not None and isinstance(value, dict):
            value, _ = _counted(inner, value, stage, cfg)
        if stage in metadata.get(FLAT_FOR, ()) and isinstance(value, dict):
            flat.update(value)
        else:
            kept[name] = value
    return kept, flat


def identity(schema: type, cfg: DictConfig, stage: str) -> dict[str, Any]:
    """What of `cfg` (of the dataclass `schema`: adaspec.config.schema.Config) makes `stage`'s artefact: the
    counted fields, by section, as plain values."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    kept, flat = _counted(schema, plain, stage, plain)
    kept = {name: v for name, v in kept.items() if v != {} or not isinstance(plain.get(name), dict)}
    return {**kept, **flat}


def fingerprint_of(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
