"""One error type. Every error a user can cause or meet is a HarnessError: its message says what
is wrong and where (`file:line: field: message` when a file is concerned), and it carries the exit
code the command gives it. Modules raise; only the CLI prints and exits, in one handler
(harness/cli/__init__.py). Exit codes: 2 bad input (BadInput), 3 infrastructure (Infrastructure);
0 and 1 are verdicts, never errors."""
from __future__ import annotations


class HarnessError(Exception):
    exit_code = 2


class BadInput(HarnessError):
    """Input the user can fix: a file, a name, a value, a run folder (exit 2)."""

    exit_code = 2


class Infrastructure(HarnessError):
    """What the user's input did not cause: an endpoint down, a spend cap reached (exit 3)."""

    exit_code = 3
