"""The suite's own order (tests/conftest.py): the slowest modules are collected first."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, SLOWEST_MODULES


def test_every_slowest_module_exists():
    missing = [m for m in SLOWEST_MODULES if not (REPO / m).is_file()]
    assert not missing, f"tests/conftest.py SLOWEST_MODULES names modules that are gone: {missing}"


def test_the_slowest_modules_are_collected_first_and_the_rest_keep_their_order():
    first, later = SLOWEST_MODULES[1], "tests/test_arith.py"
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "no:xdist", later, first], cwd=REPO, capture_output=True, text=True, check=True).stdout
    modules = list(dict.fromkeys(line.split("::")[0] for line in out.splitlines() if "::" in line))
    assert modules == [first, later]  # given in the other order on the command line
