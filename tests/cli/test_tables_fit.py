"""Tables for 80 and 120 columns (issue 30, item 4), read as a person reads them: no line wider than
the terminal, no trailing spaces, the run in the title and not in a column, segment names whole on
their line at 120, at 80 a narrower layout whose metric names, segments and CIs are whole (no `…`)
and whose labels break only between words, titles as wide as the terminal allows, notes within
three lines."""
from __future__ import annotations

import re
import shutil

import pytest
import yaml
from rich.cells import cell_len
from typer.testing import CliRunner

from harness.cli import app
from tests.conftest import ROOT

B2B_LABELS = ["original", "concat", "rewrite", "rewrite rules", "multi_query_rrf", "rewrite_adaptive", "rewrite_hyde",
              "oracle"]
SWEEP_LABELS = ["original"] + [f"corrective top_k={k} max_rounds={m}" for k in (1, 3) for m in (1, 3)]
METRICS = ("recall@10", "ndcg@10", "mrr@10", "judged@10")  # judged@10: the coverage figure compare shows beside them
CI = re.compile(r"^\[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]$")


def invoke(*args, columns: int):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two copies of the committed baseline (b2b, b2b-again) and a handbook run with the corrective
    sweep (long labels, the grader's note)."""
    tmp = tmp_path_factory.mktemp("tables")
    for name in ("b2b", "b2b-again"):
        shutil.copytree(ROOT / "runs/baselines/b2b", tmp / name)
    cfg = {"name": "sweep", "eval_set": str(ROOT / "eval_sets/handbook-de"), "runs_dir": str(tmp),
           "arms": ["original", {"name": "corrective", "top_k": [1, 3], "max_rounds": [1, 3]}]}
    (tmp / "sweep.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert invoke("run", tmp / "sweep.yaml", "--run-id", "sweep", "-q", "--no-metrics", columns=120).exit_code == 0
    return tmp


def rows(text: str, header: str) -> list[list[str]]:
    """The body rows of the table whose header line holds `header`, as lists of cell texts (a
    label broken over two lines gives a second row with empty cells but the label's)."""
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("┃") and header in x)
    start = next(i for i in range(start, len(lines)) if lines[i].startswith("┡"))  # headers may take lines
    out = []
    for x in lines[start + 1:]:
        if not x.startswith("│"):
            break
        out.append([c.strip() for c in x.strip("│").split("│")])
    return out


def headers(text: str, header: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith("┃") and header in x)
    return [c.strip() for c in line.strip("┃").split("┃")]


def check_lines(text: str, columns: int) -> None:
    for line in text.splitlines():
        if line.startswith("compare: ") or line.startswith("run: "):  # the one-line answers (tests/cli/test_answers.py)
            continue
        assert cell_len(line) <= columns, f"wider than {columns}: {line!r}"
        assert line == line.rstrip(), f"trailing spaces: {line!r}"


def check_paired(text: str, header: str, labels: list[str], segments: set[str], columns: int) -> list[str]:
    """Every cell whole: metric names, segments and CIs never cut or wrapped, labels broken only
    between words; the columns shown."""
    cols = headers(text, header)
    words = {w for label in labels for w in label.split()}
    body = rows(text, header)
    assert body
    for r in body:
        cell = dict(zip(cols, r))
        assert "…" not in "".join(r), r
        assert set(cell["arm"].split()) <= words, r  # no `origina` / `l`
        if cell["metric"]:
            assert cell["metric"].rstrip("↑↓") in METRICS, r
            assert cell["segment"] in segments, r
            assert CI.match(cell["95% CI"]) or cell["95% CI"] == "not measured", r
        else:  # a label's second line: nothing else on it
            assert not any(r[1:]), r
    check_lines(text, columns)
    return cols


@pytest.mark.parametrize("columns", [120, 80])
def test_compare_puts_the_run_in_the_title_and_fits(runs, tmp_path, columns):
    """--all: the copy's arms are all unchanged, which is one line without it (tests/report/test_unchanged_arms.py)."""
    r = invoke("compare", runs / "b2b", runs / "b2b-again", "-s", "all", "-s", "turn_index>=2", "-s",
               "split=main & turn_index>=2", "--all", "-o", tmp_path / "c", columns=columns)
    assert r.exit_code == 0, r.output
    cols = check_paired(r.output, "95% CI", B2B_LABELS, {"all", "t≥2", "split=main & t≥2"}, columns)
    assert "run" not in cols and r.output.count("b2b-again") == 1, r.output  # the title names it, once
    assert [c for c in cols if c in ("diff", "95% CI")] == ["diff", "95% CI"]
    if columns == 120:
        assert {"n", "p", "W/T/L"} <= set(cols)


@pytest.mark.parametrize("columns", [120, 80])
def test_scored_tables_fit_and_say_their_run_in_titles_that_do_not_break(runs, columns):
    r = invoke("metrics", runs / "sweep", columns=columns)
    assert r.exit_code == 0, r.output
    segments = {"all", "t=1", "t≥2", "split=main & t≥2", "split=test & t≥2"}
    cols = check_paired(r.output, "95% CI", SWEEP_LABELS, segments, columns)
    assert {"arm", "metric", "segment", "diff", "95% CI"} <= set(cols)
    if columns == 120:
        assert {"n", "p", "W/T/L"} <= set(cols)
        assert "recall@10 on handbook-de by turn index (sweep; u = unmeasured)" in r.output.splitlines()
    body = rows(r.output, "t=1")  # the metric table: a value a cell, whole
    assert body and all(re.fullmatch(r"\d\.\d{3}|n/a|—|", c) for r_ in body for c in r_[1:]), body


def test_notes_stay_within_three_lines(runs):
    r = invoke("metrics", runs / "sweep", columns=120)
    lines = r.output.splitlines()
    starts = [i for i, x in enumerate(lines)
              if x.startswith(("note: ", "faithfulness and response_relevancy: ", "metrics: "))]
    assert starts, r.output
    for a, b in zip(starts, starts[1:]):
        assert b - a <= 3, "\n".join(lines[a:b])
    grader = next(i for i in starts if "corrective top_k=3 max_rounds=1 = corrective top_k=1" in lines[i])
    assert "support" in " ".join(lines[grader:grader + 3])  # the note is there, cut to three lines


def _names_whole(text: str, header: str, column: int, labels: list[str]) -> list[str]:
    """The cells of the `column`-th column of the table headed `header`, each checked to hold
    whole words of `labels` only (a label may break between its words, never inside one)."""
    words = {w for label in labels for w in label.split()}
    cells = [r[column] for r in rows(text, header)]
    assert cells and all(set(c.split()) <= words for c in cells), cells  # no `multi_query_r` / `rf`
    return cells


@pytest.mark.parametrize("columns", [120, 80])
def test_the_metric_table_never_splits_a_label(runs, columns):
    """The demo's b2b judged@10 table (cells with their own counts, `0.106 (n=204, 0u)`) split
    `multi_query_r`/`rf` and `rewrite_adapt`/`ive` at 120 columns (issue 44, item 8): the cells of
    words give way, between words, before a label breaks."""
    r = invoke("metrics", runs / "b2b", "-m", "judged@10", columns=columns)
    assert r.exit_code == 0, r.output
    cells = _names_whole(r.output, "t=1", 0, B2B_LABELS)
    assert {"multi_query_rrf", "rewrite_adaptive"} <= set(cells)
    check_lines(r.output, columns)


@pytest.mark.parametrize("columns", [120, 80])
def test_explain_never_splits_a_label_or_a_metric(runs, columns):
    """`harness gate --explain` wrapped `multi_query_`/`rrf` at 120 columns (issue 44, item 8), and at 80
    `multi_que`/`ry_rrf`, `identifier_pres`/`ervation`: a table per check, its metric and segment in
    its title, a row per label."""
    r = invoke("gate", "--baseline", runs / "b2b", "--candidate", runs / "b2b-again", "--policy",
               ROOT / "configs/gate.yaml", "--explain", columns=columns)
    assert r.exit_code == 0, r.output
    words = {w for label in B2B_LABELS for w in label.split()}
    found = tables(r.output)
    assert len(found) == 10, r.output  # 6 rules, 2 floors, 2 budgets of configs/gate.yaml
    for body in found:
        arms = [x.strip("│").split("│")[0].strip() for x in body]
        assert [a for a in arms if a] == B2B_LABELS, arms  # whole, one row each
    for name in ("identifier_preservation", "entitlement_violations", "latency_total_ms", "[turn_index>=2]"):
        assert name in r.output, name  # never broken across lines
    assert "…" not in r.output
    check_lines(r.output, columns)


def tables(text: str) -> list[list[str]]:
    """Every table of the output as the lines of its body rows."""
    out, body = [], None
    for line in text.splitlines():
        if line.startswith("┡"):
            body = []
        elif body is not None and line.startswith("│"):
            body.append(line)
        elif body is not None:
            out.append(body)
            body = None
    return out


@pytest.fixture(scope="module")
def handbook(runs):
    """The demo's handbook run (configs/handbook.yaml: eleven arms, the corrective sweep's long labels)."""
    r = invoke("run", ROOT / "configs/handbook.yaml", "--set", f"runs_dir={runs}", "--run-id", "handbook", "-q",
               "--no-metrics", columns=120)
    assert r.exit_code == 0, r.output
    return runs / "handbook"


@pytest.mark.parametrize("columns", [120, 80])
@pytest.mark.parametrize("run", ["b2b", "handbook"])
def test_every_table_the_demo_prints_keeps_its_labels_whole(runs, handbook, run, columns):
    """The tables `make demo` prints after each run (harness run prints what `harness metrics` does):
    every row's arm cell whole words of the run's labels, every line within the width, no trailing
    space (the `scoring:` line had one at 80 columns). mtrag-un's labels are b2b's but `rewrite rules`."""
    r = invoke("metrics", runs / run, columns=columns)
    assert r.exit_code == 0, r.output
    labels = B2B_LABELS if run == "b2b" else B2B_LABELS + SWEEP_LABELS
    words = {w for label in labels for w in label.split()}
    found = tables(r.output)
    assert len(found) >= 4, r.output  # recall@10, ndcg@10, mrr@10, judged@10 by turn index, then the paired one
    seen = set()
    for body in found:
        arms = [x.strip("│").split("│")[0].strip() for x in body]
        assert all(set(a.split()) <= words for a in arms), arms
        seen |= set(arms)
    assert {"multi_query_rrf", "rewrite_adaptive"} <= seen, seen
    check_lines(r.output, columns)
