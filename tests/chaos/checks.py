"""The hostile checks of issue 16, in its order. A test joins one with `@pytest.mark.chaos("<key>")` (or a
module's `pytestmark`); `make chaos` runs them all and reports per check (tests/chaos/plugin.py)."""

from __future__ import annotations

from typing import NamedTuple


class Check(NamedTuple):
    title: str
    detail: str


CHECKS: dict[str, Check] = {
    "scorer": Check(
        "Forged MBPP passes and hostile programs",
        "The nonce read from the sandbox's frame + os._exit, an always-true __eq__, fork and memory bombs, "
        "exits, sockets, huge output, big files, writes outside through _io.open / posix.open, a re-imported "
        "posix, the host's /proc: all scored as failures, nothing left running, nothing written outside.",
    ),
    "resume-config": Check(
        "Resume with another config",
        "resume=true with another config is refused, as without resume; a finished stage is never rewritten.",
    ),
    "exact-resume": Check(
        "Exact resume after SIGKILL",
        "A stage killed from outside mid-epoch and resumed equals the uninterrupted run: bit-identical "
        "weights, the same continuous per-step log; stale temporary folders are removed.",
    ),
    "corrupt-weights": Check(
        "Corrupted or truncated weights",
        "Weights overwritten with random bytes, or truncated, are refused in one line naming the file and "
        "what to rerun.",
    ),
    "eval-rerun": Check(
        "Evaluation rerun",
        "Rerunning an evaluation with other settings is refused naming what differs; the same settings "
        "skip; overwrite=true replaces.",
    ),
    "bad-input": Check(
        "Bad input at the entry points",
        "model.draft.hidden_size=-4, trainer.devices=0, gamma=100 and the misspelt stgae=ref, stage.lrr=1e-3, "
        "given to the real entry points as subprocesses: one line on stderr, exit status 2, nothing written "
        "under paths.root.",
    ),
    "diagnose": Check(
        "`make diagnose` on a default run",
        "No false warning: the schedule in force is not flagged, no advice names a setting already in force, "
        "speed-ups are against target-only decoding, c is measured robustly.",
    ),
}
