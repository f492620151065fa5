"""Terminal output that fits the console it is printed on (COLUMNS, else the terminal's width,
else 120 columns; harness.report.terminal.console): text wrapped at word boundaries with no
trailing spaces and at most so many lines. Rendering only."""
from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
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
