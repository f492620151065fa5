"""Progress everywhere (issue 30, item 1): `harness run` with its output redirected, as in CI, says
what it does while it works (the index, the run folder before the first turn, a line every
LINE_EVERY seconds and at 25/50/75/100 % with turns done/total, rate, ETA and failed turns, then
scoring); on a terminal a bar with rate and ETA; `--quiet` shows neither. One display serves the
one-process replay and `--workers N` (harness/run/progress.py)."""
from __future__ import annotations

import io
import re
import time

import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.run import progress
from harness.run.progress import Display, duration, pace
from harness.testing import TestServer
from tests.conftest import TINY_DOCS, TINY_SESSIONS, write_set
from tests.reliability_helpers import endpoint, model_reply

LINE = re.compile(r"^replay: (\d+) of (\d+) turns \((\d+)%\), [\d.]+ turns/s, ETA [^,]+, (\d+) failed, .+ s$")


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_lines_come_at_each_quarter_and_every_line_every_seconds_even_while_no_turn_ends(monkeypatch):
    monkeypatch.setattr(progress, "TICK", 0.01)
    out, clock = io.StringIO(), Clock()
    d = Display("lines", stream=out, clock=clock)
    d.total(8)
    with d:
        clock.t += 1
        d.advance(1)
        assert out.getvalue() == ""  # 12 %: no mark, and LINE_EVERY has not passed
        d.advance(1, failed=1)  # 25 %
        clock.t += progress.LINE_EVERY + 1  # no turn ends for longer than LINE_EVERY: a line all the same
        for _ in range(200):
            if out.getvalue().count("\n") == 2:
                break
            time.sleep(0.01)
        d.advance(2)  # 50 %
        d.advance(4)  # 75 % and 100 % at once: one line
    lines = out.getvalue().splitlines()
    assert [LINE.match(x).group(1, 3, 4) for x in lines] == [("2", "25", "1"), ("2", "25", "1"), ("4", "50", "1"),
                                                            ("8", "100", "1")], lines
    assert "ETA unknown" not in lines[0] and "turns/s" in lines[0]


def test_the_last_line_is_said_once_and_an_unfinished_replay_says_where_it_stopped():
    out = io.StringIO()
    with Display("lines", stream=out) as d:
        d.total(3)
        d.advance(3)
    assert out.getvalue().count("replay: 3 of 3 turns (100%)") == 1 and out.getvalue().count("\n") == 1
    out = io.StringIO()
    with Display("lines", stream=out) as d:
        d.total(3)
        d.advance(1)
    assert out.getvalue().splitlines()[-1].startswith("replay: 1 of 3 turns (33%)")
    out = io.StringIO()
    with Display("off", stream=out) as d:
        d.step("index: x")
        d.total(3)
        d.advance(3)
    assert out.getvalue() == ""


def test_rate_and_eta_in_words():
    assert pace(0, 100, 5.0) == "0.0 turns/s, ETA unknown"
    assert pace(50, 100, 10.0) == "5.0 turns/s, ETA 10 s"
    assert pace(1, 400, 2.0) == "0.50 turns/s, ETA 13 min 18 s"
    assert [duration(s) for s in (0, 59.4, 61, 3600 + 125)] == ["0 s", "59 s", "1 min 01 s", "1 h 02 min"]


def test_the_bar_shows_rate_eta_and_failed_turns():
    out = io.StringIO()
    with Display("bar", stream=out) as d:
        d.total(10)
        d.advance(4, failed=1)
    text = out.getvalue()
    assert "4/10" in text and "turns/s, ETA" in text and "1 failed" in text


def test_workers_count_as_parts_of_one_display():
    out = io.StringIO()
    d = Display("lines", workers=2, stream=out).start()
    d.total(5, part=0)
    assert d.line().startswith("replay: 1 of 2 workers started, ")  # no rate before every worker replays
    d.advance(1)
    assert d.line().startswith("replay: 1 of 5+ turns (1 of 2 workers started), 2 workers, ")
    d.total(7, part=1)
    d.advance(5, failed=2)
    d.close()
    assert out.getvalue().splitlines()[-1].startswith("replay: 6 of 12 turns (50%), 2 workers, ")


@pytest.fixture
def slow_run(tmp_path):
    """A run whose every rewrite waits for a slow scripted endpoint, one request at a time."""
    root = write_set(tmp_path / "tiny", docs=TINY_DOCS,
                     sessions=[{**s, "session_id": f"{s['session_id']}-{k}"} for k in range(3) for s in TINY_SESSIONS])
    with TestServer(latency=0.3) as srv:
        srv.add_rule(model_reply)
        cfg = {"name": "slow", "eval_set": str(root), "runs_dir": str(tmp_path / "runs"), "concurrency": 1,
               "arms": [{"name": "original", "lane": "bm25"}, {"name": "rewrite", "lane": "bm25"}],
               "llm": {"cache": {"folder": str(tmp_path / "llm"), "mode": "off"},
                       "roles": {"rewrite": endpoint(srv, timeout=10.0)}}}
        path = tmp_path / "slow.yaml"
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        yield path


def test_a_redirected_run_says_what_it_does_while_it_works(slow_run, monkeypatch):
    """Off a terminal (CliRunner's streams are no terminal): the run folder before the first turn,
    progress lines while the endpoint is slow, scoring, then the run's own last line."""
    monkeypatch.setattr(progress, "LINE_EVERY", 0.5)
    r = CliRunner().invoke(app, ["run", str(slow_run), "--run-id", "slow"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    folder = next(i for i, x in enumerate(lines) if x.startswith("run folder: "))
    said = [i for i, x in enumerate(lines) if LINE.match(x)]
    assert lines[0].startswith("index: ") and said and folder < said[0], r.output
    assert len(said) >= 4, r.output  # 25/50/75/100 % and, the endpoint being slow, lines in between
    assert any(int(LINE.match(lines[i]).group(3)) not in (25, 50, 75, 100) for i in said), r.output  # by time
    assert LINE.match(lines[said[-1]]).group(1, 2) == ("18", "18")
    scoring = next(i for i, x in enumerate(lines) if x.startswith("scoring: "))
    assert said[-1] < scoring < len(lines) - 2 and "run: 18 turns replayed, no failed turn, " in "".join(lines[-2:])


def test_quiet_shows_no_progress(slow_run):
    r = CliRunner().invoke(app, ["run", str(slow_run), "--run-id", "q", "--quiet", "--no-metrics"])
    assert r.exit_code == 0, r.output
    assert not any(x.startswith(("replay: ", "index: ", "run folder: ")) for x in r.output.splitlines()), r.output
    assert "run: 18 turns replayed" in "".join(r.output.splitlines()[-2:])  # the path may wrap
