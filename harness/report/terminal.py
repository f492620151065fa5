"""The scored tables rendered for the terminal (rich), by arm label and within the console's
width (COLUMNS, else the terminal's, else 120; harness/report/fit.py): a metric per turn index,
the paired comparisons, abstention by answerability, rounds per turn index, arms that coincide,
notes. Every table says its run in its title, never in a column; at 80 columns the paired tables
keep label, metric, segment, difference and CI whole and leave out the rest. Rendering only:
every number comes from the scoring step's outputs (harness/metrics/score.py)."""
from __future__ import annotations

import math
import os
import sys

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.metrics.stats import STATS, holm_said, p_cells
from harness.store.record import Manifest
from harness.report.fit import Col, Fitted, Wrapped, table
from harness.report.table import TURN_SEGMENTS, bucket, coinciding_text

DEFAULT_WIDTH = 120
NOTE_LINES = 3  # a note is cut to this many lines; the report says it in full
NOTE_MORE = " … (in full: harness report)"
ARM = Col("arm", wrap=True)
# the paired columns: label, metric, segment, difference and CI always; the others left out of a
# narrow console in this order
PAIRED = [ARM, Col("metric"), Col("segment"), Col("n", right=True, drop=3), Col("diff", right=True),
          Col(STATS.ci_label, right=True), Col("p", right=True, drop=5), Col("pHolm", right=True, drop=4),
          Col("W/T/L", right=True, drop=2)]
GAP = Col("gap", right=True, drop=1)


def console(stderr: bool = False) -> Console:
    """A console as wide as COLUMNS says, else the terminal, else 120 columns."""
    cols = os.environ.get("COLUMNS", "")
    tty = (sys.stderr if stderr else sys.stdout).isatty()
    width = int(cols) if cols.isdigit() and int(cols) > 20 else (None if tty else DEFAULT_WIDTH)
    return Console(width=width, stderr=stderr)


def fitted(title: str, cols: list[Col], rows: list[dict]) -> Fitted:
    """A titled table of `rows` (cells by column name) that fits the console (harness.report.fit)."""
    def build(shown: list[Col]) -> Table:
        t = table(shown)
        for r in rows:
            t.add_row(*[r.get(c.name, "") for c in shown])
        return t
    return Fitted(title, cols, build)


def _num(v, digits: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def short_segment(segment: str) -> str:
    """`turn_index>=2` as the tables say it, `t≥2`."""
    return segment.replace("turn_index", "t").replace(">=", "≥")


def _common(values: pd.Series) -> int:
    return int(values.mode().iloc[0]) if len(values) else 0


def metric_table(agg: pd.DataFrame, metric: str, labels: dict[str, str], title: str) -> Fitted:
    """Rows: arm labels; columns: all and the turn-index segments, headed by the number of measured
    turns and of unmeasured ones (`12u`) most arms have; a cell whose arm has other numbers says
    so (`n=45`, `3u`)."""
    sub = agg[agg["metric"] == metric].set_index(["arm_id", "segment"])
    segs = [s for s in TURN_SEGMENTS if s in set(sub.index.get_level_values(1))]
    cols, common = [ARM], {}
    for s in segs:
        at = sub.xs(s, level=1)
        measured = at[at["n"] > 0]
        common[s] = (_common(at["n"].astype(int)), _common(measured["n_unmeasured"].fillna(0).astype(int)))
        n, u = common[s]
        cols.append(Col(f"{short_segment(s)}\nn={n}" + (f"\n{u}u" if u else ""), right=True, wrap=True))
    rows = []
    for arm, label in labels.items():
        cells = {}
        for s, c in zip(segs, cols[1:]):
            if (arm, s) not in sub.index:
                cells[c.name] = "—"
                continue
            r = sub.loc[(arm, s)]
            n, nu = int(r["n"]), int(r["n_unmeasured"] or 0)
            extra = ([f"n={n}"] if n and n != common[s][0] else []) + ([f"{nu}u"] if n and nu != common[s][1] else [])
            cells[c.name] = (_num(r["mean"]) if n else "n/a") + (f" ({', '.join(extra)})" if extra else "")
        if any(v != "—" for v in cells.values()):
            rows.append({"arm": escape(label), **cells})
    return fitted(title, cols, rows)


def metric_tables(res, names: list[str], labels: dict[str, str], eval_set: str, run: str) -> list[Fitted]:
    return [metric_table(res.aggregates, m, labels, f"{m} on {eval_set} by turn index ({run}; u = unmeasured)")
            for m in names]


def _paired_row(label: str, metric: str, r, gap=None) -> dict:
    """One row of a paired table: a difference with its CI, raw and Holm p and wins/ties/losses, or
    `not measured` when no turn was (never `nan`)."""
    row = {"arm": escape(label), "metric": metric, "segment": short_segment(r.segment)}
    if not r.n_turns:
        return {**row, "n": "0", "diff": "n/a", STATS.ci_label: "not measured", "p": "—", "pHolm": "—", "W/T/L": "—",
                "gap": "—"}
    p, p_holm = p_cells(r)
    return {**row, "n": f"{r.n_turns}/{r.n_sessions}s", "diff": f"{r.diff:+.3f}",
            STATS.ci_label: f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]", "p": escape(p), "pHolm": escape(p_holm),
            "W/T/L": f"{r.wins}/{r.ties}/{r.losses}",
            "gap": "—" if gap is None or gap != gap else f"{gap:.0%}"}


