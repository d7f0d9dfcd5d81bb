"""Which evaluation a results folder holds, and whether a rerun may replace it.

A results folder (`eval/<setting>[-<eval.name>]`) holds one evaluation. Its results.json records the
`identity` of that evaluation: the config that changes its numbers (`eval` less its name, `decode`,
`task`, `seed`, the attention implementation, the device) and the weights hashes of the target and
of each draft, and the training-free drafts (`baseline`) evaluated beside them. A rerun with the same identity is skipped unless `overwrite=true`; another identity at
the same folder is refused, naming what differs, as the stages refuse another config.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from adaspec.errors import UserError
from adaspec.toolkit import jsonable

IDENTITY = "identity"
SHOWN_DIFFERENCES = 3
EVAL_KEYS_ADDED = {"timed_prompts": None, "tag_data": {}, "target_servings": []}  # with their defaults
DECODE_KEYS_ADDED = {"target_dtype": "float32", "draft_dtype": "float32", "kv_cache": "dynamic", "compile": False,
                     "draft_compile": False}
# keys that results recorded before they existed lack, with the value those evaluations ran with (every task
# was plain text before the chat format, and every target trained on the drafts' records before
# target_n_train): `differences` takes a missing one for that value
RECORDED_LATER = {"eval.tag_ks": {}, "task.prompt_format": "plain", "task.target_n_train": None}


def evaluation_identity(config: dict[str, Any], device: str, weights: dict[str, str] | None) -> dict[str, Any]:
    """From the resolved config as a plain dict (results.json's `config`); `weights`: {row: hash}, None
    when unknown (results written before identities were recorded). JSON-normalised, with a fingerprint."""
    identity = {
        # the name is the folder's; keys added later are left out at their defaults, so earlier results
        # keep their identity
        "eval": {key: v for key, v in config["eval"].items()
                 if key != "name" and not (key in EVAL_KEYS_ADDED and v == EVAL_KEYS_ADDED[key])},
        "decode": {key: v for key, v in config["decode"].items()
                   if not (key in DECODE_KEYS_ADDED and v == DECODE_KEYS_ADDED[key])},
        "task": {key: v for key, v in config["task"].items() if key != "default_k"},  # acts through k
        "seed": config["seed"],
        "attn_implementation": config["model"]["attn_implementation"],
        "device": device,
        "weights": weights,
    }
    if config.get("baseline"):  # training-free drafts evaluated beside the trained ones (none before they existed)
        identity["baseline"] = config["baseline"]
    identity = json.loads(json.dumps(jsonable(identity), sort_keys=True))  # as it reads back from the file
    identity["fingerprint"] = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return identity


def recorded_identity(results: dict[str, Any], path: Path) -> dict[str, Any]:
    """The identity results.json records; for older files, rebuilt from its config (weights unknown)."""
    if IDENTITY in results:
        return results[IDENTITY]
    if "config" not in results:
        raise UserError(
            f"{path} records neither its settings nor its config; pass overwrite=true to replace it, "
            f"or eval.name=<suffix> to keep both"
        )
    device = "cpu" if results.get("device", "cpu") == "cpu" else "cuda"
    return evaluation_identity(results["config"], device, None)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, v in value.items():
            out.update(_flat(v, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`key: old -> new` for every setting that differs (the fingerprint aside; the weights only when
    both sides know them)."""
    old, new = ({**RECORDED_LATER, **_flat(side)} for side in (recorded, current))
    skip = {"fingerprint"}
    if recorded.get("weights") is None or current.get("weights") is None:
        skip |= {key for key in (*old, *new) if key == "weights" or key.startswith("weights.")}
    keys = sorted(k for k in {*old, *new} - skip if old.get(k, "<unset>") != new.get(k, "<unset>"))
    return [f"{key}: {old.get(key, '<unset>')} -> {new.get(key, '<unset>')}" for key in keys]


def previous_results(results_json: Path, current: dict[str, Any], overwrite: bool) -> dict[str, Any] | None:
    """The results already at `results_json` when they come from this very evaluation (nothing to do);
    None when there are none or `overwrite` is set; a UserError when they come from another one."""
    if overwrite or not results_json.is_file():
        return None
    try:
        results = json.loads(results_json.read_text())
    except json.JSONDecodeError as err:
        raise UserError(
            f"{results_json} is not valid JSON ({err.msg}, line {err.lineno}); pass overwrite=true to replace it"
        ) from err
    changed = differences(recorded_identity(results, results_json), current)
    if not changed:
        return results
    shown = "; ".join(changed[:SHOWN_DIFFERENCES]) + (
        f"; and {len(changed) - SHOWN_DIFFERENCES} more" if len(changed) > SHOWN_DIFFERENCES else ""
    )
    raise UserError(
        f"{results_json} holds an evaluation with other settings ({shown}); pass eval.name=<suffix> to keep "
        f"both, or overwrite=true to replace it"
    )
