"""The scored tables rendered for the terminal (rich), by arm label and within the console's
width (COLUMNS, else the terminal's, else 120): a metric per turn index, the paired comparisons,
abstention by answerability, rounds per turn index, arms that coincide, notes. Rendering only:
every number comes from the scoring step's outputs (harness/metrics/score.py)."""
from __future__ import annotations

import math
import os
import sys

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.run.record import Manifest
from harness.report.fit import Wrapped
from harness.report.table import TURN_SEGMENTS, bucket, coinciding_text

DEFAULT_WIDTH = 120


def console(stderr: bool = False) -> Console:
    """A console as wide as COLUMNS says, else the terminal, else 120 columns."""
    cols = os.environ.get("COLUMNS", "")
    tty = (sys.stderr if stderr else sys.stdout).isatty()
    width = int(cols) if cols.isdigit() and int(cols) > 20 else (None if tty else DEFAULT_WIDTH)
    return Console(width=width, stderr=stderr)


def _table(title: str, label_col: str = "arm") -> Table:
    t = Table(title=title, title_justify="left", pad_edge=False)
    t.add_column(label_col, no_wrap=False, overflow="fold", ratio=None)
    return t


def _num(v, digits: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def metric_table(agg: pd.DataFrame, metric: str, labels: dict[str, str], title: str) -> Table:
    """Rows: arm labels; columns: all and the turn-index segments, the number of measured turns
    in the header; a cell whose arm measured another number of turns says so (`n=45`), and
    unmeasured turns are counted (`3u`)."""
    sub = agg[agg["metric"] == metric].set_index(["arm_id", "segment"])
    segs = [s for s in TURN_SEGMENTS if s in set(sub.index.get_level_values(1))]
    t = _table(title)
    common = {}
    for s in segs:
        ns = sub.xs(s, level=1)["n"].astype(int)
        common[s] = int(ns.mode().iloc[0]) if len(ns) else 0
        t.add_column(f"{s.replace('turn_index', 't').replace('>=', '≥')} n={common[s]}", justify="right")
    for arm, label in labels.items():
        cells = []
        for s in segs:
            if (arm, s) not in sub.index:
                cells.append("—")
                continue
            r = sub.loc[(arm, s)]
            n, nu = int(r["n"]), int(r["n_unmeasured"] or 0)
            cell = _num(r["mean"]) if n else "n/a"
            extra = ([f"n={n}"] if n and n != common[s] else []) + ([f"{nu}u"] if nu and n else [])
            cells.append(cell + (f" ({', '.join(extra)})" if extra else ""))
        if any(c != "—" for c in cells):
            t.add_row(escape(label), *cells)
    return t


def metric_tables(res, names: list[str], labels: dict[str, str], eval_set: str, run: str) -> list[Table]:
    return [metric_table(res.aggregates, m, labels, f"{m} on {eval_set} by turn index ({run}; u = unmeasured)")
            for m in names]


def paired(pt, labels: dict[str, str]) -> Table | None:
    if pt is None or pt.empty:
        return None
    ref = labels.get(pt["reference"].iloc[0], pt["reference"].iloc[0])
    t = _table(f"paired vs {ref}: session bootstrap 95% CI, randomization p (Holm), W/T/L by direction")
    for c in ("metric", "segment", "n", "diff", "95% CI", "p", "W/T/L", "gap"):
        t.add_column(c, justify="right" if c not in ("metric", "segment") else "left")
    for r in pt.itertuples():
        gap = getattr(r, "oracle_gap_closed", None)
        seg = r.segment.replace("turn_index", "t").replace(">=", "≥")
        if not r.n_turns:  # nothing measured for this arm here: not a number to read
            t.add_row(escape(labels.get(r.arm, r.arm)), r.metric, seg, "0", "n/a", "not measured", "—", "—", "—")
            continue
        t.add_row(escape(labels.get(r.arm, r.arm)), r.metric, seg,
                  f"{r.n_turns}/{r.n_sessions}s", f"{r.diff:+.3f}", f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]",
                  f"{r.p_holm:.3f}", f"{r.wins}/{r.ties}/{r.losses}", "—" if gap is None or gap != gap else f"{gap:.0%}")
    return t


