"""The sandbox that runs generated code: containment of the usual accidents, and positive proof of success."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from adaspec.evaluation.sandbox import isolation, run_program

SOLUTION = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"


def live_process_count(uid: int) -> int:
    """Processes of `uid` that are not zombies (killed ones wait a moment for init to reap them)."""
    count = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.stat().st_uid == uid:
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                count += state not in ("Z", "X")
        except (OSError, IndexError):
            continue
    return count


def test_correct_program_passes():
    result = run_program(SOLUTION, TESTS)
    assert result.passed and result.status == "passed"
    assert result.duration_s < 10


def test_failed_assert_fails():
    result = run_program(SOLUTION, "assert add(1, 2) == 4\n")
    assert not result.passed and result.status == "failed"
    assert "AssertionError" in result.stderr_tail


def test_syntax_error_fails():
    result = run_program("def add(a, b:\n    return a\n", TESTS)
    assert result.status == "failed" and "SyntaxError" in result.stderr_tail


def test_infinite_loop_times_out():
    result = run_program("while True:\n    pass\n", TESTS, timeout_s=1.0)
    assert result.status == "timeout" and not result.passed
    assert result.duration_s < 5


@pytest.mark.parametrize(
    "early_exit",
    ["import os\nos._exit(0)\n", "import sys\nsys.exit(0)\n", "raise SystemExit\n", "exit()\n"],
)
def test_exiting_before_the_asserts_is_a_failure(early_exit):
    result = run_program(SOLUTION + early_exit, "assert add(1, 2) == 4\n")
    assert not result.passed and result.status in ("exited_early", "failed")


def test_printing_a_fake_sentinel_does_not_pass():
    code = "import os, secrets\nprint(secrets.token_hex(16), flush=True)\nos._exit(0)\n"
    result = run_program(code, TESTS)
    assert not result.passed and result.status == "exited_early"


def test_unbounded_allocation_is_stopped():
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(2**20))\n"
    result = run_program(code, TESTS, timeout_s=10, memory_mb=128)
    assert not result.passed and result.status in ("failed", "killed")
    assert result.status == "killed" or "MemoryError" in result.stderr_tail


def test_python_fork_is_refused():
    result = run_program("import os\nwhile True:\n    os.fork()\n", TESTS)
    assert result.status == "failed" and "os.fork is not allowed" in result.stderr_tail
    result = run_program("import subprocess\nsubprocess.run(['true'])\n", TESTS)
    assert result.status == "failed" and "not allowed" in result.stderr_tail


@pytest.mark.skipif(
    os.geteuid() == 0 and isolation().run_as is None,
    reason="root without an unprivileged user to become: RLIMIT_NPROC cannot bound a fork bomb",
)
def test_fork_bomb_past_the_python_guard_is_contained():
    # ctypes is refused, but code can un-refuse it: the process limit and the kill must then hold.
    bomb = (
        "import sys\n"
        "del sys.modules['ctypes'], sys.modules['_ctypes']\n"
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "while True:\n"
        "    libc.fork()\n"
    )
    uid = isolation().run_as[0] if isolation().run_as else os.getuid()
    before = live_process_count(uid) if isolation().run_as else None
    result = run_program(bomb, TESTS, timeout_s=2.0)
    assert not result.passed and result.status in ("timeout", "failed", "killed")
    if before is not None:
        assert live_process_count(uid) <= before, "fork bomb processes survived the sandbox"
    assert subprocess.run(["true"], timeout=10).returncode == 0  # the host can still start processes
    assert run_program(SOLUTION, TESTS).passed


def test_writing_outside_the_working_directory_is_refused(tmp_path):
    outside = Path("/tmp") / f"adaspec-sandbox-escape-{os.getpid()}.txt"
    attempts = [
        f"open({str(outside)!r}, 'w').write('x')",
        "open('../escape.txt', 'a').write('x')",
        f"import os\nos.open({str(outside)!r}, os.O_WRONLY | os.O_CREAT)",
        f"import pathlib\npathlib.Path({str(outside)!r}).write_text('x')",
        f"import shutil\nshutil.copy('/etc/hostname', {str(outside)!r})",
    ]
    for attempt in attempts:
        result = run_program(attempt + "\n", TESTS)
        assert result.status == "failed", attempt
        assert "PermissionError" in result.stderr_tail, attempt
    assert not outside.exists()


def test_writing_inside_the_working_directory_works():
    code = (
        "import os, tempfile\n"
        "open('notes.txt', 'w').write('ok')\n"
        "os.makedirs('a/b', exist_ok=True)\n"
        "handle, name = tempfile.mkstemp()\n"
        "os.close(handle)\n"
        "os.remove(name)\n"
    )
    assert run_program(code, "assert open('notes.txt').read() == 'ok'\n").passed


def test_socket_is_refused():
    result = run_program("import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)\n", TESTS)
    assert result.status == "failed" and "network access" in result.stderr_tail


@pytest.mark.skipif(not isolation().namespaces, reason="no network namespace on this host (unshare)")
def test_no_network_even_past_the_python_guard():
    code = (
        "import sys\n"
        "for name in ('socket', '_socket'):\n"
        "    sys.modules.pop(name, None)\n"
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    reached = True\n"
        "except OSError:\n"
        "    reached = False\n"
    )
    assert run_program(code, "assert not reached\n").passed


def test_temporary_directory_is_removed_and_environment_scrubbed(monkeypatch):
    monkeypatch.setenv("ADASPEC_TEST_SECRET", "do-not-leak")
    code = "import os, sys\nsys.stderr.write('cwd=' + os.getcwd() + '\\n')\n"
    tests = (
        "assert 'ADASPEC_TEST_SECRET' not in os.environ\n"
        "assert os.environ['HOME'] == os.getcwd()\n"
        "assert os.environ['PATH'] == '/usr/bin:/bin'\n"
    )
    result = run_program(code, tests)
    assert result.passed, result.stderr_tail
    workdir = re.search(r"cwd=(\S+)", result.stderr_tail).group(1)
    assert "adaspec-sandbox-" in workdir
    assert not Path(workdir).exists()


@pytest.mark.skipif(isolation().run_as is None, reason="not started as root: no user to drop to")
def test_runs_as_the_unprivileged_user(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root only")
    secret.chmod(0o600)
    tests = (
        f"assert os.getuid() == {isolation().run_as[0]}\n"
        "try:\n"
        f"    open({str(secret)!r}).read()\n"
        "    leaked = True\n"
        "except PermissionError:\n"
        "    leaked = False\n"
        "assert not leaked\n"
    )
    result = run_program("import os\n", tests)
    assert result.passed, result.stderr_tail


def test_standard_library_imports_work_after_the_privilege_drop():
    code = (
        "import re, math, heapq, itertools\n"
        "from collections import Counter\n"
        "def most_common(s):\n"
        "    return Counter(s).most_common(1)[0][0]\n"  # imports heapq lazily
    )
    tests = (
        "assert most_common('abb') == 'b'\n"
        "import datetime\n"
        "assert datetime.datetime.strptime('2024-03-05', '%Y-%m-%d').day == 5\n"  # imports _strptime lazily
        "assert 'é'.encode('utf-16')\n"
    )
    result = run_program(code, tests)
    assert result.passed, result.stderr_tail
