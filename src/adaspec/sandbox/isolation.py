"""Run untrusted, model-generated Python against its tests: the code in a sandbox, the verdict outside it.

`run_program(code, test_code)` splits the tests (`checked_asserts`): the sandboxed process runs the
code and evaluates only the expressions whose values the asserts need, and sends them back as plain
data; this process compares them with the expected values, which the sandbox never sees. A program
therefore cannot pass by exiting early, by printing a report, or by returning an object that claims to
equal anything: it passes only by producing the right values.

Isolation, the strongest this host allows (`isolation()`; a weaker one is announced once, as a warning):

- **bubblewrap** (`bwrap`, Debian package `bubblewrap`): new user, PID, network, IPC, UTS and cgroup
  namespaces; a root file system holding only /usr (and the /lib, /bin links), the dynamic-loader
  cache, the Python installation and the child script, all read-only; a fresh /proc that shows only the
  sandbox's own processes; a minimal /dev; a size-limited tmpfs /tmp as the only writable place. When
  started as root, the namespace maps only root (for bubblewrap's own set-up) and `nobody`, which the
  child becomes before any code runs: the code is `nobody` on the host too, so the process limit holds.
  Everything in the sandbox dies with its first process.
- otherwise, as before: network and PID namespaces via `unshare` where it works, `nobody` when root,
  a fresh working directory, and Python-level guards; the host's files and /proc stay visible (and
  readable where their permissions allow).

In both: `python -I -S -B` (no site-packages, no PYTHON* variables), a scrubbed environment, limits on
address space, CPU seconds, file size, open files and processes, a wall-clock timeout after which
everything the run started is killed (it is killed after every run), and the Python-level guards of
`child.py` (fork/exec/kill/sockets/ctypes refused, writes outside the working directory
refused), which under bubblewrap only give clearer errors.

Known gaps: without bubblewrap, a program can read what `nobody` may read (the task files included),
and a process that leaves its session survives unless the PID namespace took it; as root, bubblewrap
cannot forbid nested user namespaces (its --disable-userns does not combine with the external uid map).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from adaspec.sandbox.checked_asserts import NotPlainData, decode_report, first_failed_check, plan_tests

log = logging.getLogger(__name__)

CHILD_SCRIPT = Path(__file__).with_name("child.py")
CHILD_EXIT_CODE_RAISED = 1
CHILD_EXIT_SETUP_FAILED = 3
UNPRIVILEGED_USER = "nobody"
MAX_FILE_BYTES = 16 * 2**20  # stdout, stderr and the report count too
MAX_OPEN_FILES = 64
MAX_PROCESSES = 64  # under bubblewrap per sandbox; otherwise all of `nobody`'s processes together
OUTPUT_TAIL_BYTES = 4096
NAMESPACE_PREFIX = ["unshare", "--net", "--pid", "--fork", "--kill-child"]
BWRAP_NAMESPACES = ["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
BWRAP_LIFETIME = ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
BWRAP_TMPFS_BYTES = 4 * MAX_FILE_BYTES
BWRAP_CHILD_SCRIPT = "/sandbox/child.py"
BWRAP_WORKDIR = "/tmp/work"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
SETUP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    status: str  # passed | failed | timeout | exited_early | killed | error
    stderr_tail: str
    duration_s: float


@dataclass(frozen=True)
class Isolation:
    """What this host allows the sandbox to use, found out once per process."""

    bubblewrap: str | None  # the `bwrap` program, when it works here
    namespaces: bool  # network and PID namespaces (bubblewrap's, or `unshare`'s in the fallback)
    run_as: tuple[int, int] | None  # (uid, gid) to become, when started as root
    description: str


@dataclass(frozen=True)
class ChildRun:
    returncode: int | None  # None: timed out
    report: bytes
    stderr_tail: str
    duration_s: float


_isolation_lock = threading.Lock()


def isolation() -> Isolation:
    with _isolation_lock:  # scoring threads ask at once; the fallback warning must come once
        return _find_isolation()


@functools.cache
def _find_isolation() -> Isolation:
    bwrap = shutil.which("bwrap") if sys.platform == "linux" else None
    why_not = _why_bubblewrap_fails(bwrap)
    if why_not is None:
        return bubblewrap_isolation(bwrap)
    fallback = fallback_isolation()
    log.warning(
        "MBPP sandbox: bubblewrap unavailable (%s); falling back to weaker isolation: %s "
        "(install the `bubblewrap` package for a read-only, process- and network-isolated sandbox)",
        why_not,
        fallback.description,
    )
    return fallback


def isolation_summary() -> str:
    """How this host runs generated code, as the results record it: bubblewrap and where it lives, or the
    fallback's layers."""
    found = isolation()
    return f"bubblewrap ({found.bubblewrap})" if found.bubblewrap else f"fallback: {found.description}"