def abstention(ab, labels: dict[str, str], run: str) -> Table | None:
    if ab is None or ab.empty:
        return None
    rates = [c for c in ab.columns if c.startswith("abstain_rate[")]
    t = _table(f"abstention by answerability ({run})")
    for c in ("n", "abstained", "precision", "recall", *[c[len("abstain_rate["):-1] for c in rates]):
        t.add_column(c, justify="right")
    for r in ab.to_dict("records"):
        t.add_row(escape(labels.get(r["arm_id"], r["arm_id"])), str(r["n"]), str(r["abstained"]), _num(r["precision"]),
                  _num(r["recall"]), *[_num(r[c]) for c in rates])
    return t


def rounds(per_turn, labels_df, labels: dict[str, str], run: str) -> Table | None:
    r = per_turn[per_turn["metric"] == "rounds_used"].merge(labels_df[["session_id", "turn_index"]])
    if r.empty:
        return None
    r = r.assign(t=r["turn_index"].map(bucket), r=r["value"].astype(int))
    tab = r.pivot_table(index=["arm_id", "t"], columns="r", values="value", aggfunc="count", fill_value=0)
    t = _table(f"turns by rounds used, per turn index ({run})")
    t.add_column("turn")
    for c in tab.columns:
        t.add_column(f"{c} round{'s' if c != 1 else ''}", justify="right")
    for (arm, ti), row in tab.iterrows():
        t.add_row(escape(labels.get(arm, arm)), ti, *[str(int(v)) for v in row])
    return t


def coinciding(co, labels: dict[str, str]) -> list[str]:
    """Arms whose top-10 lists are identical on every measured turn, said once per group."""
    return [f"[yellow]note:[/yellow] {escape(line)}" for line in coinciding_text(co, labels)]


def notes(res, manifest: Manifest, labels: dict[str, str], judged: bool) -> list[str]:
    """What limits the reading of these tables, in words (rich markup)."""
    out = []
    answered = res.per_turn[res.per_turn["metric"] == "answered"]
    if not answered.empty and not judged:
        out.append("faithfulness: not measured (no judgments; run `harness judge RUN` with a judge endpoint)")
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


def compare_table(df: pd.DataFrame, title: str) -> Table:
    """harness compare's table: one row per pair, metric and segment."""
    t = _table(title)
    for c in ("run", "metric", "segment", "n", "diff", "95% CI", "p", "W/T/L"):
        t.add_column(c, justify="right" if c in ("n", "diff", "95% CI", "p", "W/T/L") else "left")
    for r in df.itertuples():
        arrow = {"higher": "↑", "lower": "↓"}.get(r.direction, "")
        wtl = f"{r.wins}/{r.ties}/{r.losses}" + (" (up/tie/down)" if r.direction == "none" else "")
        t.add_row(escape(r.label), escape(r.candidate_run), r.metric + arrow, r.segment.replace("turn_index", "t").replace(">=", "≥"),
                  f"{r.n_turns}/{r.n_sessions}s", f"{r.diff:+.3f}", f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]",
                  f"{r.p_holm:.3f}", wtl)
    return t


def gate_summary(v: dict) -> list:
    """The gate's verdict for the terminal (gate.md holds the full Markdown): what was compared,
    what was not, and every check in a table that fits the console."""
    icon = {"pass": "[green]pass[/green]", "regression": "[red]REGRESSION[/red]",
            "infrastructure": "[yellow]INFRASTRUCTURE[/yellow]"}[v["verdict"]]
    out: list = [f"Gate: {icon}  baseline {escape(v['baseline'])} → candidate {escape(v['candidate'])}"
                 + (f" ({escape(v['scope'])})" if v.get("scope") else "")]
    if v.get("not_compared"):
        out.append(f"[yellow]not compared (coverage: subset):[/yellow] {escape(v['not_compared'])}")
    out += [f"[cyan]note:[/cyan] {escape(n)}" for n in v.get("evidence", [])]
    for p in v["pairs"]:
        out.append(escape(f"  {p['label']}: " + ("; ".join(p["changes"]) if p["changes"] else
                                                 "no change in parameters or models")))
    out += [f"[yellow]warning:[/yellow] {escape(w)}" for w in v.get("warnings", []) + v["infrastructure"]]
    t = Table(title="checks (n/a: the metric does not apply; smallest detectable change from the baseline's spread)",
              title_justify="left", pad_edge=False)
    for c in ("check", "result", "detail"):
        t.add_column(c, overflow="fold")
    style = {"pass": "green", "fail": "red", "insufficient": "red", "n/a": "dim"}
    for r in v["results"]:
        mde = r.get("mde")
        extra = "" if r["kind"] != "rule" or r["status"] == "n/a" else \
            ("; detectable: not estimable" if mde is None or mde != mde else f"; detectable: {mde:.4f}")
        t.add_row(escape(r["name"]), f"[{style[r['status']]}]{r['status']}[/]", escape(r["detail"] + extra))
    out.append(t)
    return out


