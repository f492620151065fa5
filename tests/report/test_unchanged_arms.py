"""Arms a change left alone are one line (issue 44, item 2), and `harness report` ends with each
run's answer (item 1). A `make compare` of a change to two arms printed 48 rows of `+0.000
[+0.000, +0.000] p 1.000` for the six others, and the report's verdict table six blocks of them;
`make demo` ended with the report's path and its time, never with who won.

The candidate is a copy of the committed baseline whose traces were changed for two arms and
scored again (`harness metrics`): concat now ranks what original ranks (so within its run it equals
the reference arm), rewrite has its first two hits swapped; oracle's ranking below rank 30 is
reversed, which no metric reads (every difference exactly zero, rankings not identical)."""
from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harness.cli import app
from tests.conftest import ROOT

LABELS = ["original", "concat", "rewrite", "rewrite rules", "multi_query_rrf", "rewrite_adaptive", "rewrite_hyde",
          "oracle"]
SAME = "6 arms unchanged: identical rankings on every turn (original, rewrite rules, multi_query_rrf, " \
       "rewrite_adaptive, rewrite_hyde); every difference exactly zero (oracle)"


def invoke(*args, columns: int = 120):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


def _alter(run) -> None:
    """concat := original's final rankings; rewrite: its first two hits swapped; oracle: below rank 30 reversed."""
    arms = {a.get("label") or a["name"]: a["arm_id"] for a in json.loads((run / "manifest.json").read_text())["arms"]}
    for part in (run / "traces").glob("*.parquet"):
        t = pq.read_table(part)
        d = t.to_pydict()
        key = list(zip(d["repeat"], d["session_id"], d["turn_index"]))
        first = {k: r for k, a, f, r in zip(key, d["arm_id"], d["is_final"], d["ranking"]) if f and a == arms["original"]}
        for i, (k, a, f, r) in enumerate(zip(key, d["arm_id"], d["is_final"], d["ranking"])):
            if not f:
                continue
            if a == arms["concat"] and k in first:
                d["ranking"][i] = first[k]
            elif a == arms["rewrite"] and len(r) > 1:
                d["ranking"][i] = [r[1], r[0], *r[2:]]
            elif a == arms["oracle"] and len(r) > 31:
                d["ranking"][i] = r[:30] + r[30:][::-1]
        pq.write_table(pa.Table.from_pydict(d, schema=t.schema), part)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unchanged")
    for name in ("b2b", "b2b-two", "b2b-again"):
        shutil.copytree(ROOT / "runs/baselines/b2b", tmp / name)
    _alter(tmp / "b2b-two")
    assert invoke("metrics", tmp / "b2b-two").exit_code == 0
    return tmp


@pytest.fixture(scope="module")
def report(runs):
    out = runs / "review.html"
    r = invoke("report", runs / "b2b", runs / "b2b-two", "-o", out)
    assert r.exit_code == 0, r.output
    return r.output, out.read_text(encoding="utf-8")