def bubblewrap_isolation(bwrap: str) -> Isolation:
    return Isolation(bwrap, True, _unprivileged_ids(), "bubblewrap")


def fallback_isolation() -> Isolation:
    """The isolation without bubblewrap: `unshare` namespaces where they work, `nobody` when root."""
    namespaces = _namespaces_work()
    run_as = _unprivileged_ids()
    layers = ["network and PID namespaces (unshare)" if namespaces else "no namespaces"]
    layers.append(f"user {UNPRIVILEGED_USER}" if run_as else "the current user")
    description = f"{', '.join(layers)}, resource limits and Python-level guards"
    return Isolation(None, namespaces, run_as, description)


def _unprivileged_ids() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        user = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        return None
    return user.pw_uid, user.pw_gid


def _why_bubblewrap_fails(bwrap: str | None) -> str | None:
    if bwrap is None:
        return "bwrap not found"
    trial = bubblewrap_isolation(bwrap)
    if os.geteuid() == 0 and trial.run_as is None:
        return f"no user {UNPRIVILEGED_USER!r} to run as"
    run = _run_child(trial, {"code": "x = 1", "setup": "", "probes": ["x"]}, SETUP_TIMEOUT_S, 256)
    if run.returncode == 0 and run.report == b"[1]":
        return None
    return f"a trial run failed: {run.stderr_tail.strip()[-300:] or f'exit status {run.returncode}'}"