FAILED_SHOWN, NAMED = 10, 3  # failed checks listed before the gate's verdict line; named in it


def gate_ending(code: int, v: dict | None, meaning: dict[int, str]) -> list:
    """The last lines of `harness gate`: each failed check with its detail (at most FAILED_SHOWN,
    each within three lines), then the verdict line: the verdict, the exit code and its meaning,
    and the failed checks by name (or why nothing was gated)."""
    head = f"Gate: {'pass' if code == 0 else 'REGRESSION' if code == 1 else meaning.get(code, 'error')}"
    head += f" (exit {code}: {meaning.get(code, 'error')})"
    if v is None:
        return [f"{head}: nothing was gated; the error above says why"]
    results = v["results"]
    failed = [r for r in results if not r["ok"]]
    out: list = [Wrapped(f"[red]failed:[/red] {escape(r['name'])}: {escape(r['detail'])}", max_lines=3)
                 for r in failed[:FAILED_SHOWN]]
    if len(failed) > FAILED_SHOWN:
        out.append(f"… and {len(failed) - FAILED_SHOWN} more failed checks (gate.md lists every check)")
    if v["verdict"] == "infrastructure":
        head = f"Gate: INFRASTRUCTURE (exit {code}: {meaning[code]}): {v['infrastructure'][0]}" \
            if v["infrastructure"] else head
    if not failed:
        return out + [f"{head}; {len(results)} checks, none failed"]
    names = "; ".join(r["name"] for r in failed[:NAMED]) + (f" and {len(failed) - NAMED} more" if len(failed) > NAMED
                                                           else "")
    return out + [f"{head}: {len(failed)} of {len(results)} checks failed: {names}"]


def compare_ending(df: pd.DataFrame, against: str, alpha: float = 0.05, per_arm: int = 3) -> str:
    """The last line of `harness compare`: the arms (labels; with their run when several runs were
    compared) whose difference is significant (Holm p < alpha) on some metric and segment, with
    those differences (at most `per_arm` each), then those that are not."""
    several = df["candidate_run"].nunique() > 1 if "candidate_run" in df else False
    sig, not_sig = [], []
    for (run, label), rows in df.groupby(["candidate_run", "label"], sort=False) if several else \
            df.assign(candidate_run="").groupby(["candidate_run", "label"], sort=False):
        name = f"{label} in {run}" if several else label
        hits = rows[(rows["n_turns"] > 0) & (rows["p_holm"] < alpha)]
        if hits.empty:
            not_sig.append(name)
            continue
        said = []
        for r in hits.head(per_arm).itertuples():
            seg = "" if r.segment == "all" else f" [{_seg(r.segment)}]"
            good = r.diff * {"higher": 1, "lower": -1}.get(r.direction, 0)
            said.append(f"{r.metric}{seg} {r.diff:+.3f}" + (" better" if good > 0 else " worse" if good < 0 else ""))
        sig.append(f"{name} ({', '.join(said)}{', …' if len(hits) > per_arm else ''})")
    n = len(sig) + len(not_sig)
    if not sig:
        return f"compare: no arm differs significantly from {against} (Holm p < {alpha}); {n} arms compared"
    return (f"compare: {len(sig)} of {n} arms differ significantly from {against} (Holm p < {alpha}): "
            + "; ".join(sig) + (f"; not significantly: {', '.join(not_sig)}" if not_sig else ""))


def _seg(segment: str) -> str:
    return segment.replace("turn_index", "t").replace(">=", "≥")
