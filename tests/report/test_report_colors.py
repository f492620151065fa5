"""One colour per arm label in every run and plot (issue 44, item 4): a label's colour does not
depend on its arm's position in a run nor on the other arms; a plot by turn index is drawn only
when there is more than one turn index to show."""
from types import SimpleNamespace

import pandas as pd

from harness.report.colors import COLORS, FIXED, arm_colors
from harness.report.sections import metrics, tradeoff

B2B = ["original", "concat", "rewrite", "rewrite rules", "multi_query_rrf", "rewrite_adaptive", "rewrite_hyde", "oracle"]
HANDBOOK = ["original", "concat", "multi_query_rrf", "corrective top_k=1", "corrective top_k=3", "oracle"]


def _run(labels: list[str], turns=(1, 2, 3)):
    """The parts of a ReportRun the by-turn series and the trade-off rows read."""
    arms = [f"id-{x}" for x in labels]
    point = {"mean": 0.5, "lo": 0.4, "hi": 0.6, "n": 10, "n_sessions": 5}
    return SimpleNamespace(arms=arms, label=dict(zip(arms, labels)), key="r",
                           labels=pd.DataFrame({"turn_index": list(turns)}),
                           spread=lambda arm, metric, b: {**point, "mean": 0.1 * len(arm) % 1},
                           headline=["recall@10"], aggregate=lambda arm, m: {"mean": 0.5, "n": 10, "n_unmeasured": 0,
                                                                            "p50": 1.0, "p95": 2.0})


def test_a_label_has_one_colour_in_every_run():
    b2b, handbook = arm_colors(B2B), arm_colors(HANDBOOK)
    assert b2b["multi_query_rrf"] == handbook["multi_query_rrf"]  # was purple in b2b, red in handbook
    assert all(b2b[x] == handbook[x] for x in set(B2B) & set(HANDBOOK))
    assert arm_colors(list(reversed(HANDBOOK))) == handbook
    for colors in (b2b, handbook, arm_colors([f"corrective top_k={k}" for k in range(1, 8)])):
        assert len(set(colors.values())) == len(colors) and all(0 <= i < len(COLORS) for i in colors.values())
    assert all(arm_colors([x])[x] == FIXED.index(x) for x in FIXED)


def test_the_report_sections_colour_by_label_not_by_position():
    for labels in (B2B, HANDBOOK, list(reversed(HANDBOOK))):
        series, _ = metrics.turn_series(_run(labels), "recall@10")
        assert {s["label"]: s["color_index"] for s in series} == arm_colors(labels)
        rows = tradeoff.rows(_run(labels))
        assert {r["label"]: r["color_index"] for r in rows} == arm_colors(labels)
    series, _ = metrics.turn_series(_run(HANDBOOK), "recall@10")
    assert next(s for s in series if s["label"] == "multi_query_rrf")["color_index"] == FIXED.index("multi_query_rrf")


def test_no_plot_by_turn_index_when_every_turn_is_turn_1():
    """The handbook's every turn is turn 1: its 'by turn index' plot was dots on one x position."""
    plot, sentence = metrics.plot_or_sentence(_run(HANDBOOK, turns=(1, 1, 1)), "recall@10")
    assert plot is None and "Every labelled turn of this run is turn 1" in sentence


def _series(n: int) -> list[dict]:
    pts = lambda j: [{"bucket": b, "mean": 0.5 + 0.01 * j, "lo": 0.4, "hi": 0.6, "n": 10} for b in ("1", "2", "3")]  # noqa: E731
    return [{"label": f"arm{j}", "color_index": j, "points": pts(j)} for j in range(n)]


def test_many_overlapping_bands_are_split_into_small_multiples():
    """Four or more arms' CI bands on b2b overlapped into one smear: past OVERLAID arms, one panel
    per arm, each titled by its label in its colour, on one shared y axis."""
    from harness.report.colors import COLORS
    from harness.report.plots import OVERLAID, metric_by_turn, turn_figure

    few = turn_figure(_series(OVERLAID), ["1", "2", "3"], "recall@10", "t", True)
    assert len(few.axes) == 1
    many = turn_figure(_series(8), ["1", "2", "3"], "recall@10", "t", True)
    shown = [ax for ax in many.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [f"arm{j}" for j in range(8)]
    assert all(ax.title.get_color() == COLORS[j] for j, ax in enumerate(shown))
    assert len({ax.get_ylim() for ax in shown}) == 1
    assert metric_by_turn(_series(8), ["1", "2", "3"], "recall@10", "t", True)  # draws
