"""Score TREC-format runs with the harness's own metric code, following trec_eval's conventions:
documents ordered by score descending, then document id descending; relevant means grade >= 1;
queries in the qrels but absent from the run are left out of the means unless `complete`
(trec_eval -c) scores them 0. Queries without any relevant document are not scored (trec_eval
scores them 0 and counts them in its means). Measures are named as the registry resolves them
(`P_10`, `P@10` and `precision@10` are one measure) and printed by their canonical names. `-J`
(judged_only) scores condensed rankings as trec_eval -J does: documents without a judgment, or
with a negative grade, are removed before any cutoff. Reading
run files is the TREC importer's (harness/importers/trec.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.errors import BadInput
from harness.importers.trec import ranked, read_trec_qrels, read_trec_run
from harness.metrics.families.ir import score_rankings
from harness.metrics.registry import LIST_COMMAND, on_request, resolve


def condensed(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The run with every document dropped that has no judgment for its query, or a negative grade
    (trec_eval -J: "judged documents only"): the measures then cut the condensed ranking."""
    return {q: {d: s for d, s in docs.items() if qrels.get(q, {}).get(d, -1) >= 0} for q, docs in run.items()}


def score_run(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics: list[str],
              complete: bool = False, judged_only: bool = False) -> pd.DataFrame:
    """Per-query values (qid, metric, value) plus the means under qid 'all'; `judged_only`
    scores the condensed rankings (trec_eval -J)."""
    if judged_only:
        run = condensed(qrels, run)
    qids = [q for q in qrels if any(g >= 1 for g in qrels[q].values())]
    coverage = {"with_relevant": len(qids), "missing": sum(q not in run for q in qids), "complete": complete}
    if not complete:
        qids = [q for q in qids if q in run]
    names = []
    for m in metrics:
        metric = resolve(m)
        if not on_request(metric):
            raise BadInput(f"-m {m}: trec-eval scores ranking measures only (`{LIST_COMMAND}`: families ir and pool)")
        names.append(metric.name)
    names = list(dict.fromkeys(names))
    labels = pd.DataFrame({"session_id": qids, "turn_index": 1, "qrels": [json.dumps(qrels[q]) for q in qids],
                           "qrels_measured": True})
    if not qids:
        empty = pd.DataFrame(columns=["qid", "metric", "value"])
        empty.attrs["coverage"] = coverage
        return empty
    rankings = [{"session_id": q, "turn_index": 1, "ranking": ranked(run.get(q, {}))} for q in qids]
    pt = score_rankings(labels, rankings, names)[["session_id", "metric", "value"]].rename(columns={"session_id": "qid"})
    pt["qid"] = pt["qid"].astype(object)
    pt["metric"] = pt["metric"].astype(object)
    pt = pt.sort_values("metric", key=lambda m: m.map(names.index), kind="stable")  # in the order asked
    means = pt.groupby("metric", sort=False)["value"].mean().reset_index().assign(qid="all")
    out = pd.concat([pt, means[["qid", "metric", "value"]]], ignore_index=True)
    out.attrs["coverage"] = coverage
    return out


def coverage_note(df: pd.DataFrame) -> str | None:
    """What the means leave out: the qrels' queries (with a relevant document) the run lacks, and
    trec_eval's rule for them (-c scores them 0)."""
    c = df.attrs.get("coverage")
    if not c or not c["missing"]:
        return None
    n, of = c["missing"], c["with_relevant"]
    if c["complete"]:
        return f"-c: {n} of the qrels' {of} queries with a relevant document are missing from the run, scored 0 in the means"
    return (f"the run lacks {n} of the qrels' {of} queries with a relevant document: left out of the means and of "
            "num_q, as trec_eval does; -c scores them as 0")


def format_trec(df: pd.DataFrame, per_query: bool = True) -> str:
    lines = []
    rows = df if per_query else df[df["qid"] == "all"]
    for metric in dict.fromkeys(rows["metric"]):
        for r in rows[rows["metric"] == metric].itertuples():
            lines.append(f"{metric:<22}\t{r.qid}\t{r.value:.4f}")
    n = df[df["qid"] != "all"]["qid"].nunique()
    lines.append(f"{'num_q':<22}\tall\t{n}")
    return "\n".join(lines)


def trec_eval(qrels_path: Path, run_path: Path, metrics: list[str], complete: bool = False,
              judged_only: bool = False) -> pd.DataFrame:
    return score_run(read_trec_qrels(qrels_path), read_trec_run(run_path), metrics, complete, judged_only)
