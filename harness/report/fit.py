"""Terminal output that fits the console it is printed on (COLUMNS, else the terminal's width,
else 120 columns; harness.report.terminal.console): text wrapped at word boundaries with no
trailing spaces and at most so many lines, titles above tables rather than padded inside them,
and tables that leave out their least needed columns rather than break a metric, a segment or a
confidence interval across lines. Rendering only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

MORE = " …"  # ends a text cut at its last line


def wrap(text: str | Text, width: int, max_lines: int | None = None, more: str = MORE) -> list[Text]:
    """`text` (rich markup, or Text) in lines of at most `width` cells, broken between words,
    without trailing spaces; past `max_lines`, the last line cut and ended with `more`."""
    t = Text.from_markup(text) if isinstance(text, str) else text
    lines = [line for line in t.wrap(Console(width=max(width, 10)), max(width, 10))]
    for line in lines:
        line.rstrip()
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines]
        last = lines[-1]
        last.truncate(max(1, width - len(more)))
        cut = last.plain.rfind(" ")
        if cut > len(last.plain) // 2:  # between words
            last = lines[-1] = last[:cut]
        last.rstrip()
        last.append(more)
    return lines


class Wrapped:
    """Text printed in lines no wider than the console (or `width`), no trailing spaces, at most
    `max_lines` lines."""

    def __init__(self, text: str | Text, max_lines: int | None = None, width: int | None = None, more: str = MORE):
        self.text, self.max_lines, self.width, self.more = text, max_lines, width, more

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = min(self.width or options.max_width, options.max_width)
        for line in wrap(self.text, width, self.max_lines, self.more):
            yield from line.render(console)
            yield Segment.line()


@dataclass
class Col:
    """A column of a table that fits: `drop` > 0 when it may be left out of a narrow console (the
    lowest first); `wrap` for the one column allowed to break between words (the arm's label)."""

    name: str
    right: bool = False
    drop: int = 0
    wrap: bool = False


class Fitted:
    """A title and a table built for the console's width: the columns `build(cols)` is given are
    all of `cols` when the table fits, else without the droppable ones (lowest `drop` first)
    until it fits; the columns left out are named under the title."""

    def __init__(self, title: str, cols: list[Col], build: Callable[[list[Col]], Table]):
        self.title, self.cols, self.build = title, cols, build

    def columns(self, console: Console, width: int) -> list[Col]:
        cols = list(self.cols)
        for c in sorted((c for c in self.cols if c.drop), key=lambda c: c.drop):
            if _natural_width(console, self.build(cols)) <= width:
                break
            cols.remove(c)
        return cols

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """The table's measure as printed (the title wraps to it)."""
        return Measurement.get(console, options, self.build(self.columns(console, options.max_width)))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        cols = self.columns(console, width)
        left = [c.name for c in self.cols if c not in cols]
        title = self.title + (f" (left out at {width} columns: {', '.join(left)})" if left else "")
        yield Wrapped(title)
        yield self.build(cols)


def _natural_width(console: Console, table: Table) -> int:
    """The width a table takes when nothing has to wrap."""
    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def table(cols: list[Col]) -> Table:
    """An empty table of `cols`: only a `wrap` column breaks between words; the others never wrap
    (nor are cut while the table fits)."""
    t = Table(pad_edge=False)
    for c in cols:
        t.add_column(c.name, justify="right" if c.right else "left", no_wrap=not c.wrap,
                     overflow="fold" if c.wrap else "ellipsis")
    return t
