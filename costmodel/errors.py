"""One exception type for user mistakes, so the CLI can print one line and exit 2.

Library code raises `UserError` for bad input (a missing file, a malformed profile, an unknown
GPU); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A bad input the user can fix. `str(err)` names the input and the fix, on one line."""

    exit_code = 2

    def __init__(self, what: str, fix: str | None = None):
        self.what = what
        self.fix = fix
        super().__init__(f"{what}; {fix}" if fix else what)


class DiskFull(UserError):
    """A write failed for a full filesystem or quota (ENOSPC, EDQUOT): its own line, naming where
    and how much is free, since no path or permission change fixes it."""