def paired(pt, labels: dict[str, str], run: str | None = None) -> Fitted | None:
    if pt is None or pt.empty:
        return None
    ref = labels.get(pt["reference"].iloc[0], pt["reference"].iloc[0])
    where = f" ({run})" if run else ""
    rows = [_paired_row(labels.get(r.arm, r.arm), r.metric, r, getattr(r, "oracle_gap_closed", None))
            for r in pt.itertuples()]
    m = int(pt["holm_m"].max()) if "holm_m" in pt and len(pt) else 0
    return fitted(f"paired vs {ref}{where}: {STATS.said()}; {holm_said(m)}; W/T/L by direction",
                  [*PAIRED, GAP], rows)


def compare_tables(df: pd.DataFrame, what: str, families: str = "") -> list[Fitted]:
    """harness compare's tables: one per candidate run, named in its title (`what` says against
    what), a row per arm label, metric and segment; `families`: over what the Holm p are adjusted
    (harness.analysis.compare.families), said in each title with how CI and p are computed."""
    out = []
    for run, sub in df.groupby("candidate_run", sort=False):
        rows = [_paired_row(r.label, r.metric + {"higher": "↑", "lower": "↓"}.get(r.direction, ""), r)
                for r in sub.itertuples()]
        undirected = "; up/tie/down for a metric without ↑ or ↓" if (sub["direction"] == "none").any() else ""
        out.append(fitted(f"{run} {what} (W/T/L by each metric's direction{undirected}; {STATS.said()}"
                          + (f"; {families}" if families else "") + ")", PAIRED, rows))
    return out


def abstention(ab, labels: dict[str, str], run: str) -> Fitted | None:
    if ab is None or ab.empty:
        return None
    rates = [c for c in ab.columns if c.startswith("abstain_rate[")]
    cols = [ARM, Col("n", right=True, drop=1), Col("abstained", right=True, drop=2),
            Col("precision", right=True, drop=3), Col("recall", right=True, drop=4),
            *[Col(c[len("abstain_rate["):-1], right=True) for c in rates]]
    rows = [{"arm": escape(labels.get(r["arm_id"], r["arm_id"])), "n": str(r["n"]), "abstained": str(r["abstained"]),
             "precision": _num(r["precision"]), "recall": _num(r["recall"]),
             **{c.name: _num(r[f"abstain_rate[{c.name}]"]) for c in cols[5:]}} for r in ab.to_dict("records")]
    return fitted(f"abstention by answerability ({run})", cols, rows)


