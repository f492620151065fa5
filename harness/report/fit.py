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
    lowest first); `wrap` for a column allowed to break between words (the arm's label, a cell of
    words), never inside one: a name is never split across lines (Fitted)."""

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
        """The columns kept: the droppable ones left out (lowest `drop` first) while the table
        cannot fit `width` even with its wrapping columns broken between words."""
        cols = list(self.cols)
        for c in sorted((c for c in self.cols if c.drop), key=lambda c: c.drop):
            if _natural_width(console, between_words(console, self.build(cols), width, fold=False)) <= width:
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
        yield between_words(console, self.build(cols), width)


def _natural_width(console: Console, table: Table) -> int:
    """The width a table takes when nothing has to wrap."""
    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def between_words(console: Console, t: Table, width: int, fold: bool = True) -> Table:
    """`t` with the widths of its wrapping columns fixed so that it fits `width` while each keeps
    its longest word whole: rich would otherwise narrow them evenly and fold a name
    (`multi_query_r`/`rf`). The widest wrapping column gives way first; the others keep their
    width. A table too wide even so breaks its wrapping columns' words when `fold` (never the
    others' cells)."""
    natural = _natural_width(console, t)
    if natural <= width:
        return t
    wide = console.options.update_width(10_000)
    spans = [[Measurement.get(console, wide, c) for c in (col.header, *col.cells)] for col in t.columns]
    lo = [max(m.minimum for m in col) for col in spans]
    w = [max(m.maximum for m in col) for col in spans]
    excess = natural - width
    wraps = [i for i, col in enumerate(t.columns) if not col.no_wrap]
    while excess > 0:
        give = [i for i in wraps if w[i] > lo[i]] or [i for i in wraps if fold and w[i] > 4]
        if not give:
            break
        i = max(give, key=lambda j: w[j])
        w[i] -= 1
        excess -= 1
    for i in wraps:
        t.columns[i].width = w[i]
    return t


def table(cols: list[Col]) -> Table:
    """An empty table of `cols`: only a `wrap` column breaks between words; the others never wrap
    (nor are cut while the table fits)."""
    t = Table(pad_edge=False)
    for c in cols:
        t.add_column(c.name, justify="right" if c.right else "left", no_wrap=not c.wrap,
                     overflow="fold" if c.wrap else "ellipsis")
    return t