def _namespaces_work() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run([*NAMESPACE_PREFIX, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _process_limit(where: Isolation) -> int:
    """RLIMIT_NPROC counts every task of the user, so a non-root user gets its current count as headroom."""
    if where.run_as is not None or where.bubblewrap:
        return MAX_PROCESSES  # bubblewrap's user namespace counts only the sandbox's own tasks
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


def _is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _interpreter() -> tuple[str, list[str]]:
    """The real Python binary (not a venv's link to it) and the folders it needs besides /usr."""
    executable = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    folders = [prefix] if _is_under(executable, prefix) else [prefix, os.path.dirname(executable)]
    return executable, [f for f in folders if not _is_under(f, "/usr")]


def _bwrap_command(where: Isolation, info_fd: int | None, block_fd: int | None) -> list[str]:
    executable, python_folders = _interpreter()
    command = [where.bubblewrap, *BWRAP_NAMESPACES, *BWRAP_LIFETIME]
    if where.run_as is None:  # bubblewrap maps our own uid; it can also forbid user namespaces inside
        command.append("--disable-userns")
    else:  # we write the uid map (see _map_root_and_user) while bubblewrap waits on block_fd
        command += ["--info-fd", str(info_fd), "--userns-block-fd", str(block_fd)]
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            command += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            command += ["--ro-bind", folder, folder]
    for file in SYSTEM_FILES:
        if os.path.exists(file):
            command += ["--ro-bind", file, file]
    for folder in python_folders:
        for parent in reversed(Path(folder).parents[:-1]):  # enterable by `nobody`, unlike /root
            command += ["--perms", "0755", "--dir", str(parent)]
        command += ["--ro-bind", folder, folder]
    command += ["--perms", "0755", "--dir", os.path.dirname(BWRAP_CHILD_SCRIPT)]
    command += ["--ro-bind", str(CHILD_SCRIPT), BWRAP_CHILD_SCRIPT]
    command += ["--dev", "/dev", "--proc", "/proc"]
    command += ["--perms", "1777", "--size", str(BWRAP_TMPFS_BYTES), "--tmpfs", "/tmp"]  # private, like /tmp
    command += ["--chdir", "/tmp", "--", executable, "-I", "-S", "-B", BWRAP_CHILD_SCRIPT]
    return command


def _read_child_pid(info_fd: int, timeout_s: float) -> int:
    data = b""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0 and select.select([info_fd], [], [], left)[0]:
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except ValueError:
            continue
    raise RuntimeError(f"bubblewrap reported no sandbox process: {data[:200]!r}")


def _map_root_and_user(pid: int, run_as: tuple[int, int]) -> None:
    """Map root (for bubblewrap's mounts) and `nobody` to themselves; the child then becomes `nobody`.

    bubblewrap's own map (with --uid) would make the sandbox's user the host's root, whose processes
    no RLIMIT_NPROC limits and whose private files it could read.
    """
    uid, gid = run_as
    Path(f"/proc/{pid}/uid_map").write_text(f"0 0 1\n{uid} {uid} 1\n")
    Path(f"/proc/{pid}/gid_map").write_text(f"0 0 1\n{gid} {gid} 1\n")


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
    it before that first process is reported dead, so `unshare` or `bwrap`, which wait for it, exit last.
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


class _UidMapHandshake:
    """The pipes over which bubblewrap, run as root, names its sandbox's process and waits for its uid map."""

    def __init__(self, run_as: tuple[int, int]):
        self.run_as = run_as
        self.info_read, self.info_write = os.pipe()
        self.block_read, self.block_write = os.pipe()
        self.open_fds = {self.info_read, self.info_write, self.block_read, self.block_write}

    def _close(self, fd: int) -> None:
        if fd in self.open_fds:
            self.open_fds.discard(fd)
            os.close(fd)

    def complete(self) -> None:
        """Once bubblewrap runs: drop our copies of its ends, map the ids, let it go on."""
        self._close(self.info_write)
        self._close(self.block_read)
        _map_root_and_user(_read_child_pid(self.info_read, SETUP_TIMEOUT_S), self.run_as)
        os.write(self.block_write, b"1")

    def close(self) -> None:
        for fd in list(self.open_fds):
            self._close(fd)


def _command(where: Isolation, handshake: _UidMapHandshake | None) -> list[str]:
    if where.bubblewrap:
        fds = (handshake.info_write, handshake.block_read) if handshake else (None, None)
        return _bwrap_command(where, *fds)
    command = [sys.executable, "-I", "-S", "-B", str(CHILD_SCRIPT)]
    return [*NAMESPACE_PREFIX, *command] if where.namespaces else command


def _spec(
    where: Isolation, job: dict, workdir: str, report_fd: int, timeout_s: float, memory_mb: int
) -> dict:
    return {
        **job,
        "workdir": workdir,
        "uid": where.run_as[0] if where.run_as else None,
        "gid": where.run_as[1] if where.run_as else None,
        "pin_stdlib": where.run_as is not None and not where.bubblewrap,
        "report_fd": report_fd,
        "memory_bytes": memory_mb * 2**20,
        "cpu_seconds": math.ceil(timeout_s) + 1,
        "file_bytes": MAX_FILE_BYTES,
        "max_open_files": MAX_OPEN_FILES,
        "max_processes": _process_limit(where),
    }


def _start_and_wait(
    where: Isolation, spec: dict, stdout, stderr, cwd: str | None, timeout_s: float
) -> int | None:
    """The child's exit status, None when it timed out; every process it started is gone on return."""
    handshake = _UidMapHandshake(where.run_as) if where.bubblewrap and where.run_as else None
    try:
        pass_fds = [spec["report_fd"], *([handshake.info_write, handshake.block_read] if handshake else [])]
        try:
            process = subprocess.Popen(
                _command(where, handshake),
                stdin=subprocess.PIPE,
                stdout=stdout,
                stderr=stderr,
                cwd=cwd,
                env=_scrubbed_environment(spec["workdir"]),
                pass_fds=pass_fds,
                start_new_session=True,
            )
        except OSError as e:
            stderr.write(f"could not start the sandbox: {e}\n".encode())
            return CHILD_EXIT_SETUP_FAILED
        with process:
            try:
                if handshake:
                    handshake.complete()
                process.communicate(json.dumps(spec).encode(), timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return None
            except (OSError, RuntimeError) as e:
                stderr.write(f"\nsandbox set-up failed: {e}\n".encode())
                return CHILD_EXIT_SETUP_FAILED
            finally:
                _stop(process, where.namespaces)  # also whatever the program left running
        return process.returncode
    finally:
        if handshake:
            handshake.close()


def _run_child(where: Isolation, job: dict, timeout_s: float, memory_mb: int) -> ChildRun:
    """Run `job` (code, setup, probes) in the child under `where`; its report and how it ended."""
    start = time.monotonic()
    host_workdir = None
    if not where.bubblewrap:  # bubblewrap's child makes its own in the sandbox's /tmp
        host_workdir = tempfile.mkdtemp(prefix="adaspec-sandbox-", dir=_workdir_parent(where.run_as))
        if where.run_as is not None:
            os.chown(host_workdir, *where.run_as)
    try:
        with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
            with tempfile.TemporaryFile() as report:
                workdir = host_workdir or BWRAP_WORKDIR
                spec = _spec(where, job, workdir, report.fileno(), timeout_s, memory_mb)
                returncode = _start_and_wait(where, spec, stdout, stderr, host_workdir, timeout_s)
                report.seek(0)
                return ChildRun(
                    returncode, report.read(MAX_FILE_BYTES + 1), _tail(stderr), time.monotonic() - start
                )
    finally:
        if host_workdir is not None:
            shutil.rmtree(host_workdir, ignore_errors=True)


def _status(returncode: int | None) -> str:
    if returncode is None:
        return "timeout"
    if returncode == 0:
        return "passed"  # so far: the report still has to hold the right values
    if returncode == CHILD_EXIT_CODE_RAISED:
        return "failed"
    if returncode == CHILD_EXIT_SETUP_FAILED:
        return "error"
    return "killed"  # by a signal (memory, CPU limit) or an odd exit status of its own


def run_program(
    code: str,
    test_code: str,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    program_names: frozenset[str] = frozenset(),
) -> SandboxResult:
    """Run `code` in the sandbox and judge `test_code`'s asserts here; passed only if every one holds.

    `program_names`: names the task asks the program to define, when they shadow a builtin the judge
    would otherwise evaluate itself (see `checked_asserts.plan_tests`).
    """
    try:
        plan = plan_tests(test_code, program_names)
    except SyntaxError as e:
        return SandboxResult(False, "error", f"the tests do not parse: {e}", 0.0)
    if not plan.probes:
        return SandboxResult(False, "error", "the tests assert nothing about the program", 0.0)
    job = {"code": code, "setup": plan.setup, "probes": plan.probes}
    run = _run_child(isolation(), job, timeout_s, memory_mb)
    status = _status(run.returncode)
    if status != "passed":
        return SandboxResult(False, status, run.stderr_tail, run.duration_s)
    if not run.report:  # exit status 0 before the probes were evaluated: os._exit(0), say
        return SandboxResult(False, "exited_early", run.stderr_tail, run.duration_s)
    try:
        failure = first_failed_check(plan, decode_report(run.report, len(plan.probes)))
    except NotPlainData as e:
        failure = f"the sandbox's report was refused: {e}"
    if failure is not None:
        return SandboxResult(False, "failed", f"{run.stderr_tail}\n{failure}", run.duration_s)
    return SandboxResult(True, "passed", run.stderr_tail, run.duration_s)
