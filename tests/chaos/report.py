"""The chaos report: each check of issue 16 with its tests' outcomes and times, as JSON and markdown.

A check FAILs when any of its tests fails or errors; it is NOT RUN when none of its tests passed or
failed (none collected, or all skipped): nothing was verified. A test marked xfail is a known gap the
check still has, named in the report. Skipped tests are counted and their reasons kept, so a check
passed with skips (e.g. without bubblewrap) does not read as a full pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adaspec.toolkit import markdown_table, write_json_atomically, write_text_atomically
from tests.chaos.checks import CHECKS

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


@dataclass
class Result:
    nodeid: str
    check: str  # a key of CHECKS
    outcome: str  # one of OUTCOMES
    duration_s: float  # setup + call + teardown: a module fixture's cost lands on its first test
    note: str = ""  # the failure's line, or why it was skipped or is expected to fail


def check_status(counts: dict[str, int]) -> str:
    if counts["failed"] or counts["error"]:
        return "FAIL"
    if not (counts["passed"] or counts["xpassed"] or counts["xfailed"]):
        return "NOT RUN"
    if counts["xfailed"]:
        return "KNOWN GAP"
    if counts["skipped"]:
        return f"PASS ({counts['skipped']} skipped)"
    return "PASS"


def build_report(outcomes: list[Result], wall_s: float, context: dict[str, Any]) -> dict[str, Any]:
    """`context`: when, the command, the host facts the checks depend on (isolation, user)."""
    unknown = {o.check for o in outcomes} - set(CHECKS)
    if unknown:
        raise ValueError(f"tests name checks that do not exist: {sorted(unknown)} (known: {list(CHECKS)})")
    checks = []
    for number, (key, check) in enumerate(CHECKS.items(), 1):
        tests = [o for o in outcomes if o.check == key]
        counts = {name: sum(o.outcome == name for o in tests) for name in OUTCOMES}
        checks.append(
            {
                "number": number,
                "key": key,
                "title": check.title,
                "detail": check.detail,
                "status": check_status(counts),
                "counts": counts,
                "duration_s": round(sum(o.duration_s for o in tests), 2),
                "tests": [asdict(o) | {"duration_s": round(o.duration_s, 2)} for o in tests],
            }
        )
    passing = sum(c["status"].startswith("PASS") for c in checks)
    return {
        **context,
        "wall_s": round(wall_s, 1),
        "summary": f"{passing} of {len(checks)} checks pass; {len(outcomes)} tests in {wall_s:.0f} s",
        "ok": all(c["status"].startswith("PASS") for c in checks),
        "checks": checks,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Chaos report: issue 16's hostile checks",
        "",
        f"`{report['command']}` at {report['started']}: **{report['summary']}**.",
        "",
        *[f"- {name}: {value}" for name, value in report["host"].items()],
        "",
        markdown_table(
            ["#", "check", "status", "passed", "failed", "skipped", "known gaps", "time (s)"],
            [
                [
                    str(c["number"]),
                    _cell(c["title"]),
                    c["status"],
                    str(c["counts"]["passed"] + c["counts"]["xpassed"]),
                    str(c["counts"]["failed"] + c["counts"]["error"]),
                    str(c["counts"]["skipped"]),
                    str(c["counts"]["xfailed"]),
                    f"{c['duration_s']:.1f}",
                ]
                for c in report["checks"]
            ],
        ),
    ]
    for c in report["checks"]:
        lines += ["", f"## {c['number']}. {c['title']}: {c['status']}", "", c["detail"], ""]
        if not c["tests"]:
            lines.append(f"No test is marked `@pytest.mark.chaos({c['key']!r})`.")
            continue
        rows = [
            [
                _cell(t["nodeid"].removeprefix("tests/")),
                t["outcome"],
                f"{t['duration_s']:.2f}",
                _cell(t["note"]),
            ]
            for t in c["tests"]
        ]
        lines.append(markdown_table(["test", "outcome", "time (s)", "note"], rows))
    return "\n".join(lines) + "\n"


def write_report(folder: Path, report: dict[str, Any]) -> None:
    """report.json and report.md in `folder`, which git ignores (it holds its own .gitignore)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomically(folder / ".gitignore", "*\n")
    write_json_atomically(folder / "report.json", report)
    write_text_atomically(folder / "report.md", to_markdown(report))
