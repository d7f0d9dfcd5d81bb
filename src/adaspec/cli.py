"""`@hydra_entry`, the Hydra entry points' decorator in place of `@hydra.main`.

    @hydra_entry
    def main(cfg: DictConfig) -> None:
        ...  # cfg is composed and valid

It composes `conf/config.yaml` with the command line as `hydra.main` does and runs
`adaspec.config.rules.validate` once: before Hydra writes its run folder (`ValidateBeforeRun`), so a bad value
leaves nothing behind, or in a multirun before each job. Every mistake a user can make on the command
line is reported as one line on stderr with exit status 2: a UserError, and Hydra's own composition
errors (an unknown key, an unknown group option, a value outside a choice or of the wrong type, an
override that does not parse), naming the key and the closest allowed names.

Hydra prints composition errors itself, on several lines, and exits 1, unless the environment variable
HYDRA_FULL_ERROR=1 makes it raise them. So the decorator sets that variable while Hydra composes and
turns what it raises into one line; the task starts with the variable as the user had it, so errors
the task raises are reported by Hydra as before. A user who sets HYDRA_FULL_ERROR=1 gets Hydra's
full errors, untranslated.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from adaspec.config.rules import validate
from adaspec.errors import UserError, reported_as_one_line
from adaspec.logs import one_line_per_event

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = CONF.parent / "experiments"  # conf/config.yaml's search path: experiment groups such as paper
FULL_ERROR = "HYDRA_FULL_ERROR"


class ValidateBeforeRun(Callback):
    """Validates the config of a single run before Hydra creates its run folder (`hydra.run.dir`, below
    `paths.root`), so that a bad value leaves nothing behind. Registered in conf/config.yaml as
    `hydra.callbacks.validate`. Multirun jobs are validated by the task wrapper instead, one by one."""

    validated = False  # this process's single run has been validated

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        with reported_as_one_line():  # exits: Hydra would turn a callback's exception into a warning
            validate(config)
        ValidateBeforeRun.validated = True


def hydra_entry(task: Callable[[DictConfig], Any]) -> Callable[[], Any]:
    """Turn `task(cfg)` into the command-line entry point `main()` (see the module docstring)."""
    translating = False  # True while main() has set HYDRA_FULL_ERROR for the composition

    # functools.wraps: Hydra unwraps the task to name the job (train.log, ...) after its module
    @functools.wraps(task)
    def run_task(cfg: DictConfig) -> Any:
        if translating:  # composed: the task's own errors are Hydra's to report, as without the decorator
            os.environ.pop(FULL_ERROR, None)
        with reported_as_one_line():
            if not ValidateBeforeRun.validated:  # a multirun job
                validate(cfg)
            one_line_per_event()
            return task(cfg)

    hydra_main = hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")(run_task)

    @functools.wraps(task)
    def main() -> Any:
        nonlocal translating
        translating = os.environ.get(FULL_ERROR) != "1"  # "1": the user asked for Hydra's full errors
        if translating:
            os.environ[FULL_ERROR] = "1"
        try:
            with reported_as_one_line():
                try:
                    return hydra_main()
                except (ConfigCompositionException, OverrideParseException) as err:
                    if not translating:
                        raise
                    raise UserError(composition_error(err)) from None
        finally:
            if translating:
                os.environ.pop(FULL_ERROR, None)
            translating, ValidateBeforeRun.validated = False, False

    return main


def composition_error(err: ConfigCompositionException | OverrideParseException) -> str:
    """One line for an error Hydra raised while composing the config from the files and the command line."""
    if isinstance(err, MissingConfigException) and err.options:
        return _missing_option(err)
    if isinstance(err, OverrideParseException):
        reason = _first_line(err.message)
        return f"cannot read the override `{err.override}` ({reason}); write key=value, e.g. stage.lr=1e-3"
    cause = err.__cause__
    if isinstance(cause, ConfigKeyError | ConfigAttributeError) and cause.full_key:
        return _unknown_key(cause)
    if isinstance(cause, ValidationError) and cause.full_key:
        return _bad_value(cause)
    return _joined(err, cause)


def _unknown_key(cause: ConfigKeyError | ConfigAttributeError) -> str:
    full_key, key = str(cause.full_key), str(cause.key)
    prefix = full_key[: -len(key)] if full_key.endswith(key) else ""
    allowed = [str(k) for k in cause.parent_node.keys()] if cause.parent_node is not None else []
    if not prefix:  # top level: config groups too, `stage=ref` as well as `seed=1`
        allowed += [group for group in _groups() if group not in allowed]
    line = f"unknown config key `{full_key}`"
    close = difflib.get_close_matches(key, allowed, n=3, cutoff=0.6)
    if close:
        line += "; did you mean " + " or ".join(f"`{prefix}{c}`" for c in close) + "?"
    return line + (f" (allowed: {', '.join(allowed)})" if allowed else "")


def _bad_value(cause: ValidationError) -> str:
    value, message = cause.value, _first_line(cause.msg)
    choices = re.search(r"expected one of \[(.*)\]", message)
    if choices:  # an enum: the allowed values and the closest one
        allowed = [c.strip() for c in choices.group(1).split(",")]
        reason = f"must be one of {', '.join(allowed)}"
        close = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.6)
        if close:
            reason += f"; did you mean `{cause.full_key}={close[0]}`?"
    else:  # a type: "Value 'fast' of type 'str' could not be converted to Float"
        reason = message
    return f"config key `{cause.full_key}`={value!r} is invalid: {reason}"


def _missing_option(err: MissingConfigException) -> str:
    group, _, option = str(err.missing_cfg_file).rpartition("/")
    options = [o for o in err.options if not o.endswith("_schema")]  # the schemas are not choices
    name = f"`{group}={option}`" if group else f"`{option}`"
    line = f"no config {name}" + (f" in config group `{group}`" if group else "")
    close = difflib.get_close_matches(option, options, n=3, cutoff=0.6)
    if close:
        line += "; did you mean " + " or ".join(f"`{group}={c}`" for c in close) + "?"
    return f"{line} (options: {', '.join(options)})"


def _groups() -> list[str]:
    folders = [*CONF.iterdir(), *(EXPERIMENTS.iterdir() if EXPERIMENTS.is_dir() else [])]
    return sorted(p.name for p in folders if p.is_dir() and p.name != "hydra" and any(p.glob("*.yaml")))


def _first_line(text: Any) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _joined(err: Exception, cause: BaseException | None) -> str:
    text = str(err) + (f"\n{_first_line(cause)}" if isinstance(cause, OmegaConfBaseException) else "")
    return " ".join(line.strip() for line in text.splitlines() if line.strip())
