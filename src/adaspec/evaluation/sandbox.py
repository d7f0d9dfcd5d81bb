"""Run untrusted, model-generated Python against its tests, in a separate and limited process.

Threat model, honestly: this guards the evaluation host against *accidents* in generated code (endless
loops, runaway memory, fork loops, stray file writes or network calls, a premature exit that looks
like success). It is not a security boundary against code written to escape; run that in a container
or VM. What each run gets (`sandbox_child.py` does the in-process part):

- its own process and session (`start_new_session`), run with `python -I -S -B`: no site-packages,
  no user site, no PYTHON* environment variables, no bytecode written;
- where the `unshare` tool works (Linux, root), new network and PID namespaces: no network interface
  at all, and killing the namespace's first process takes every process it started with it;
- a wall-clock timeout, after which the whole process group is killed (it is killed after every run);
- resource limits: address space (`memory_mb`), CPU seconds, file size, open files, processes;
- when started as root, the uid/gid of `nobody`: the file system's own permissions then keep it out
  of other users' files, and the process limit applies (the kernel ignores RLIMIT_NPROC for root);
- a fresh temporary working directory (also HOME and TMPDIR), removed afterwards;
- a scrubbed environment (minimal PATH, C.UTF-8 locale);
- Python-level guards: fork/exec/spawn/kill/subprocess, sockets and ctypes refused; open() and the os
  functions that change files refuse paths outside the working directory.

Success is proven positively: the child writes a random nonce as the last line of stdout *after* the
tests ran, and a run passes only with exit status 0 and that nonce, so `sys.exit(0)` or `os._exit(0)`
before the asserts is a failure.

Known gaps: C-level calls that avoid the patched Python functions (via a re-imported builtin module,
say) are stopped only by the OS-level layers above; without `unshare` the network guard is Python
only; a process that leaves its session survives the group kill unless the PID namespace took it;
the nonce lives in the child's memory, so code that hunts for it through frames can fake a pass;
reads are limited only by the user's file permissions.
"""

from __future__ import annotations

import functools
import json
import math
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CHILD_SCRIPT = Path(__file__).with_name("sandbox_child.py")
CHILD_EXIT_CODE_RAISED = 1
CHILD_EXIT_SETUP_FAILED = 3
UNPRIVILEGED_USER = "nobody"
MAX_FILE_BYTES = 16 * 2**20  # stdout and stderr count too
MAX_OPEN_FILES = 64
MAX_PROCESSES = 64  # per user: all of `nobody`'s processes and threads together
OUTPUT_TAIL_BYTES = 4096
NAMESPACE_PREFIX = ["unshare", "--net", "--pid", "--fork", "--kill-child"]


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    status: str  # passed | failed | timeout | exited_early | killed | error
    stderr_tail: str
    duration_s: float


@dataclass(frozen=True)
class Isolation:
    """What this host allows the sandbox to use, found out once per process."""

    namespaces: bool  # network and PID namespaces via `unshare`
    run_as: tuple[int, int] | None  # (uid, gid) to become, when started as root


@functools.cache
def isolation() -> Isolation:
    return Isolation(namespaces=_namespaces_work(), run_as=_unprivileged_ids())


def _namespaces_work() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run([*NAMESPACE_PREFIX, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _unprivileged_ids() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        user = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        return None
    return user.pw_uid, user.pw_gid


def _process_limit(run_as: tuple[int, int] | None) -> int:
    """RLIMIT_NPROC counts every task of the user, so a non-root user gets its current count as headroom."""
    if run_as is not None:
        return MAX_PROCESSES
    uid = os.getuid()
    tasks = 0
    for task_dir in Path("/proc").glob("[0-9]*/task/[0-9]*"):
        try:
            tasks += task_dir.stat().st_uid == uid
        except OSError:
            continue
    return tasks + MAX_PROCESSES


def _workdir_parent(run_as: tuple[int, int] | None) -> str | None:
    """Where to make working directories: the usual temp folder, unless `run_as` could not enter it."""
    default = Path(tempfile.gettempdir())
    if run_as is None:
        return None
    enterable = all(part.stat().st_mode & 0o001 for part in [default, *default.parents])
    return None if enterable else "/tmp"


def _scrubbed_environment(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _tail(stream, n_bytes: int = OUTPUT_TAIL_BYTES) -> str:
    stream.seek(0, os.SEEK_END)
    stream.seek(max(0, stream.tell() - n_bytes))
    return stream.read().decode("utf-8", errors="replace")


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _stop(process: subprocess.Popen, namespaces: bool) -> None:
    """Kill the program and everything it started; return once they are gone.

    In a PID namespace, killing its first process makes the kernel kill and reap every other process in
    it before that first process is reported dead, so `unshare`, which waits for it, exits last.
    Without one, the session's process group is killed, which is all its processes unless one left it.
    """
    first_processes = _children(process.pid) if namespaces else []
    for pid in first_processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if first_processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _status(returncode: int, sentinel_seen: bool) -> str:
    if returncode == 0:
        return "passed" if sentinel_seen else "exited_early"
    if returncode == CHILD_EXIT_CODE_RAISED:
        return "failed"
    if returncode == CHILD_EXIT_SETUP_FAILED:
        return "error"
    return "killed"  # by a signal (memory, CPU limit) or an odd exit status of its own


def run_program(code: str, test_code: str, timeout_s: float = 10.0, memory_mb: int = 512) -> SandboxResult:
    """Run `code`, then `test_code` in the same namespace, in a sandbox; passed only if both finished."""
    where = isolation()
    nonce = secrets.token_hex(16)
    workdir = tempfile.mkdtemp(prefix="adaspec-sandbox-", dir=_workdir_parent(where.run_as))
    start = time.monotonic()
    try:
        if where.run_as is not None:
            os.chown(workdir, *where.run_as)
        spec = {
            "code": code,
            "test_code": test_code,
            "nonce": nonce,
            "workdir": workdir,
            "uid": where.run_as[0] if where.run_as else None,
            "gid": where.run_as[1] if where.run_as else None,
            "memory_bytes": memory_mb * 2**20,
            "cpu_seconds": math.ceil(timeout_s) + 1,
            "file_bytes": MAX_FILE_BYTES,
            "max_open_files": MAX_OPEN_FILES,
            "max_processes": _process_limit(where.run_as),
        }
        command = [sys.executable, "-I", "-S", "-B", str(CHILD_SCRIPT)]
        if where.namespaces:
            command = [*NAMESPACE_PREFIX, *command]
        with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=workdir,
                    env=_scrubbed_environment(workdir),
                    start_new_session=True,
                )
            except OSError as e:
                return SandboxResult(False, "error", f"could not start the sandbox: {e}", 0.0)
            with process:
                try:
                    process.communicate(json.dumps(spec).encode(), timeout=timeout_s)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    _stop(process, where.namespaces)  # also whatever the program left running
            duration = time.monotonic() - start
            stderr_tail = _tail(stderr)
            if timed_out:
                return SandboxResult(False, "timeout", stderr_tail, duration)
            lines = _tail(stdout).split("\n")
            sentinel_seen = len(lines) >= 2 and lines[-1] == "" and lines[-2] == nonce
            status = _status(process.returncode, sentinel_seen)
            return SandboxResult(status == "passed", status, stderr_tail, duration)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
