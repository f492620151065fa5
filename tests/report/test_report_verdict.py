"""A report that opens with the answer: `harness report runs/baselines/b2b CANDIDATE` puts the evidence
first (complete runs, failed turns), then a verdict block (candidate − baseline per label, quality
metric and turn-index segment, 95% CI, Holm p, regressions marked in the metric's direction, what
changed between paired arms; latency, cost and calls apart, never a regression), then the
headline, the plots, the drill-down and the manifests last; no absolute path of the machine; the
drill-down reaches every session and filters the turns where arms disagree or the candidate
regressed; eight arms fit 1,400 px, and in headless Chromium (where installed) the page as shipped
sorts and filters its tables, finds a session by its id and opens a #anchor.

The candidate is the committed b2b baseline, copied and changed where its effect is known, then
scored by `harness metrics`: the rewrite arm is 400 ms slower on turns 2 and later (latency is
lower-is-better), the concat arm's top 10 is pushed down on turns 2 and later (recall drops), the
rewrite arm's prompt hash changes, and an eighth arm (concat's rows under another id) has no
partner in the baseline."""
import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store.folder import MANIFEST, METRICS, RunFolder
from tests.report.chromium import Page
from tests.conftest import ROOT

BASELINE = Path("runs/baselines/b2b")
SEGMENTS = ("all", "turn_index=1", "turn_index=2", "turn_index=3", "turn_index>=4", "turn_index>=2")
EIGHTH = "concat(answer=false,depth=100,id_lane=true,lane=hybrid,max_turns=2)"
PROMPT = "rewrite@1a2b3c4d"
REWRITE = "rewrite"  # the offline HQE rewrite (beside the catalogue rules, labelled `rewrite rules` in configs/b2b.yaml)


def invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "120"})
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


def make_candidate(dst: Path) -> Path:
    shutil.copytree(ROOT / BASELINE, dst)
    folder = RunFolder(dst)
    (dst / METRICS).unlink()
    m = json.loads((dst / MANIFEST).read_text(encoding="utf-8"))
    rewrite = next(a["arm_id"] for a in m["arms"] if a["label"] == REWRITE)
    for part in folder.parts():
        t = pd.read_parquet(part)
        later = t["turn_index"] >= 2
        t.loc[(t["arm_id"] == rewrite) & later, "ms_total"] += 400.0
        cc = (t["arm"] == "concat") & later
        t.loc[cc, "ranking"] = t.loc[cc, "ranking"].map(lambda r: list(r)[10:] + list(r)[:10])
        extra = t[t["arm"] == "concat"].assign(arm_id=EIGHTH, params=t.loc[t["arm"] == "concat", "params"].str.replace(
            '"max_turns":0', '"max_turns":2'))
        pd.concat([t, extra]).assign(run_id="candidate").to_parquet(part, index=False)  # as a replay of its own writes
    m["run_id"] = "candidate"
    for a in m["arms"]:
        if a["arm_id"] == rewrite:
            a["prompts"] = {"rewrite": PROMPT}
    concat = next(a for a in m["arms"] if a["arm"] == "concat")
    m["arms"].append({**concat, "arm_id": EIGHTH, "label": "concat last two",
                      "params": {**concat["params"], "max_turns": 2}})
    (dst / MANIFEST).write_text(json.dumps(m, indent=2), encoding="utf-8")
    r = invoke("metrics", dst)
    assert r.exit_code == 0, r.output
    return dst


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """(candidate folder, report html, CLI output) of `harness report runs/baselines/b2b CANDIDATE`,
    run from the project folder as a user would."""
    tmp = tmp_path_factory.mktemp("verdict")
    cand = make_candidate(tmp / "runs" / "candidate")
    here = Path.cwd()
    os.chdir(ROOT)
    try:
        r = invoke("report", BASELINE, cand, "-o", tmp / "review.html")
    finally:
        os.chdir(here)
    assert r.exit_code == 0, r.output
    return cand, (tmp / "review.html").read_text(encoding="utf-8"), r.output


