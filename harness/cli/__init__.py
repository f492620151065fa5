"""The `harness` command. Thin: parse, call, print; one module per stage (evalsets, run, authoring,
analysis). Modules raise harness.errors.HarnessError (bad input, infrastructure); one handler here,
around every command, prints its message and exits with its code (2, 3), never a traceback."""
from __future__ import annotations

import functools

import typer

from harness import env as _env  # noqa: F401  (sets offline-safe environment variables first)
from harness.errors import Exit, HarnessError


class _App(typer.Typer):
    """A Typer whose every command runs inside the one error handler (`handled`)."""

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)
        return lambda f: register(handled(f))


def handled(f):
    """The command `f` with its errors turned into one clean message and their exit code."""
    @functools.wraps(f)
    def run(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except HarnessError as e:
            fail(str(e), e.exit_code)
    return run


app = _App(add_completion=False, no_args_is_help=True, help="Offline evaluation harness for retrieval with query rewriting.")
eval_set_app = _App(no_args_is_help=True, help="Work with eval sets.")
class _ImportGroup(typer.core.TyperGroup):
    """The `import` group, whose eval-set importers (harness/importers, one file each) become commands
    when its commands are first read (harness.cli.evalsets.importers): importing every importer
    (and the replay and arms they import) cost every other command a quarter of a second."""

    _loaded = False

    @property
    def commands(self) -> dict:
        if not self._loaded:
            from harness.cli.evalsets import importers

            self._loaded = True
            self._commands.update(typer.main.get_group(importers()).commands)
        return self._commands

    @commands.setter
    def commands(self, value: dict) -> None:
        self._commands = value


import_app = _App(cls=_ImportGroup, no_args_is_help=True, help="Import public data or external runs as eval sets.")
app.add_typer(eval_set_app, name="eval-set")
app.add_typer(import_app, name="import")
list_app = _App(no_args_is_help=True, help="List what the harness knows: metrics, arms.")
app.add_typer(list_app, name="list")
export_app = _App(no_args_is_help=True, help="Export a run's arm or an eval set's labels for other tools (TREC).")
app.add_typer(export_app, name="export")
class _Console:
    """A rich console made when it prints, so its width follows COLUMNS at that moment (else the
    terminal's, else 120 columns)."""

    def __init__(self, stderr: bool = False):
        self.stderr = stderr

    def __getattr__(self, name):
        from harness.report.terminal import console as make

        return getattr(make(self.stderr), name)


console = _Console()
err = _Console(stderr=True)


def say(text: str, markup: bool = False, stderr: bool = False) -> None:
    """A message wrapped within the console, between words, without trailing spaces
    (harness.report.fit); `markup`: the text holds rich markup."""
    from rich.text import Text

    from harness.report.fit import Wrapped

    (err if stderr else console).print(Wrapped(text if markup else Text(text)))


def fail(msg: str, code: int = Exit.BAD_INPUT):
    from rich.markup import escape

    err.print(f"[red]error:[/red] {escape(msg)}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)


from harness.cli import evalsets, run, authoring, analysis  # noqa: E402,F401  (register the commands)


def main():
    """The `harness` command. An exception no command turned into a message is a bug of the harness:
    it exits 3 with one line naming it (never 1, which CI reads as a regression); HARNESS_DEBUG=1
    shows the traceback."""
    import os
    import sys
    import traceback

    try:
        app()
    except Exception as e:  # noqa: BLE001  (the last resort: every known error is a message already)
        if os.environ.get("HARNESS_DEBUG"):
            traceback.print_exc()
        frame = traceback.extract_tb(e.__traceback__)[-1]
        print(f"internal error (exit 3): {type(e).__name__}: {e} (at {frame.filename}:{frame.lineno}); this is a bug "
              "of the harness, not a verdict: HARNESS_DEBUG=1 shows the traceback", file=sys.stderr)
        sys.exit(Exit.INFRASTRUCTURE)
