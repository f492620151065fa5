"""One error type and the exit codes. Every error a user can cause or meet is a HarnessError: its
message says what is wrong and where (`file:line: field: message` when a file is concerned), and it
carries the exit code the command gives it. Modules raise; only the CLI prints and exits, in one
handler (harness/cli/__init__.py). `Exit` is the one home of the exit codes: the CLI, the gate,
scripts/ and the Makefile's `make gate` line (tests/house/test_constants.py checks its words) use it."""
from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """Exit codes everywhere: 0 and 1 are verdicts, 2 and 3 errors."""

    PASS = 0
    REGRESSION = 1  # a failed check: a regression, or insufficient data to judge it
    BAD_INPUT = 2
    INFRASTRUCTURE = 3

    @property
    def meaning(self) -> str:
        """The code in the words every command's last line uses."""
        return {Exit.PASS: "pass", Exit.REGRESSION: "regression or insufficient data", Exit.BAD_INPUT: "bad input",
                Exit.INFRASTRUCTURE: "infrastructure"}[self]

    @classmethod
    def said(cls, code: int) -> str:
        """The meaning of any exit code: an unknown one (a crash, a signal) is `exit N`."""
        try:
            return cls(code).meaning
        except ValueError:
            return f"exit {code}"


class HarnessError(Exception):
    exit_code = Exit.BAD_INPUT


class BadInput(HarnessError):
    """Input the user can fix: a file, a name, a value, a run folder (exit 2)."""

    exit_code = Exit.BAD_INPUT


class Infrastructure(HarnessError):
    """What the user's input did not cause: an endpoint down, a spend cap reached (exit 3)."""

    exit_code = Exit.INFRASTRUCTURE
