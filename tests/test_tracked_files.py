"""Nothing the repository tracks is a symbolic link: a worktree's `.venv` and `models` links, once committed,
replaced the main checkout's environment and models when the branch was merged (git swaps an ignored folder for
a tracked link without asking)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO

LINK_MODE = "120000"


def tracked_links(staged: str) -> list[str]:
    """The paths of `git ls-files --stage` output whose mode is a symbolic link's."""
    return [line.split("\t", 1)[1] for line in staged.splitlines() if line.split(" ", 1)[0] == LINK_MODE]


def test_no_tracked_file_is_a_symbolic_link():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")
    staged = subprocess.run(["git", "ls-files", "--stage"], cwd=REPO, capture_output=True, text=True, check=True)
    assert tracked_links(staged.stdout) == []


def test_the_check_sees_a_tracked_link():
    staged = ("100644 1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c 0\tMakefile\n"
              "120000 0a1b2c3d4e5f60718293a4b5c6d7e8f901234567 0\t.venv\n")
    assert tracked_links(staged) == [".venv"]