class Verdict(HTMLParser):
    """Rows of the verdict table (label, segment) and their cells (metric -> mark)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows: list[tuple[str, str]] = []
        self.cells: dict[tuple[str, str, str], str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "vrow":
            self.rows.append((a["data-label"], a["data-segment"]))
        elif tag == "td" and "data-metric" in a and self.rows:
            self.cells[(*self.rows[-1], a["data-metric"])] = a.get("data-mark") or ""


def section(html: str, name: str) -> str:
    return html[html.index(f'<section id="{name}">'):].split("</section>", 1)[0]


def test_the_answer_and_the_verdict_block_come_first_and_the_manifests_last(reported):
    _, html, out = reported
    order = re.findall(r'<section id="([a-z]+)">', html)
    # the answer (each run's best arm against its reference, tests/report/test_report_top.py) opens the report
    assert order[:4] == ["leaders", "evidence", "verdict", "headline"] and order[-1] == "manifests"
    assert "candidate against baseline b2b</a>:\n<span class=\"regression\"><strong>6 regression(s)" in section(html, "leaders")
    assert order.index("metrics") > order.index("headline")  # the plots after the headline
    assert html.index('<section id="verdict">') < html.index("<img")  # nothing plotted before the answer
    assert "candidate against b2b: 6 regression(s)" in out  # concat on turns 2 and later; latency is not one (11 before)
    ev = section(html, "evidence")
    assert ev.count("complete, every planned turn has its final row") == 2 and ev.count("No failed turn") == 2


def test_one_row_per_label_and_turn_index_segment(reported):
    _, html, _ = reported
    p = Verdict()
    p.feed(section(html, "verdict"))
    assert p.rows == [("concat", s) for s in SEGMENTS]  # one row each, in order, for the label that changed
    # the others in one line (issue 44, item 2): rewrite's latency and prompt changed, its rankings did not
    assert ("7 arms unchanged: identical rankings on every turn (original, rewrite, rewrite rules, multi_query_rrf, "
            "rewrite_adaptive, rewrite_hyde, oracle): their rows are left out") in section(html, "verdict")
    for s in ("t=1", "t=2", "t=3", "t≥4", "t≥2"):
        assert f"<strong>{s}</strong>" in section(html, "verdict")
    assert "concat last two" in section(html, "verdict")  # the unpaired arm is named, not compared


def test_regressions_are_marked_in_the_metrics_direction(reported):
    _, html, _ = reported
    p = Verdict()
    p.feed(section(html, "verdict"))
    # latency is operational: +400 ms on turns 2 and later is shown apart, never counted as a regression
    assert not [k for k in p.cells if k[2] == "latency_total_ms"]
    for m in ("recall@10", "ndcg@10"):
        assert p.cells[("concat", "turn_index>=2", m)] == "regression"
        assert p.cells[("concat", "turn_index=1", m)] == ""
    assert not [k for k, v in p.cells.items() if k[0] == "original" and v]  # unchanged: nothing marked
    assert "improvement" not in p.cells.values()
    v = section(html, "verdict")
    assert "recall@10 ↑" in v and "higher is better" in v
    ops = v[v.index("Operational"):]
    assert "not comparable" in ops and "latency_total_ms (ms)" in ops
    rows = dict(re.findall(r"<tr><th>([^<]+)</th>\s*(.*?)</tr>", ops, re.S))
    assert "unchanged arm" in rows["original"] and "unchanged arm" in rows["concat"]
    assert "unchanged arm" not in rows[REWRITE] and "+2" in rows[REWRITE]  # 400 ms on 154 of 204 turns: +302


def test_prompt_changes_between_paired_arms_are_shown(reported):
    _, html, _ = reported
    v = section(html, "verdict")
    assert f"changed all the same: rewrite: prompt.rewrite (none) → {PROMPT}" in v  # in the unchanged arms' line
    assert v.count("no change in parameters, models or prompts") == 1  # concat, whose rankings were changed


def test_faithfulness_is_na_where_no_run_was_judged_and_says_so(reported):
    _, html, _ = reported
    p = Verdict()
    p.feed(section(html, "verdict"))
    assert {v for k, v in p.cells.items() if k[2] == "faithfulness"} == {""}
    assert len([k for k in p.cells if k[2] == "faithfulness"]) == len(SEGMENTS)  # concat's rows; the others unchanged
    assert "faithfulness n/a: no judgments in b2b and candidate" in section(html, "verdict")
    assert "faithfulness, response_relevancy n/a for b2b, candidate: no judgments" in section(html, "headline")
    assert "faithfulness, response_relevancy n/a: this run has no judgments" in section(html, "metrics")


def test_no_absolute_path_of_the_machine(reported, tmp_path):
    cand, html, _ = reported
    for root in {str(ROOT), str(ROOT.resolve()), str(cand.parent.parent), str(Path.home()), "/tmp/"}:
        assert root not in html, root
    assert not re.search(r"(?<![\w.~/-])/(tmp|home|root|work|Users|var|private)/", html)
    assert "<code>runs/baselines/b2b</code>" in html and "<code>…/runs/candidate</code>" in html


def test_the_drill_down_reaches_every_session_and_filters_turns(reported):
    cand, html, _ = reported
    d = section(html, "drilldown")
    sessions = sorted(set(RunFolder(cand).labels()["session_id"]))
    assert d.count('<details class="session"') == 2 * len(sessions)  # both runs, every session
    for sid in sessions:
        assert d.count(f"<strong>{sid}</strong>") == 2
    assert d.count('type="radio" class="f-dis"') == 2 and d.count('type="radio" class="f-reg"') == 1
    base, cand_part = d.split("<h3>", 2)[1:]
    assert "data-reg" not in base and "data-reg" in cand_part
    turns = re.findall(r'<details class="turn"([^>]*)><summary>turn (\d+)', cand_part)
    regressed = [int(t) for attrs, t in turns if "data-reg" in attrs]
    assert regressed and min(regressed) >= 2  # concat's drops, on turns 2 and later only
    assert "(baseline " in cand_part  # each candidate score beside its paired baseline arm's
    assert ">concat last two</th>" in cand_part  # labels in the rows, full ids in details
    assert f'<td class="mono">{EIGHTH}</td>' in cand_part


def test_sessions_where_the_candidate_regressed_are_shown_turn_by_turn_past_drill_sessions(reported, tmp_path):
    cand, html, _ = reported
    regressed = set(re.findall(r'<details class="session"[^>]* data-dis data-reg><summary><strong>([^<]+)</strong>',
                               section(html, "drilldown").split("<h3>", 2)[2]))
    assert len(regressed) > 3
    r = invoke("report", ROOT / BASELINE, cand, "--drill-sessions", 3, "-o", tmp_path / "few.html")
    assert r.exit_code == 0, r.output
    base, cand_part = section((tmp_path / "few.html").read_text(encoding="utf-8"), "drilldown").split("<h3>", 2)[1:]
    assert base.count('<details class="session"') == 3  # the baseline: three, the others listed
    shown = set(re.findall(r'<details class="session"[^>]*><summary><strong>([^<]+)</strong>', cand_part))
    assert regressed <= shown and len(shown) < 50


def test_policy_adds_the_gates_verdict_and_bad_input_exits_2(reported, tmp_path):
    cand, _, _ = reported
    policy = tmp_path / "policy.yaml"
    policy.write_text("unpaired: warn\nbudgets:\n  - {metric: latency_total_ms, stat: p95, arm: '*', max: 0.001}\n",
                      encoding="utf-8")  # an operational metric takes an absolute budget, never a rule
    r = invoke("report", "--baseline", ROOT / BASELINE, cand, "--policy", policy, "-m", "recall@5",
               "-o", tmp_path / "gated.html")
    assert r.exit_code == 0 and "gate: regression" in r.output, r.output
    v = section((tmp_path / "gated.html").read_text(encoding="utf-8"), "verdict")
    assert "Gate (policy.yaml): REGRESSION" in v and "latency_total_ms" in v and "recall@5" in v
    strict = tmp_path / "strict.yaml"
    strict.write_text("rules:\n  - {metric: recall@10, max_drop: 0.05}\n", encoding="utf-8")
    r = invoke("report", ROOT / BASELINE, cand, "--policy", strict, "-o", tmp_path / "x.html")
    assert r.exit_code == 2 and "concat last two" in r.output and "Traceback" not in r.output
    r = invoke("report", ROOT / BASELINE, cand, "-m", "recal@10", "-o", tmp_path / "x.html")
    assert r.exit_code == 2 and "recall@10" in r.output


def test_one_run_says_why_there_is_no_verdict_block(reported, tmp_path):
    cand, _, _ = reported
    r = invoke("report", cand, "-o", tmp_path / "one.html")
    assert r.exit_code == 0, r.output
    html = (tmp_path / "one.html").read_text(encoding="utf-8")
    assert re.findall(r'<section id="([a-z]+)">', html)[:3] == ["leaders", "evidence", "verdict"]
    assert "No verdict block: one run: there is no baseline" in section(html, "verdict")


# every table whose right edge is past the page's (one inside a closed <details> has no box: 0)
PAST_THE_EDGE = """[...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().right >
    document.documentElement.clientWidth).map(t => (t.closest('section') || {}).id + ': ' + t.className)"""


@pytest.fixture
def page(reported, tmp_path):
    """The report as shipped (its CSP, its one script) in headless Chromium at 1400 x 900, its
    tables made by DataTables."""
    _, html, _ = reported
    (tmp_path / "review.html").write_text(html, encoding="utf-8")
    with Page(tmp_path, 1400, 900) as p:
        p.open(tmp_path / "review.html")
        assert p.wait("document.documentElement.getAttribute('data-tables')") == "ready"
        yield p


def test_eight_arms_fit_1400_px_with_every_detail_open(reported, page):
    """The first screen has no horizontal scroll, and no table is wider than the page, first with
    the page as it opens (the verdict table was 1,520 px, entitlement_violations cut at the right
    edge), then with every <details> open (the drill-down's eight arms side by side)."""
    _, html, _ = reported
    assert html.count('<th class="rowhead"></th>') and "<th>concat last two</th>" in html
    assert page.js("document.documentElement.scrollWidth") <= 1400
    assert page.js(PAST_THE_EDGE) == []
    assert page.js("document.querySelectorAll('details').forEach(d => d.open = true) || 1")
    assert page.js("document.querySelectorAll('table.drill').length") >= 2 * 204
    assert page.js("document.documentElement.scrollWidth") <= 1400
    assert page.js(PAST_THE_EDGE) == []


def _column(page, table: str, i: int) -> list[str]:
    return page.js(f"[...document.querySelector({json.dumps(table)}).tBodies[0].rows]"
                   f".map(r => r.cells[{i}].textContent.trim())")


def test_a_table_sorts_on_a_click_and_filters_on_typing(page):
    table = 'table.metric[data-run="b2b"][data-metric="recall@10"]'
    shown = _column(page, table, 1)  # the `all` column, arms in the manifest's order
    means = [float(v) for v in shown]
    assert means != sorted(means) and means != sorted(means, reverse=True)
    page.js(f"document.querySelector({json.dumps(table + ' thead th[data-segment=all]')}).click()")
    assert [float(v) for v in _column(page, table, 1)] == sorted(means)
    page.js(f"document.querySelector({json.dumps(table + ' thead th[data-segment=all]')}).click()")
    assert [float(v) for v in _column(page, table, 1)] == sorted(means, reverse=True)
    comparisons = "#comparisons table.dataTable"  # b2b's, 56 rows: a filter box above it
    before = _column(page, comparisons, 3)
    page.type("#comparisons .dt-search input", "rewrite_hyde")
    after = _column(page, comparisons, 3)
    assert after == [a for a in before if a == "rewrite_hyde"] and 0 < len(after) < len(before)


def test_the_drill_downs_search_finds_a_session_and_an_anchor_opens_it(reported, page, tmp_path):
    _, html, _ = reported
    box = '[id="search/candidate"]'
    visible = ("[...document.querySelectorAll('[id=\"drill/candidate\"] details.session')]"
               ".filter(s => s.checkVisibility()).map(s => s.id)")
    assert len(page.js(visible)) == 20  # the first of three pages of sessions is open
    last = re.findall(r'<details class="session" id="drill/candidate/([^"]+)"', html)[-1]  # on the third page
    page.type(box, last)
    assert page.js(visible) == [f"drill/candidate/{last}"]
    assert page.js(f"document.getElementById('drill/candidate/{last}').open")  # the one session found, open
    page.js(f"(b => {{ b.value = ''; b.dispatchEvent(new Event('input')); }})(document.querySelector({json.dumps(box)}))")
    page.type(box, "Sechskantschrauben M6")  # words of a user's turn
    assert "drill/candidate/b2b-t08" in page.js(visible)
    # a turn on the last page (closed as the page opens), the page opened directly at its #anchor
    turn = re.findall(r'<details class="turn" id="(drill/candidate/[^"]+)"', html)[-1]
    with Page(tmp_path / "fresh", 1400, 900) as fresh:
        fresh.open(tmp_path / "review.html", turn)
        assert fresh.wait("document.documentElement.getAttribute('data-tables')") == "ready"
        opened = fresh.js(f"""(t => {{ const out = []; for (let d = t; d; d = d.parentElement.closest('details'))
            out.push(d.open); const r = t.getBoundingClientRect(); return [out, r.top > -1 && r.top < 900]; }})
            (document.getElementById({json.dumps(turn)}))""")
    assert opened == [[True, True, True], True]  # turn, session, page; scrolled to (to a sub-pixel)


def test_judged_runs_show_faithfulness_per_turn_index_with_unmeasured_counts(tmp_path):
    """Constructed runs (tests.analysis.test_compare_gate.make_run): the candidate is 0.1 worse everywhere and
    its judge failed on 10 of 60 sessions; the block computed by the analysis stage, rendered."""
    from harness.analysis.verdict import plan, verdicts
    from harness.report.render import environment
    from harness.report.sections import verdict as section_
    from tests.evidence import seal
    from tests.analysis.test_compare_gate import ARM, make_run

    base = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    cand = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, shift=-0.1)
    m = pd.read_parquet(cand / METRICS)
    failed = (m["metric"] == "faithfulness") & m["session_id"].isin([f"s{i}" for i in range(10)])
    m.loc[failed, "value"], m.loc[failed, "unmeasured"] = None, "error: APIConnectionError"
    m.to_parquet(cand / METRICS)
    seal(cand)
    v = verdicts(plan([base, cand]))
    (b,) = v["blocks"]
    assert b["segments"] == ["all", "turn_index=1", "turn_index=2", "turn_index>=2"]
    assert b["segment_note"] == "no labelled turn in turn_index=3, turn_index>=4"
    rows = {r["segment"]: r["cells"] for r in b["labels"][0]["rows"]}
    for seg, n in (("all", 120), ("turn_index=1", 60), ("turn_index=2", 60), ("turn_index>=2", 60)):
        f = rows[seg]["faithfulness"]
        assert (f["n_turns"], f["n_unmeasured"], f["mark"]) == (n - n // 6, n // 6, "regression"), seg
        assert "latency_total_ms" not in rows[seg]  # operational: apart from the verdict
    assert [m["name"] for m in b["operational"]["metrics"]] == ["latency_total_ms", "cost_usd"]
    html = environment().get_template("sections/verdict.html.j2").render(verdict=section_.build(v, []))
    assert html.count('data-metric="faithfulness" data-mark="regression"') == 4
    assert '<span class="n unm">20 unmeasured</span>' in html and '<span class="n unm">10 unmeasured</span>' in html
    assert "mrr@10 n/a: not measured in base and cand" in html


def test_which_runs_get_a_block(reported, tmp_path):
    """--baseline with several candidates: one block each, the baseline first; several runs without
    --baseline: none, and the reason (other eval sets, or no baseline named)."""
    from harness.analysis.verdict import plan

    cand, _, _ = reported
    other = tmp_path / "other"
    shutil.copytree(cand, other, ignore=shutil.ignore_patterns("traces", "*.parquet"))
    p = plan([cand, other, ROOT / BASELINE], baseline=ROOT / BASELINE)
    assert p.runs == [ROOT / BASELINE, cand, other] and p.candidates == [cand, other] and not p.why_not
    assert plan([ROOT / BASELINE, cand]).candidates == [cand]
    assert "name the baseline with --baseline RUN" in plan([ROOT / BASELINE, cand, other]).why_not[0]
    m = json.loads((other / MANIFEST).read_text(encoding="utf-8"))
    m["eval_set"]["version"] = "2.0"
    (other / MANIFEST).write_text(json.dumps(m), encoding="utf-8")
    assert "on 2 eval sets (b2b-shop 1.0, b2b-shop 2.0)" in plan([ROOT / BASELINE, cand, other]).why_not[0]
