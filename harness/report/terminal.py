"""The scored tables rendered for the terminal (rich): metric by turn index, the paired
comparisons, abstention by answerability, rounds per turn index, notes. Rendering only: every
number comes from the scoring step's outputs (harness/metrics/score.py)."""
from __future__ import annotations

from rich.table import Table

from harness.report.table import bucket, rich_table


def metric_tables(res, names: list[str], eval_set: str, run: str) -> list[Table]:
    return [rich_table(res.aggregates, m, res.arms, f"{m} on {eval_set} by turn index ({run})") for m in names]


def paired(pt) -> Table | None:
    if pt is None or pt.empty:
        return None
    t = Table(title=f"paired vs {pt['reference'].iloc[0]} (session bootstrap 95% CI, randomization p, Holm)")
    for c in ("metric", "segment", "arm", "n_turns", "n_sessions", "diff", "95% CI", "p_holm", "W/T/L", "gap closed"):
        t.add_column(c, overflow="fold")
    for r in pt.itertuples():
        gap = getattr(r, "oracle_gap_closed", None)
        t.add_row(r.metric, r.segment, r.arm, str(r.n_turns), str(r.n_sessions), f"{r.diff:+.3f}",
                  f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]", f"{r.p_holm:.4f}", f"{r.wins}/{r.ties}/{r.losses}",
                  "—" if gap is None or gap != gap else f"{gap:.0%}")
    return t


def abstention(ab, run: str) -> Table | None:
    if ab is None or ab.empty:
        return None
    t = Table(title=f"abstention by answerability ({run})")
    for c in ab.columns:
        t.add_column(c, overflow="fold")
    for r in ab.itertuples(index=False):
        t.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r])
    return t


def rounds(per_turn, labels, run: str) -> Table | None:
    r = per_turn[per_turn["metric"] == "rounds_used"].merge(labels[["session_id", "turn_index"]])
    if r.empty:
        return None
    r = r.assign(t=r["turn_index"].map(bucket), r=r["value"].astype(int))
    tab = r.pivot_table(index=["arm_id", "t"], columns="r", values="value", aggfunc="count", fill_value=0)
    t = Table(title=f"rounds used per turn index ({run})")
    t.add_column("arm"), t.add_column("turn")
    for c in tab.columns:
        t.add_column(f"{c} round(s)")
    for (arm, ti), row in tab.iterrows():
        t.add_row(arm, ti, *[str(int(v)) for v in row])
    return t


def notes(res, manifest: dict, judged: bool) -> list[str]:
    """What limits the reading of these tables, in words (rich markup)."""
    out = []
    answered = res.per_turn[res.per_turn["metric"] == "answered"]
    if not answered.empty and not judged:
        out.append("faithfulness: not measured (no judgments; run `harness judge RUN` with a judge endpoint)")
    if (manifest.get("eval_set") or {}).get("pooled_corpus"):
        out.append("[yellow]note:[/yellow] pooled corpus: every document is relevant to some turn, so absolute "
                   "scores are inflated; compare arms, not leaderboard numbers.")
    na = res.aggregates[(res.aggregates["segment"] == "all") & (res.aggregates["n"] == 0)]["arm_id"].unique()
    out += [f"[yellow]note:[/yellow] {a} is n/a on every turn of this set" for a in na]
    if manifest.get("repeats", 1) > 1:
        offline = [a["arm_id"] for a in manifest["arms"] if a["backends"] and set(a["backends"].values()) == {"offline"}]
        if offline:
            out.append(f"[yellow]note:[/yellow] {len(offline)} arm(s) use offline roles only; they are deterministic, "
                       "so their repeats are identical (spread 0 by construction).")
    return out
