"""The one exception type for mistakes a user can make and fix (config, data, missing artefacts)."""

import sys
from contextlib import contextmanager


class UserError(Exception):
    """A problem the user can fix. Entry points print its message on one line and exit with status 2."""


@contextmanager
def reported_as_one_line():
    """Entry points: print a UserError as `error: <message>` and exit 2 instead of a traceback."""
    try:
        yield
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
