"""What a replay shows while it works: one display for the one-process replay (harness.run.replay)
and for a run over worker processes (harness.run.parallel, whose workers send their counts to it
through harness.run.shard_worker.Reporter).

Modes (`harness run` picks one; docs/scaling.md):
- "bar", on a terminal: a rich bar on stderr with turns done/total, the rate, the ETA, the failed
  turns so far and the time elapsed, from the replay's first turn;
- "lines", off a terminal (CI logs): a line on stderr every LINE_EVERY seconds, whether a turn
  finished meanwhile or not, and when 25, 50, 75 and 100 % of the turns are done, with the same
  figures (`replay: 1200 of 3549 turns (34%), 37.5 turns/s, ETA 1 min 03 s, 0 failed, 32 s`);
- "off" (`--quiet`, the workers themselves, library use): nothing.
Steps (building the index, the run folder) are one line each on stderr in "bar" and "lines"."""
from __future__ import annotations

import sys
import threading
import time

MODES = ("bar", "lines", "off")
LINE_EVERY = 10.0  # seconds between progress lines off a terminal
MARKS = (25, 50, 75, 100)  # a line when this share of the turns (in %) is done, off a terminal
TICK = 0.5  # how often the line thread looks at the clock (seconds)


def duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def pace(done: int, total: int | None, seconds: float) -> str:
    """`37.5 turns/s, ETA 1 min 03 s` from the turns done so far in `seconds`; the ETA is unknown
    until a turn is done (or while the total is)."""
    rate = done / seconds if seconds > 0 else 0.0
    said = f"{rate:.2f}" if 0 < rate < 1 else f"{rate:.1f}"
    if not done or total is None:
        return f"{said} turns/s, ETA unknown"
    return f"{said} turns/s, ETA {duration(max(0, total - done) / rate)}"


class Display:
    """The progress of one replay. `total(n, part)` says how many turns a part plans (the
    one-process replay is part 0; a run over workers has one part a worker, announced as each
    starts); `advance(k, failed)` counts turns done and failed; a context manager around the
    replay (or `start` and `close`)."""

    def __init__(self, mode: str = "off", workers: int = 1, stream=None, clock=time.monotonic):
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}: one of {', '.join(MODES)}")
        self.mode, self.workers, self.clock = mode, workers, clock
        self.stream = stream
        self.totals: dict[int, int] = {}
        self.done = self.failed = 0
        self.t0 = self.last = None
        self.t_turns = None  # when every part had said its total: the rate and ETA count from here
        self.said_at: int | None = None  # the `done` of the last line printed
        self.marks = set()
        self.bar = self.task = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = None

    # what the replay calls
    def step(self, text: str) -> None:
        """One line saying what the run does now (nothing when off)."""
        if self.mode != "off":
            self._print(text)

    def total(self, n: int, part: int = 0) -> None:
        self.totals[part] = n
        if self.t0 is not None and self.t_turns is None and self.planned is not None:
            self.t_turns = self.clock()
        if self.bar is not None:
            self.bar.update(self.task, total=self.planned, description=self._what())

    def advance(self, k: int = 1, failed: int = 0) -> None:
        with self.lock:
            self.done += k
            self.failed += failed
            if self.bar is not None:
                self.bar.update(self.task, completed=self.done, failed=self.failed)
            elif self.mode == "lines" and self.t0 is not None and self._crossed():
                self._line()

    def start(self) -> "Display":
        if self.t0 is not None:
            return self
        self.t0 = self.last = self.clock()
        if self.planned is not None:
            self.t_turns = self.t0
        if self.mode == "bar":
            self._start_bar()
        elif self.mode == "lines":
            self.thread = threading.Thread(target=self._tick_until_closed, name="harness-progress", daemon=True)
            self.thread.start()
        return self

    def close(self) -> None:
        """Stop the display; off a terminal, the last line unless it said these counts already."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        elif self.mode == "lines" and self.t0 is not None:
            with self.lock:
                if self.said_at != self.done:
                    self._line()

    def __enter__(self) -> "Display":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # what it shows
    @property
    def planned(self) -> int | None:
        """Turns planned: None until every part has said its total."""
        return sum(self.totals.values()) if len(self.totals) >= self.workers else None

    def line(self) -> str:
        """`replay: D of T turns (P%)[, N workers], R turns/s, ETA E, F failed, S` (one line)."""
        total, now = self.planned, self.clock()
        elapsed = now - (self.t0 if self.t0 is not None else now)
        if total is None and not self.done:
            return f"replay: {len(self.totals)} of {self.workers} workers started, {duration(elapsed)}"
        if total is None:
            of = f"{sum(self.totals.values())}+ turns ({len(self.totals)} of {self.workers} workers started)"
        else:
            of = f"{total} turns ({100 * self.done // total if total else 100}%)"
        workers = f", {self.workers} workers" if self.workers > 1 else ""
        return (f"replay: {self.done} of {of}{workers}, {self.pace()}, {self.failed} failed, {duration(elapsed)}")

    def pace(self) -> str:
        """The rate and ETA, counted from the moment every part had said its total (the workers'
        start, eval set and index are not turns)."""
        since = self.t_turns if self.t_turns is not None else self.clock()
        return pace(self.done, self.planned, self.clock() - since)

    def _what(self) -> str:
        if self.workers == 1:
            return "replay"
        started = "" if len(self.totals) >= self.workers else f", {len(self.totals)} started"
        return f"replay ({self.workers} workers{started})"

    def _crossed(self) -> bool:
        """Whether `done` reached a mark (25/50/75/100 %) not yet said."""
        total = self.planned
        if not total:
            return False
        new = {m for m in MARKS if self.done * 100 >= m * total} - self.marks
        self.marks |= new
        return bool(new)

    def _line(self) -> None:
        self.said_at, self.last = self.done, self.clock()
        self._print(self.line())

    def _tick_until_closed(self) -> None:
        while not self.stop.wait(TICK):
            with self.lock:
                if self.clock() - self.last >= LINE_EVERY:
                    self._line()

    def _print(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, highlight=False, markup=False, soft_wrap=True)
        else:
            print(text, file=self.stream or sys.stderr, flush=True)

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TimeElapsedColumn
        from rich.table import Column
        from rich.text import Text

        display = self

        class Pace(ProgressColumn):
            """Rate, ETA and failed turns, computed when drawn (the ETA moves while no turn ends)."""

            def render(self, task) -> Text:
                return Text(f"{display.pace()}, {display.failed} failed", style="progress.data.speed")

        # the bar takes what the figures leave of the line (a fixed bar wrapped them at 80 columns)
        self.bar = Progress("[progress.description]{task.description}", BarColumn(bar_width=None, table_column=Column(ratio=1)),
                            MofNCompleteColumn(), Pace(table_column=Column(no_wrap=True)), TimeElapsedColumn(), console=Console(stderr=True, file=self.stream), expand=True)
        self.bar.start()
        self.task = self.bar.add_task(self._what(), total=self.planned, completed=self.done, failed=self.failed)
