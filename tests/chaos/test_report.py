"""The chaos report: per-check verdicts from test outcomes, and the pytest plugin that records them,
run on small test files of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.chaos.checks import CHECKS
from tests.chaos.report import Result, build_report, to_markdown
from tests.conftest import REPO

CONTEXT = {"command": "pytest -m chaos", "started": "2026-01-01T00:00:00+00:00", "host": {"user": "root"}}


def test_a_check_passes_only_when_its_tests_verified_it():
    results = [
        Result("tests/a.py::passes", "scorer", "passed", 1.0),
        Result("tests/a.py::skips", "scorer", "skipped", 0.5, "bubblewrap does not work here"),
        Result("tests/b.py::passes", "resume-config", "passed", 2.0),
        Result("tests/b.py::fails", "resume-config", "failed", 3.0, "assert 1 == 2"),
        Result("tests/c.py::all_skipped", "exact-resume", "skipped", 0.1, "no data"),
        Result("tests/d.py::passes", "corrupt-weights", "passed", 1.0),
        Result("tests/d.py::gap", "corrupt-weights", "xfailed", 1.0, "known | gap"),
        Result("tests/e.py::passes", "eval-rerun", "passed", 4.0),
        Result("tests/f.py::errors", "bad-input", "error", 0.2, "fixture broke"),
    ]
    report = build_report(results, 20.0, CONTEXT)
    statuses = {c["key"]: c["status"] for c in report["checks"]}
    assert statuses == {
        "scorer": "PASS (1 skipped)",
        "resume-config": "FAIL",
        "exact-resume": "NOT RUN",  # everything skipped: nothing was verified
        "corrupt-weights": "KNOWN GAP",
        "eval-rerun": "PASS",
        "bad-input": "FAIL",
        "diagnose": "NOT RUN",
    }
    assert [c["number"] for c in report["checks"]] == list(range(1, len(CHECKS) + 1))
    assert report["summary"] == "2 of 7 checks pass; 9 tests in 20 s" and report["ok"] is False
    assert report["checks"][1]["duration_s"] == 5.0

    markdown = to_markdown(report)
    assert (
        "| 1 | Forged MBPP passes and hostile programs | PASS (1 skipped) | 1 | 0 | 1 | 0 | 1.5 |" in markdown
    )
    assert "| d.py::gap | xfailed | 1.00 | known \\| gap |" in markdown  # a pipe does not split the cell
    assert "No test is marked `@pytest.mark.chaos('diagnose')`." in markdown

    with pytest.raises(ValueError, match="do not exist: \\['typo'\\]"):
        build_report([Result("t", "typo", "passed", 0.0)], 1.0, CONTEXT)


def run_plugin(tmp_path, source: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    """pytest on one test file with the plugin; the report it wrote, if any."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    chaos(check): issue 16's checks\n")
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(source))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(tmp_path), "-q", "-p", "tests.chaos.plugin"]
        + ["-p", "no:cacheprovider", f"--chaos-report={tmp_path / 'chaos'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    written = tmp_path / "chaos" / "report.json"
    return proc, json.loads(written.read_text()) if written.exists() else None


def test_the_plugin_records_every_phase_and_writes_the_report(tmp_path):
    proc, report = run_plugin(
        tmp_path,
        """
        import pytest

        @pytest.fixture
        def broken_teardown():
            yield
            raise RuntimeError("teardown broke")

        @pytest.mark.chaos("scorer")
        def test_passes():
            pass

        @pytest.mark.chaos("scorer")
        def test_skips():
            pytest.skip("no bwrap here")

        @pytest.mark.chaos("resume-config")
        def test_teardown_error(broken_teardown):
            pass

        @pytest.mark.chaos("exact-resume")
        @pytest.mark.xfail(strict=True, reason="a known gap")
        def test_known_gap():
            assert False

        @pytest.mark.chaos("corrupt-weights")
        def test_fails():
            assert 1 == 2, "corrupted weights were accepted"

        def test_not_a_chaos_test():
            pass
        """,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"chaos report: {tmp_path / 'chaos' / 'report.md'} (1 of 7 checks pass" in proc.stdout
    checks = {c["key"]: c for c in report["checks"]}
    outcomes = {
        t["nodeid"].split("::")[1]: (t["outcome"], t["note"]) for c in checks.values() for t in c["tests"]
    }
    assert outcomes.keys() == {
        "test_passes",
        "test_skips",
        "test_teardown_error",
        "test_known_gap",
        "test_fails",
    }
    assert outcomes["test_skips"] == ("skipped", "no bwrap here")
    assert (
        outcomes["test_teardown_error"][0] == "error"
        and "teardown broke" in outcomes["test_teardown_error"][1]
    )
    assert outcomes["test_known_gap"] == ("xfailed", "a known gap")
    assert (
        outcomes["test_fails"][0] == "failed"
        and "corrupted weights were accepted" in outcomes["test_fails"][1]
    )
    assert [checks[k]["status"] for k in ("scorer", "resume-config", "exact-resume", "corrupt-weights")] == [
        "PASS (1 skipped)",
        "FAIL",
        "KNOWN GAP",
        "FAIL",
    ]
    assert "MBPP sandbox isolation" in report["host"] and (tmp_path / "chaos" / "report.md").is_file()
    assert (tmp_path / "chaos" / ".gitignore").read_text() == "*\n"


def test_a_run_that_leaves_a_check_unverified_fails(tmp_path):
    proc, report = run_plugin(
        tmp_path, 'import pytest\n\n@pytest.mark.chaos("scorer")\ndef test_ok():\n    pass\n'
    )
    assert "1 passed" in proc.stdout and proc.returncode == 1  # six checks NOT RUN
    assert report["ok"] is False


def test_a_marker_without_a_known_check_stops_the_run(tmp_path):
    proc, report = run_plugin(
        tmp_path, 'import pytest\n\n@pytest.mark.chaos("scorrer")\ndef test_x():\n    pass\n'
    )
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR and report is None
    assert (
        "test_x: @pytest.mark.chaos needs the check it verifies" in proc.stderr and "'scorrer'" in proc.stderr
    )