def rounds(per_turn, labels_df, labels: dict[str, str], run: str) -> Fitted | None:
    r = per_turn[per_turn["metric"] == "rounds_used"].merge(labels_df[["session_id", "turn_index"]])
    if r.empty:
        return None
    r = r.assign(t=r["turn_index"].map(bucket), r=r["value"].astype(int))
    tab = r.pivot_table(index=["arm_id", "t"], columns="r", values="value", aggfunc="count", fill_value=0)
    cols = [ARM, Col("turn"), *[Col(f"{c} round{'s' if c != 1 else ''}", right=True) for c in tab.columns]]
    rows = [{"arm": escape(labels.get(arm, arm)), "turn": ti, **{c.name: str(int(v)) for c, v in zip(cols[2:], row)}}
            for (arm, ti), row in tab.iterrows()]
    return fitted(f"turns by rounds used, per turn index ({run})", cols, rows)


def coinciding(co, labels: dict[str, str]) -> list[str]:
    """Arms whose top-10 lists are identical on every measured turn, said once per group."""
    return [f"[yellow]note:[/yellow] {escape(line)}" for line in coinciding_text(co, labels)]


def notes(res, manifest: Manifest, labels: dict[str, str], judged: bool) -> list[str]:
    """What limits the reading of these tables, in words (rich markup)."""
    out = []
    answered = res.per_turn[res.per_turn["metric"] == "answered"]
    if not answered.empty and not judged:
        from harness.metrics.registry import judged as judged_metrics

        out.append(f"{' and '.join(judged_metrics())}: not measured (no judgments; run `harness judge RUN` with a "
                   "judge endpoint)")
    if manifest.eval_set.pooled_corpus:
        out.append("[yellow]note:[/yellow] pooled corpus: every document is relevant to some turn, so absolute "
                   "scores are inflated; compare arms, not leaderboard numbers.")
    overall = res.aggregates[res.aggregates["segment"] == "all"]
    na = [a for a, n in overall.groupby("arm_id")["n"].max().items() if n == 0]
    out += [f"[yellow]note:[/yellow] {escape(labels.get(a, a))} is n/a on every turn of this set" for a in na]
    if manifest.repeats > 1:
        offline = [a["arm_id"] for a in manifest.arms if a["backends"] and set(a["backends"].values()) == {"offline"}]
        if offline:
            out.append(f"[yellow]note:[/yellow] {len(offline)} arm(s) use offline roles only; they are deterministic, "
                       "so their repeats are identical (spread 0 by construction).")
    return out


def under(tables: list, texts: list[str]) -> list[Wrapped]:
    """Notes printed under `tables`: wrapped at the widest table's width (the console's when there
    is none), each within NOTE_LINES lines."""
    c = console()
    width = max((c.measure(t).maximum for t in tables if t is not None), default=c.width)
    return [Wrapped(text, max_lines=NOTE_LINES, width=width, more=NOTE_MORE) for text in texts]


EXPLAIN = [ARM, Col("baseline", right=True, drop=1), Col("candidate", right=True, drop=2), Col("both", right=True),
           Col("would be", wrap=True), Col("power", wrap=True)]


def explain_tables(x: dict) -> list[Fitted]:
    """`harness gate --explain` (harness.analysis.explain): a table per check, titled with its
    metric, segment and the sessions it needs, a row per label: the sessions each run measures, what
    the check would be and, for a rule, the smallest drop it can show. Metric names, segments and
    labels stay whole at 80 columns: they are not squeezed into one table's columns."""
    groups: dict[tuple, list[dict]] = {}
    for r in x["rows"]:
        groups.setdefault((r["check"], r["metric"], r["segment"], r["need"]), []).append(r)
    out = []
    for (check, metric, segment, need), rows in groups.items():
        where = "both runs" if check.startswith("rule") else "the candidate"
        cells = [{"arm": escape(r["label"]), **{k: "—" if r[k] is None else str(r[k])
                                                  for k in ("baseline", "candidate", "both")},
                  "would be": escape(r["will"]), "power": escape(r.get("power") or "—")} for r in rows]
        cols = EXPLAIN if check.startswith("rule") else [c for c in EXPLAIN if c.name not in ("baseline", "both",
                                                                                               "power")]
        out.append(fitted(escape(f"{check}: {metric} [{segment}], needs {need} sessions measured in {where}"), cols,
                          cells))
    return out
