"""Issue 48 (2): the suite tests this checkout, installed or not. Subprocesses get its src/ in PYTHONPATH
(tests/conftest.py), so nothing depends on an editable install: `python -S` (no site-packages, hence no
installed or editable copy) still imports the checkout's package from that environment."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

WHERE = "import adaspec; print(adaspec.__file__)"


def imported_from(pythonpath: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-S", "-c", WHERE], cwd="/", capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": pythonpath})


def test_subprocesses_import_the_checkout_without_any_install():
    result = imported_from(os.environ["PYTHONPATH"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(REPO / "src" / "adaspec" / "__init__.py")


def test_the_repository_root_alone_as_the_tests_once_set_it_is_not_enough():
    assert imported_from(str(REPO)).returncode != 0
