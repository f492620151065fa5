"""Where the report's plots are drawn. `draw(name, *args)` draws harness.report.plots' `name` here
and returns its base64 PNG; inside `elsewhere()` it hands the drawing to one process of its own
and returns a Pending at once, so the report's other sections are built while the plots are drawn
(matplotlib was over half of `harness report`'s time). A Pending is its PNG where the HTML holds it
(jinja asks for `__html__` when it writes it), and the same bytes as drawing here: the process
draws each plot with the same code, one at a time. This module does not import matplotlib, so a
report whose plots are drawn elsewhere never loads it."""
from __future__ import annotations

from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager

_POOL: ProcessPoolExecutor | None = None  # the plot process while `elsewhere()` is open


class Pending:
    """A plot being drawn in the plot process: its base64 PNG when asked for (`str`, `__html__`)."""

    def __init__(self, future: Future):
        self.future = future

    def __str__(self) -> str:
        return self.future.result()

    def __html__(self) -> str:  # base64 needs no escaping: the text jinja writes for the PNG itself
        return self.future.result()


def _draw(name: str, *args) -> str:
    from harness.report import plots

    return getattr(plots, name)(*args)


def draw(name: str, *args) -> str | Pending:
    """harness.report.plots' `name`(*args): its base64 PNG, or its Pending inside `elsewhere()`."""
    return _draw(name, *args) if _POOL is None else Pending(_POOL.submit(_draw, name, *args))


def _ready() -> None:
    """The plot process's first task, given when it starts: load what drawing needs meanwhile."""
    import harness.report.plots  # noqa: F401


@contextmanager
def elsewhere():
    """Plots drawn while this is open are drawn in one process of its own, which starts loading
    matplotlib at once; on leaving, the drawing left is waited for. The process is forked here, so
    open this before the command reads anything (no thread of pyarrow's is running yet): a fresh
    interpreter (spawn) would run the caller's main module again, which no script of the caller's
    need expect of `harness report`. Where there is no fork, the plots are drawn here."""
    import multiprocessing

    global _POOL
    if "fork" not in multiprocessing.get_all_start_methods():
        yield
        return
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        pool.submit(_ready)  # forks the process now, and loads matplotlib there
        _POOL = pool
        try:
            yield
        finally:
            _POOL = None
