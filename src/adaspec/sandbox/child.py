"""The process side of `adaspec.sandbox.isolation`: run as a script, never imported.

Started as `python -I -S -B child.py` with a JSON spec on stdin. In order, it:
  1. reads the spec, keeps only stdin/stdout/stderr and the report descriptor open, and compiles the
     program, the test setup and the probes (expressions whose values the judge needs),
  2. sets resource limits (memory, CPU, file size, open files, processes),
  3. when asked, keeps the standard library importable after the privilege drop (`keep_stdlib_importable`),
  4. moves into the working directory and, when started as root, becomes the unprivileged user,
  5. replaces the Python ways to fork, exec, signal, open sockets or write outside the directory,
  6. runs the program, then the setup, then evaluates each probe and encodes its value as plain data,
  7. only if all that finished, writes the values as one JSON list to the report descriptor, exits 0.

It decides nothing: the parent compares the values with the expected ones, which it never sends here.
The report is no secret either; a program that writes one itself must compute the right values to pass.
Exit status 1: the code raised (or a value is not plain data); 3: the sandbox itself could not be set up.
Uses the standard library only: -S leaves site-packages out.
"""

import ast
import builtins
import collections
import importlib
import io
import json
import os
import resource
import sys
import traceback

EXIT_CODE_RAISED = 1
EXIT_SETUP_FAILED = 3
# Modules whose import has visible effects; never imported on the code's behalf while still privileged.
NEVER_PREIMPORT = frozenset({"antigravity", "this", "webbrowser", "__hello__", "__phello__"})
REFUSED_OS_FUNCTIONS = (
    "fork", "forkpty", "vfork", "system", "popen", "posix_spawn", "posix_spawnp",
    "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
    "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
    "kill", "killpg", "setsid", "setpgid", "setpgrp", "setuid", "seteuid", "setreuid", "setresuid",
    "setgid", "setegid", "setregid", "setresgid", "setgroups", "chroot", "unshare", "setns",
)  # fmt: skip
WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
# Exact types only: a subclass could redefine __eq__. Counter and defaultdict are MBPP answers (tasks 40, 653).
DICT_TYPES = (dict, collections.Counter, collections.defaultdict, collections.OrderedDict)
SEQUENCE_TAGS = {tuple: "tuple", set: "set", frozenset: "frozenset"}


class NotPlainData(TypeError):
    pass


def encode_plain(value):
    """`value` as JSON-ready data that says what it was; anything but plain data raises NotPlainData.

    The parent's `checked_asserts.decode_plain` reads it back: lists and JSON scalars as themselves,
    every other type as a one-key object naming it ({"tuple": [...]}, {"dict": [[k, v], ...]}, ...).
    """
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [encode_plain(item) for item in value]
    if kind in SEQUENCE_TAGS:
        return {SEQUENCE_TAGS[kind]: [encode_plain(item) for item in value]}
    if kind in DICT_TYPES:
        return {"dict": [[encode_plain(key), encode_plain(item)] for key, item in dict.items(value)]}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    if kind is bytes:
        return {"bytes": value.hex()}
    raise NotPlainData(
        f"a value of type {kind.__qualname__} is not plain data (None, bool, int, float, "
        "complex, str, bytes, list, tuple, set, frozenset or dict)"
    )


def set_limits(spec: dict) -> None:
    limits = {
        resource.RLIMIT_AS: spec["memory_bytes"],
        resource.RLIMIT_CPU: spec["cpu_seconds"],
        resource.RLIMIT_FSIZE: spec["file_bytes"],
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: spec["max_open_files"],
        resource.RLIMIT_NPROC: spec["max_processes"],
    }
    for kind, value in limits.items():
        # The hard CPU limit is one second above the soft one: SIGXCPU first, then SIGKILL.
        hard = value + 1 if kind == resource.RLIMIT_CPU else value
        resource.setrlimit(kind, (value, hard))


def imported_module_names(*trees: ast.AST) -> set[str]:
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def preimport(names: set[str]) -> None:
    """Import what the code names while the interpreter's files are still readable; missing ones are skipped."""
    for name in sorted(names):
        if name.split(".")[0] in NEVER_PREIMPORT:
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # `from m import function` names no module; anything goes
            pass


def keep_stdlib_importable() -> None:
    """Reach the standard library through open directory descriptors instead of its paths.

    The interpreter may live under a directory that only root can enter (e.g. /root/.pyenv). After the
    privilege drop, /proc/self/fd/N still leads into a directory opened before it, so lazy imports inside
    the standard library (Counter.most_common imports heapq, strptime imports _strptime) keep working.
    /proc/self/fd needs the process to stay "dumpable", which a uid change resets: see `drop_privileges`.
    """
    replacements: dict[str, str] = {}
    for entry in sys.path:
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        replacements[entry] = f"/proc/self/fd/{fd}"

    def moved(path: str) -> str:
        for old, new in replacements.items():
            if path == old or path.startswith(old + os.sep):
                return new + path[len(old) :]
        return path

    sys.path[:] = [moved(entry) for entry in sys.path]
    for module in list(sys.modules.values()):
        package_path = getattr(module, "__path__", None)
        if isinstance(package_path, list):
            package_path[:] = [moved(entry) for entry in package_path]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()


def drop_privileges(uid: int, gid: int) -> None:
    import ctypes  # loaded while privileged; refused to the code afterwards

    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)  # as root this sets the real, effective and saved uid: there is no way back
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError(f"could not become uid {uid}")
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no set-uid program can give privileges back
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # then only the modules imported before the drop are available


def refuse(what: str):
    def refused(*args, **kwargs):
        raise PermissionError(f"sandbox: {what} is not allowed")

    return refused


