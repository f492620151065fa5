"""Which relevance labels a scoring uses, and how far an LLM's labels agree with people's.

`human` (the default): the eval set's labels as the run's snapshot holds them; a document nobody
labelled for a turn counts as not relevant. `human+llm`: the same, plus the grade an LLM gave
each such hole (`harness judge RUN --relevance`, harness/run/relevance.py), mapped to the eval
set's scale (the table's `qrel_grade`). A human label always wins; an LLM label only fills a hole
of a turn that has human labels (a turn without any stays unmeasured); a failed or missing LLM
label leaves the hole as it was. The choice is recorded in the scoring's stamp, kept when a stale
run is scored again, named by every table and report, and two runs scored differently are never
compared (harness/analysis/evidence.py).

Agreement: the LLM also grades a sample of pairs people did label (`purpose = agreement`); their
confusion matrix is a scoring table, and Cohen's kappa is computed from it (graded, on the eval
set's scale, and binary: relevant or not)."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from harness.errors import BadInput
from harness.roles.relevance import AGREEMENT, GRADES, HOLE, OK

HUMAN, HUMAN_LLM = "human", "human+llm"
QRELS = (HUMAN, HUMAN_LLM)
AGREEMENT_COLUMNS = ["human_grade", "llm_grade", "qrel_grade", "n"]


class UnknownQrels(BadInput, ValueError):
    """`--qrels` with an unknown name (exit 2)."""


def check_qrels(name: str) -> str:
    if name not in QRELS:
        from harness.yamlpos import did_you_mean

        raise UnknownQrels(f"--qrels {name!r}: unknown{did_you_mean(name, QRELS)} (known: {', '.join(QRELS)})")
    return name


def llm_holes(rel: pd.DataFrame | None) -> pd.DataFrame:
    """The LLM's usable grades of holes: session_id, turn_index, doc_id, qrel_grade."""
    cols = ["session_id", "turn_index", "doc_id", "qrel_grade"]
    if rel is None or not len(rel):
        return pd.DataFrame(columns=cols)
    ok = rel[(rel["purpose"] == HOLE) & (rel["status"] == OK) & rel["qrel_grade"].notna()]
    return ok[cols]


def with_llm_labels(labels: pd.DataFrame, rel: pd.DataFrame | None) -> tuple[pd.DataFrame, int]:
    """`labels` with the LLM's grades added to the qrels of measured turns, where no person
    labelled the document; and how many grades were added."""
    holes = llm_holes(rel)
    if not len(holes):
        return labels, 0
    by_turn: dict[tuple[str, int], dict[str, int]] = {}
    for s, t, d, g in holes.itertuples(index=False):
        by_turn.setdefault((s, int(t)), {})[d] = int(g)
    out, added = labels.copy(), 0
    qrels = out["qrels"].tolist()
    for i, (s, t, measured) in enumerate(zip(out["session_id"], out["turn_index"], out["qrels_measured"])):
        extra = by_turn.get((s, int(t)))
        if not extra or not measured:
            continue
        q = json.loads(qrels[i] or "{}")
        new = {d: g for d, g in extra.items() if d not in q}
        if new:
            qrels[i], added = json.dumps({**q, **new}, sort_keys=True), added + len(new)
    out["qrels"] = qrels
    return out, added


def agreement_table(rel: pd.DataFrame | None) -> pd.DataFrame:
    """The confusion counts of the LLM's grades against people's on the sampled labelled pairs."""
    if rel is None or not len(rel):
        return pd.DataFrame(columns=AGREEMENT_COLUMNS)
    ok = rel[(rel["purpose"] == AGREEMENT) & (rel["status"] == OK) & rel["human_grade"].notna()]
    if not len(ok):
        return pd.DataFrame(columns=AGREEMENT_COLUMNS)
    g = ok.groupby(["human_grade", "llm_grade", "qrel_grade"]).size().reset_index(name="n")
    return g.astype({c: "int64" for c in AGREEMENT_COLUMNS})[AGREEMENT_COLUMNS]


def cohen_kappa(pairs: dict[tuple[int, int], int]) -> float | None:
    """Cohen's kappa of (rater a, rater b) -> count, a being people. None when people's grades
    hold one category: kappa is then 0 whatever the other rater says, which says nothing."""
    n = sum(pairs.values())
    if not n or len({a for (a, _), c in pairs.items() if c}) < 2:
        return None
    cats = sorted({a for a, _ in pairs} | {b for _, b in pairs})
    po = sum(c for (a, b), c in pairs.items() if a == b) / n
    pa_ = {k: sum(c for (a, _), c in pairs.items() if a == k) / n for k in cats}
    pb_ = {k: sum(c for (_, b), c in pairs.items() if b == k) / n for k in cats}
    pe = sum(pa_[k] * pb_[k] for k in cats)
    return None if pe >= 1 else (po - pe) / (1 - pe)


@dataclass
class Agreement:
    n: int
    kappa: float | None  # graded: people's grade against the LLM's, mapped to the eval set's scale
    kappa_binary: float | None  # relevant (grade >= 1) or not
    matrix: pd.DataFrame  # people's grade (rows) x the LLM's 0-3 grade (columns), counts

    def line(self) -> str:
        def k(v):
            return f"{v:.2f}" if v is not None else "undefined"
        why = "" if self.n and self.kappa_binary is not None else (
            " (no labelled pair was graded)" if not self.n else
            " (people's grades in the sample are all relevant: an eval set that labels relevant documents only; "
            "a kappa would be 0 whatever the LLM said)")
        return (f"agreement with people's labels on {self.n} labelled pair(s): Cohen's kappa {k(self.kappa)} "
                f"(graded), {k(self.kappa_binary)} (relevant or not){why}")


def agreement(table: pd.DataFrame | None) -> Agreement | None:
    """Kappa and confusion matrix from the agreement table; None when there is none."""
    if table is None or not len(table):
        return None
    graded = table.groupby(["human_grade", "qrel_grade"])["n"].sum()
    binary: dict[tuple[int, int], int] = {}
    for (h, q), c in graded.items():
        key = (int(h >= 1), int(q >= 1))
        binary[key] = binary.get(key, 0) + int(c)
    matrix = table.pivot_table(index="human_grade", columns="llm_grade", values="n", aggfunc="sum", fill_value=0)
    matrix = matrix.reindex(columns=sorted(set(GRADES) | set(matrix.columns)), fill_value=0)  # every LLM grade
    return Agreement(int(table["n"].sum()), cohen_kappa({(int(h), int(q)): int(c) for (h, q), c in graded.items()}),
                     cohen_kappa(binary), matrix)