def body_labels(text: str) -> list[str]:
    """The labels of the rows of the table whose header holds `95% CI`."""
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("┃") and "95% CI" in x)
    start = next(i for i in range(start, len(lines)) if lines[i].startswith("┡"))
    out = []
    for x in lines[start + 1:]:
        if not x.startswith("│"):
            break
        out.append(x.strip("│").split("│")[0].strip())
    return [x for x in out if x]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_compare_of_a_change_to_two_arms_shows_their_rows_and_one_line_for_the_rest(runs, tmp_path):
    r = invoke("compare", runs / "b2b", runs / "b2b-two", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert set(body_labels(r.output)) == {"concat", "rewrite"}, r.output
    assert f"b2b-two against b2b: {SAME}; --all shows their rows" in flat(r.output), r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("compare: 1 of 8 arms differ significantly from b2b") and "rewrite (ndcg@10" in last, last
    assert last.endswith("not significantly: concat; 6 unchanged"), last
    md = (tmp_path / "c/compare.md").read_text(encoding="utf-8")
    assert {row.split(" | ")[1] for row in md.splitlines() if row.startswith("| b2b-two")} == {"concat", "rewrite"}
    assert SAME in md
    assert set(pd.read_csv(tmp_path / "c/compare.csv")["label"]) == set(LABELS)  # every row kept in the CSV


def test_all_shows_the_rows_of_unchanged_arms(runs, tmp_path):
    r = invoke("compare", runs / "b2b", runs / "b2b-two", "--all", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert set(body_labels(r.output)) == set(LABELS), r.output
    assert "unchanged: identical" not in flat(r.output)


def test_an_identical_candidate_says_what_it_compared(runs, tmp_path):
    r = invoke("compare", runs / "b2b", runs / "b2b-again", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert "b2b-again against b2b: 8 arms unchanged: identical rankings on every turn (original, concat, rewrite, " \
           "rewrite rules, multi_query_rrf, rewrite_adaptive, rewrite_hyde, oracle)" in flat(r.output), r.output
    assert r.output.strip().splitlines()[-1] == ("compare: no arm differs significantly from b2b (Holm p < 0.05); "
                                                 "8 arms compared, all 8 unchanged")


def test_gate_md_says_unchanged_arms_in_one_line_and_keeps_every_check_in_json(runs, tmp_path):
    r = invoke("gate", "--baseline", runs / "b2b", "--candidate", runs / "b2b-two", "--policy",
               ROOT / "configs/gate.yaml", "-o", tmp_path / "g")
    assert r.exit_code in (0, 1), r.output
    md = (tmp_path / "g/gate.md").read_text(encoding="utf-8")
    assert f"- {SAME}: their 60 checks pass or are n/a" in md, md
    checks = [row.split(" | ")[0] for row in md.splitlines() if row.startswith(("| rule", "| floor", "| budget"))]
    assert checks and {c.split("] ")[-1] if "]" in c else c.rsplit(" ", 1)[-1] for c in checks} == {"concat", "rewrite"}
    assert len(json.loads((tmp_path / "g/gate.json").read_text())["results"]) == 80
    assert f"{SAME}: their 60 checks" in flat(r.output)


def test_the_reports_verdict_block_and_comparisons_leave_unchanged_arms_to_one_line(report):
    _, html = report
    block = html[html.index('<section id="verdict">'):html.index("</section>", html.index('<section id="verdict">'))]
    assert set(re.findall(r'class="vrow" data-label="([^"]+)"', block)) == {"concat", "rewrite"}
    assert f"{SAME}: their rows are left out" in block
    within = html[html.index('<section id="comparisons">'):]
    assert "1 arm equal to original: identical top 10 on every turn (concat): their rows are left out" in within


def test_the_report_ends_with_each_runs_best_arm_then_its_path(report):
    """The numbers of the last lines are the report's first table's (harness.analysis.leaders); the
    report names the copy of the baseline by its run id, `b2b#2`."""
    output, html = report
    *answers, path = [x for x in output.splitlines() if x.strip()][-3:]
    assert path.startswith("report: ") and path.endswith("review.html"), output
    for run, key, line in zip(("b2b", "b2b-two"), ("b2b", "b2b#2"), answers):
        assert line.startswith(f"answer b2b-shop 1.0 ({run}, reference original): recall@10 "), line
        assert "pHolm: Holm over the run's" in line, line
        for metric, said in re.findall(r"(recall@10|ndcg@10) ([^;]+?)(?:;|\(pHolm)", line):
            assert " − original " in said and re.search(r"p \S+.* pHolm \S+", said), said
            assert said.rstrip(", ").endswith(("leads", "arms")) or "tied with" in said, said
            best, diff, ci = re.match(r"(.+?) − original ([+-]\d\.\d{3}) (\[[^\]]+\])", said).groups()
            row = re.search(rf'<tr class="lrow" data-run="{key}" data-metric="{metric}" data-best="{best}".*?</tr>',
                            html, re.S)
            assert row and diff in row.group(0) and ci in row.group(0), (said, row and row.group(0))