def inside_workdir_check(workdir: str):
    root = os.path.realpath(workdir)
    always_allowed = {os.devnull}

    def is_inside(path, dir_fd=None) -> bool:
        if isinstance(path, int):  # an already open descriptor
            return True
        path = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(path):
            try:
                path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
            except OSError:
                return False
        resolved = os.path.realpath(path)
        return resolved == root or resolved.startswith(root + os.sep) or resolved in always_allowed

    return is_inside


def guard_writes(workdir: str) -> None:
    """Refuse the usual Python ways of writing outside `workdir` (a guard against accidents, not attacks)."""
    is_inside = inside_workdir_check(workdir)

    def denied(path) -> PermissionError:
        return PermissionError(f"sandbox: writing outside the working directory is not allowed: {path!r}")

    real_open = builtins.open

    def guarded_open(file, mode="r", *args, **kwargs):
        if any(flag in mode for flag in "wax+") and not is_inside(file):
            raise denied(file)
        return real_open(file, mode, *args, **kwargs)

    real_os_open = os.open

    def guarded_os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & WRITING_FLAGS and not is_inside(path, dir_fd):
            raise denied(path)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    class GuardedFileIO(io.FileIO):
        def __init__(self, file, mode="r", *args, **kwargs):
            if any(flag in mode for flag in "wax+") and not is_inside(file):
                raise denied(file)
            super().__init__(file, mode, *args, **kwargs)

    def guard_paths(function, n_paths: int = 1):
        def guarded(*args, **kwargs):
            dir_fd = kwargs.get("dir_fd", kwargs.get("src_dir_fd"))
            for path in args[:n_paths]:
                if not is_inside(path, dir_fd):
                    raise denied(path)
            return function(*args, **kwargs)

        return guarded

    builtins.open = io.open = guarded_open
    io.FileIO = GuardedFileIO
    os.open = guarded_os_open
    for name in ("remove", "unlink", "rmdir", "mkdir", "mkfifo", "mknod", "chmod", "chown", "lchown",
                 "truncate", "utime", "removedirs"):  # fmt: skip
        if hasattr(os, name):
            setattr(os, name, guard_paths(getattr(os, name)))
    for name in ("rename", "replace", "link", "symlink"):
        setattr(os, name, guard_paths(getattr(os, name), n_paths=2))


def guard_processes_and_network() -> None:
    # imported only in the sandboxed child, right before their functions are replaced
    import _posixsubprocess
    import _socket
    import posix
    import socket
    import subprocess

    for module in (os, posix):
        for name in REFUSED_OS_FUNCTIONS:
            if hasattr(module, name):
                setattr(module, name, refuse(f"os.{name}"))
    _posixsubprocess.fork_exec = refuse("starting a process")
    subprocess.Popen = refuse("subprocess.Popen")
    for module in (socket, _socket):
        for name in ("socket", "socketpair", "fromfd", "create_connection", "create_server", "SocketType"):
            if hasattr(module, name):
                setattr(module, name, refuse(f"network access (socket.{name})"))
    for name in ("ctypes", "_ctypes"):  # a C call would go around every guard above
        sys.modules[name] = None


def prepare_workdir(spec: dict) -> None:
    """Enter the working directory, made here under bubblewrap (a fresh /tmp) and given to the user."""
    os.makedirs(spec["workdir"], exist_ok=True)
    if spec["uid"] is not None:
        os.chown(spec["workdir"], spec["uid"], spec["gid"])
    os.chdir(spec["workdir"])


def run(spec: dict) -> int:
    # The code under test may replace these module attributes: keep the originals.
    write, exit_now, dumps = os.write, os._exit, json.dumps
    report_fd = spec["report_fd"]
    try:
        solution_tree = ast.parse(spec["code"], "solution.py")
        setup_tree = ast.parse(spec["setup"], "tests.py")
        probe_trees = [ast.parse(probe, "tests.py", mode="eval") for probe in spec["probes"]]
        solution = compile(solution_tree, "solution.py", "exec")
        setup = compile(setup_tree, "tests.py", "exec")
        probes = [compile(tree, "tests.py", "eval") for tree in probe_trees]
    except (SyntaxError, ValueError):
        traceback.print_exc()
        return EXIT_CODE_RAISED
    try:
        set_limits(spec)
        preimport(imported_module_names(solution_tree, setup_tree, *probe_trees))
        if spec["pin_stdlib"]:
            keep_stdlib_importable()
        prepare_workdir(spec)
        if spec["uid"] is not None:
            drop_privileges(spec["uid"], spec["gid"])
        guard_writes(spec["workdir"])
        guard_processes_and_network()
    except BaseException:
        traceback.print_exc()
        return EXIT_SETUP_FAILED
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(solution, namespace)
        exec(setup, namespace)
        # Each value is encoded as soon as it is computed, as an assert would have compared it then.
        report = dumps([encode_plain(eval(probe, namespace)) for probe in probes]).encode()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # SystemExit too: exiting before the probes ran is no pass
        traceback.print_exc()
        return EXIT_CODE_RAISED
    while report:
        report = report[write(report_fd, report) :]
    exit_now(0)


def keep_only_standard_streams_and(report_fd: int) -> None:
    """Close every other inherited descriptor (bubblewrap's own, say) before any code runs."""
    os.closerange(3, report_fd)
    os.closerange(report_fd + 1, os.sysconf("SC_OPEN_MAX"))


def main() -> None:
    spec = json.loads(sys.stdin.buffer.read())
    keep_only_standard_streams_and(spec["report_fd"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    status = run(spec)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)


if __name__ == "__main__":
    main()
