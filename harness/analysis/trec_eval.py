"""Score TREC-format runs with the harness's own metric code, following trec_eval's conventions:
documents ordered by score descending, then document id descending; relevant means grade >= 1;
queries in the qrels but absent from the run are left out of the means unless `complete`
(trec_eval -c) scores them 0. Queries without any relevant document are not scored (trec_eval
scores them 0 and counts them in its means). Measures are named as the registry resolves them
(`P_10`, `P@10` and `precision@10` are one measure; trec_eval's `P.5,10` is P_5 and P_10) and
printed by trec_eval's names where trec_eval has the measure (`P_10`, `recip_rank`), else by the
registry's (`mrr@10`, `judged@10`), so the output diffs with trec_eval's; `all_trec` is the measures
of trec_eval's all_trec this harness has, in trec_eval's order, and names the others. `-J`
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
from harness.metrics.registry import LIST_COMMAND, lookup, on_request, resolve


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
    coverage["scored"] = len(qids)
    names = []
    for m in metrics:
        if m == NUM_Q:
            continue
        metric = resolve(m)
        if not on_request(metric):
            raise BadInput(f"-m {m}: trec-eval scores ranking measures only (`{LIST_COMMAND}`: families ir and pool)")
        names.append(metric.name)
    names = list(dict.fromkeys(names))
    labels = pd.DataFrame({"session_id": qids, "turn_index": 1, "qrels": [json.dumps(qrels[q]) for q in qids],
                           "qrels_measured": True})
    if not qids or not names:
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


# trec_eval's own spelling of each measure it has, by the registry's name (`_k` carries the
# cutoff): what trec-eval prints. Here, not in the registry, whose module is part of the scoring
# code's hash; the registry reads these spellings too (ALIASES), a test keeps them the same measure.
TREC_EVAL = {"precision@k": "P_k", "map@k": "map_cut_k", "ndcg@k": "ndcg_cut_k", "recall@k": "recall_k",
             "success@k": "success_k", "unjudged@k": "unj_k", "mrr": "recip_rank", "rprec": "Rprec", "map": "map",
             "bpref": "bpref", "ndcg": "ndcg"}


def trec_name(name: str) -> str | None:
    """trec_eval's name of a canonical metric name (`precision@10` -> `P_10`), None when trec_eval
    has no such measure (`mrr@10`, `judged@10`)."""
    stem, at, k = name.partition("@")
    if at:
        spelled = TREC_EVAL.get(f"{stem}@k")
        return None if spelled is None or not k.isdigit() else spelled[:-1] + k
    return TREC_EVAL.get(name)


_CUTS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
_RECALLS = [f"{r / 10:.2f}" for r in range(11)]
# what trec_eval -m all_trec prints, in its order (trec_eval 9.0.8, tests/fixtures/trec_eval/out.test.aq)
ALL_TREC = ("runid num_q num_ret num_rel num_rel_ret map gm_map Rprec bpref recip_rank".split()
            + [f"iprec_at_recall_{r}" for r in _RECALLS] + [f"P_{k}" for k in _CUTS] + ["relstring"]
            + [f"recall_{k}" for k in _CUTS] + ["infAP", "gm_bpref"]
            + [f"Rprec_mult_{m / 10:.2f}" for m in range(2, 21, 2)]
            + "utility 11pt_avg binG G ndcg ndcg_rel Rndcg".split() + [f"ndcg_cut_{k}" for k in _CUTS]
            + [f"map_cut_{k}" for k in _CUTS] + [f"relative_P_{k}" for k in _CUTS] + ["success_1", "success_5", "success_10"]
            + "set_P set_relative_P set_recall set_map set_F num_nonrel_judged_ret rbp rbp_resid".split()
            + ["unj_5", "unj_10", "unj_20"])
NUM_Q = "num_q"


def _has(name: str) -> bool:
    """Whether a trec_eval measure name is one this harness computes under trec_eval's meaning."""
    m = lookup(name)
    return name == NUM_Q or (m is not None and on_request(m) and trec_name(m.name) == name)


def expand(asked: list[str]) -> tuple[list[str], list[str]]:
    """The measures `-m` names: `all_trec` as the ones of trec_eval's all_trec this harness has,
    trec_eval's `NAME.a,b` as NAME_a and NAME_b, others as written; and the all_trec measures it
    lacks (to be named)."""
    out, lacking = [], []
    for m in asked:
        if m.strip().lower() == "all_trec":
            out += [n for n in ALL_TREC if _has(n)]
            lacking += [n for n in ALL_TREC if not _has(n)]
        elif "." in m and m.partition(".")[2].replace(",", "").isdigit():
            stem, _, cuts = m.partition(".")
            out += [f"{stem}_{c}" for c in cuts.split(",") if c]
        else:
            out.append(m)
    return list(dict.fromkeys(out)), lacking


def shown(name: str) -> str:
    """A canonical metric name as trec-eval prints it: trec_eval's name where it has the measure."""
    return trec_name(name) or name


def format_trec(df: pd.DataFrame, per_query: bool = True, num_q: bool = True) -> str:
    """trec_eval's layout: with `per_query`, each query's measures (queries in trec_eval's order,
    by id), then `all`: num_q first (when `num_q`: trec_eval prints it in all_trec and when asked),
    then the means; names padded to 22 columns, values to 4 decimals."""
    lines = []
    names = list(dict.fromkeys(df["metric"]))
    by = {(r.qid, r.metric): r.value for r in df.itertuples()}
    qids = sorted(q for q in dict.fromkeys(df["qid"]) if q != "all") if per_query else []
    for qid in qids:
        lines += [f"{shown(m):<22}\t{qid}\t{by[(qid, m)]:.4f}" for m in names if (qid, m) in by]
    if num_q:
        lines.append(f"{NUM_Q:<22}\tall\t{df.attrs['coverage']['scored']}")
    lines += [f"{shown(m):<22}\tall\t{by[('all', m)]:.4f}" for m in names if ("all", m) in by]
    return "\n".join(lines)


def trec_eval(qrels_path: Path, run_path: Path, metrics: list[str], complete: bool = False,
              judged_only: bool = False) -> pd.DataFrame:
    return score_run(read_trec_qrels(qrels_path), read_trec_run(run_path), metrics, complete, judged_only)
