"""pytest plugin behind `make chaos`: records the outcome and time of every test marked
`@pytest.mark.chaos("<check>")` and writes the report (tests/chaos/report.py) when the session ends.

    python -m pytest -m chaos -p tests.chaos.plugin --chaos-report=chaos

Without --chaos-report it does nothing. A chaos marker that names no known check stops the run at
collection. The run fails unless every check passes: a check left NOT RUN (no test verified it) or with
a KNOWN GAP (an xfail test) fails it like a failed test, so `make chaos` exits 0 only when issue 16 holds.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.chaos.checks import CHECKS
from tests.chaos.report import Result, build_report, write_report

# a later phase's outcome replaces an earlier one only when it is worse (a teardown error after a pass)
SEVERITY = {"passed": 0, "skipped": 1, "xfailed": 1, "xpassed": 1, "failed": 2, "error": 2}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-report",
        metavar="DIR",
        default=None,
        help="write report.json and report.md of the tests marked chaos (issue 16's checks) into DIR",
    )


def pytest_configure(config: pytest.Config) -> None:
    folder = config.getoption("--chaos-report")
    if folder:
        config.pluginmanager.register(ChaosRecorder(Path(folder), config), "chaos-recorder")


def outcome_of(report: pytest.TestReport) -> tuple[str, str]:
    """(outcome, note) of one phase of one test."""
    if hasattr(report, "wasxfail"):
        return ("xfailed" if report.skipped else "xpassed"), report.wasxfail
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return "skipped", reason.removeprefix("Skipped: ")
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr).strip()
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return ("failed" if report.when == "call" else "error"), " / ".join(lines)[:300]
    return "passed", ""


class ChaosRecorder:
    def __init__(self, folder: Path, config: pytest.Config):
        self.folder = folder
        self.command = " ".join(["pytest", *config.invocation_params.args])
        self.check_of: dict[str, str] = {}
        self.results: dict[str, Result] = {}
        self.collected = False
        self.started = datetime.now().astimezone().isoformat(timespec="seconds")
        self.load = os.getloadavg()[0]
        self.t0 = time.monotonic()

    @pytest.hookimpl(trylast=True)  # after `-m chaos` has deselected the rest
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            marker = item.get_closest_marker("chaos")
            if marker is None:
                continue
            key = marker.args[0] if marker.args else None
            if key not in CHECKS:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.chaos needs the check it verifies, one of {list(CHECKS)}; "
                    f"got {key!r}"
                )
            self.check_of[item.nodeid] = key
        self.collected = True

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        check = self.check_of.get(report.nodeid)
        if check is None:
            return
        result = self.results.setdefault(report.nodeid, Result(report.nodeid, check, "passed", 0.0))
        result.duration_s += report.duration
        outcome, note = outcome_of(report)
        if SEVERITY[outcome] > SEVERITY[result.outcome]:
            result.outcome, result.note = outcome, note

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.collected or session.config.option.collectonly:  # nothing ran: no report
            return
        report = build_report(list(self.results.values()), time.monotonic() - self.t0, self.context())
        write_report(self.folder, report)
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(f"chaos report: {self.folder / 'report.md'} ({report['summary']})")
        if not report["ok"] and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a check NOT RUN or with a KNOWN GAP

    def context(self) -> dict:
        from adaspec.sandbox import isolation as sandbox

        return {
            "command": self.command,
            "started": self.started,
            "host": {
                "MBPP sandbox isolation": sandbox.isolation().description,
                "user": "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (not root: no user to drop to)",
                "CPUs": f"{os.cpu_count()}, load average {self.load:.1f} at the start",
                "Python": sys.version.split()[0],
            },
        }
