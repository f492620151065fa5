"""`harness report`'s cheaper code paths give what the slower ones they replaced gave, on the
committed b2b baseline run: the drill-down's label rows and scores (per-session to_dict and
itertuples before), the HTML of jinja's attribute-first lookup, the plots drawn in a process of
their own and from the drawn pixels (a PNG encoded and decoded before), and the leaders of runs
the command has checked already."""
import base64
import io
from pathlib import Path

import numpy as np
import pytest
from markupsafe import escape

from harness.analysis.evidence import check_run
from harness.analysis.leaders import leaders
from harness.report import plots, plotting
from harness.report.format import fmt
from harness.report.load import load_runs
from harness.report.render import TEMPLATES, build_context, environment
from harness.report.sections import drilldown
from harness.report.sections.metrics import turn_series

BASELINE = Path("runs/baselines/b2b")


@pytest.fixture(scope="module")
def run():
    return load_runs([BASELINE])[0]


def _same(a, b) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == np.int64(1) would pass ==)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and _same(a.tolist(), b.tolist())
    return a == b or (a != a and b != b)  # NaN


def test_labels_by_session_are_each_sessions_to_dict(run):
    labs = run.labels.sort_values(["session_id", "turn_index"])
    before = {sid: g.to_dict("records") for sid, g in labs.groupby("session_id", sort=False)}
    assert _same(drilldown.labels_by_session(run.labels), before)


def test_turn_scores_are_those_of_itertuples(run):
    before: dict = {}
    for m in run.headline[:2] + run.judged:
        for r in run.turn_values(m).itertuples():
            before.setdefault((r.arm_id, r.session_id, r.turn_index), {})[m] = fmt(r.value)
    after = drilldown.turn_scores(run)
    assert _same(after, before) and all(_same(a, b) for a, b in zip(after, before))  # the keys' types too


def test_the_html_is_what_jinjas_own_lookup_renders():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    ctx = build_context([BASELINE], plots=False)
    plain = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                        trim_blocks=True, lstrip_blocks=True)
    ours = environment()
    plain.filters.update({k: ours.filters[k] for k in ("anchor", "breakable")})  # ours, not jinja's
    assert type(ours) is not Environment  # the dict-first lookup is the one under test
    assert ours.get_template("report.html.j2").render(**ctx) == \
        plain.get_template("report.html.j2").render(**ctx)


def _png_way(fig) -> str:
    """The plot as to_base64 made it before: savefig's PNG, decoded again for the palette."""
    from PIL import Image

    plots.FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=plots.DPI, bbox_inches="tight", metadata={"Software": None})
    return base64.b64encode(plots.palette(Image.open(io.BytesIO(buf.getvalue())).convert("RGBA"))).decode("ascii")


def _figures(run, monkeypatch) -> list:
    series, buckets = turn_series(run, run.headline[0])
    figs: list = []
    with monkeypatch.context() as m:
        m.setattr(plots, "to_base64", lambda fig: figs.append(fig) or "")
        plots.metric_by_turn(series, buckets, run.headline[0], "title", True)
        plots.rounds_bars([{"label": "a", "counts": {1: 3, 2: 1}}, {"label": "b $x$", "counts": {1: 4}}], "rounds")
    return figs


def test_a_plot_from_the_drawn_pixels_is_the_one_from_savefigs_png(run, monkeypatch):
    figs, again = _figures(run, monkeypatch), _figures(run, monkeypatch)
    assert len(figs) == 2
    for fig, same in zip(figs, again, strict=True):
        assert plots.to_base64(fig) == _png_way(same)


def test_plots_drawn_elsewhere_are_the_plots_drawn_here(run):
    series, buckets = turn_series(run, run.headline[0])
    args = [("metric_by_turn", series, buckets, run.headline[0], "title", True),
            ("tradeoff", [{"label": "a", "color_index": 0, "y": 0.5, "cost": 0.001, "p95_ms": 12.0},
                          {"label": "b", "color_index": 1, "y": 0.6, "cost": 0.002, "p95_ms": 30.0}], "t", "recall@10")]
    here = [plotting.draw(*a) for a in args]
    with plotting.elsewhere():
        pending = [plotting.draw(*a) for a in args]
        assert all(isinstance(p, plotting.Pending) for p in pending)
        assert [str(escape(p)) for p in pending] == here  # as jinja writes it into the HTML
    assert all(isinstance(h, str) and h for h in here)


def test_leaders_of_checked_runs_are_the_leaders_of_the_folders():
    data = check_run(BASELINE, complete=False, scored=False, rescore=False)
    checked = {str(BASELINE.resolve()): data}
    assert leaders([BASELINE], checked=checked) == leaders([BASELINE])
