"""Which relevance labels a scoring uses, and how far an LLM's labels agree with people's.

`human` (the default): the eval set's labels as the run's snapshot holds them; a document nobody
labelled for a turn counts as not relevant. `human+llm`: the same, plus the grade an LLM gave
each such hole (`harness judge RUN --relevance`, harness/steps/relevance.py), mapped to the eval
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
from harness.store.folder import RELEVANCE_LABELS, RunFolderError
from harness.store.holes import holes, top_grade

HUMAN, HUMAN_LLM = "human", "human+llm"
QRELS = (HUMAN, HUMAN_LLM)
AGREEMENT_COLUMNS = ["human_grade", "llm_grade", "qrel_grade", "n"]


class UnknownQrels(BadInput, ValueError):
    """`--qrels` with an unknown name (exit 2)."""


def check_qrels(name: str) -> str:
    name = name.strip().lower()
    if name not in QRELS:
        from harness.yamlpos import did_you_mean

        raise UnknownQrels(f"--qrels {name!r}: unknown{did_you_mean(name, QRELS)} (known: {', '.join(QRELS)})")
    return name


COLUMNS = {"session_id", "turn_index", "doc_id", "purpose", "status", "llm_grade", "qrel_grade", "human_grade",
           "model", "prompt", "depth", "grade_map"}  # what scoring reads of the relevance labels


class RelevanceLabelsError(RunFolderError):
    """Relevance labels scoring cannot use (exit 2), named with why."""


def read_relevance(folder) -> pd.DataFrame | None:
    """The run folder's relevance labels, checked: the columns scoring reads, one row per (turn,
    document, purpose), grades within their scales; None when there are none."""
    if not folder.has_relevance_labels():
        return None
    rel = folder.relevance_labels()
    where = str(folder.path / RELEVANCE_LABELS)
    lack = sorted(COLUMNS - set(rel.columns))
    if lack:
        raise RelevanceLabelsError(f"{where}: no column {', '.join(lack)} (not written by `harness judge --relevance`)")
    twice = rel.duplicated(["session_id", "turn_index", "doc_id", "purpose"])
    if twice.any():
        r = rel[twice].iloc[0]
        raise RelevanceLabelsError(f"{where}: ({r['session_id']}, turn {r['turn_index']}, {r['doc_id']}, "
                                   f"{r['purpose']}) has {int(twice.sum()) + 1} rows; one is expected")
    ok = rel[rel["status"] == OK]
    bad = ok[~ok["llm_grade"].isin(GRADES) | ok["qrel_grade"].isna() | (ok["qrel_grade"] < 0)]
    if len(bad):
        r = bad.iloc[0]
        raise RelevanceLabelsError(f"{where}: row ({r['session_id']}, turn {r['turn_index']}, {r['doc_id']}): "
                                   f"llm_grade {r['llm_grade']} / qrel_grade {r['qrel_grade']} outside the scales "
                                   f"(0-3 / 0 or more)")
    return rel


@dataclass
class LLMLabels:
    """What `human+llm` added to people's labels, recorded in the scoring's stamp."""

    model: str
    prompt: str
    grade_map: str
    depth: int
    holes: int  # documents in the top `depth` of a final ranking nobody labelled, in the traces as they are
    graded: int  # of those, graded by the LLM (the rest count as not relevant, as under `human`)

    def identity(self) -> tuple:
        return self.model, self.prompt, self.grade_map, self.depth

    def said(self) -> str:
        return (f"{self.graded} of {self.holes} hole(s) in the top {self.depth} graded by {self.model} "
                f"(prompt {self.prompt}, grade map {self.grade_map})")


def _identity(hole_rows: pd.DataFrame, where: str) -> tuple[str, str, str, int]:
    ids = hole_rows[["model", "prompt", "grade_map", "depth"]].drop_duplicates()
    if len(ids) != 1:
        raise RelevanceLabelsError(f"{where}: the LLM's grades come from {len(ids)} different (model, prompt, grade "
                                   "map, depth) settings; label the run again with one")
    m, p, g, d = ids.iloc[0].tolist()
    return str(m), str(p), str(g), int(d)


def with_llm_labels(folder, labels: pd.DataFrame) -> tuple[pd.DataFrame, LLMLabels]:
    """`labels` with the LLM's grades of the run's holes added to the qrels of measured turns
    (people's label wins; only documents that are holes of these traces at the labels' depth:
    a grade for anything else is not used), and what was added. RelevanceLabelsError when the
    folder has no usable LLM grade or a grade above the eval set's scale (people's top grade)."""
    rel = read_relevance(folder)
    where = str(folder.path / RELEVANCE_LABELS)
    ok = rel[(rel["purpose"] == HOLE) & (rel["status"] == OK)] if rel is not None else None
    if ok is None or not len(ok):
        raise RelevanceLabelsError(f"{folder.path}: no LLM relevance grade to score with (`--qrels human+llm`): "
                                   "run `harness judge RUN --relevance` with an endpoint first, or score with "
                                   "--qrels human")
    model, prompt, gmap, depth = _identity(ok, where)
    max_grade = top_grade(labels["qrels"])
    if int(ok["qrel_grade"].max()) > max_grade:
        raise RelevanceLabelsError(f"{where}: qrel_grade {int(ok['qrel_grade'].max())} above the eval set's scale "
                                   f"(people's grades go to {max_grade}): label again with a --grade-map within it")
    turns = {(s, int(t)): {"qrels": q} for s, t, q, m in
             zip(labels["session_id"], labels["turn_index"], labels["qrels"], labels["qrels_measured"]) if m}
    now = holes(folder, turns, depth)
    by_turn: dict[tuple[str, int], dict[str, int]] = {}
    for s, t, d, g in ok[["session_id", "turn_index", "doc_id", "qrel_grade"]].itertuples(index=False):
        if (s, int(t), d) in now:
            by_turn.setdefault((s, int(t)), {})[d] = int(g)
    out = labels.copy()
    out["qrels"] = [json.dumps({**json.loads(q or "{}"), **by_turn[(s, int(t))]}, sort_keys=True)
                    if (s, int(t)) in by_turn else q
                    for s, t, q in zip(out["session_id"], out["turn_index"], out["qrels"])]
    graded = sum(len(v) for v in by_turn.values())
    if not graded:
        raise RelevanceLabelsError(f"{where}: none of its {len(ok)} LLM grade(s) is for a hole of these traces in "
                                   f"their top {depth} (labels of another run, or of traces replaced since): run "
                                   "`harness judge RUN --relevance` again")
    return out, LLMLabels(model, prompt, gmap, depth, len(now), graded)


def scored_labels(stamp: dict | None) -> tuple[str, LLMLabels | None]:
    """The relevance labels a scoring's stamp records: `human` or `human+llm`, and what the LLM's
    added (None for `human`, and for a stamp written before relevance labels existed)."""
    st = stamp or {}
    return st.get("qrels", HUMAN), (LLMLabels(**st["llm"]) if st.get("llm") else None)


def agreement_table(folder) -> pd.DataFrame:
    """The confusion counts of the LLM's grades against people's on the sampled labelled pairs."""
    rel = read_relevance(folder)
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
    relevant_both: int = 0  # pairs both people and the LLM (mapped to the eval set's scale) call relevant

    def line(self) -> str:
        def k(v):
            return f"{v:.2f}" if v is not None else "undefined"
        why = "" if self.n and self.kappa_binary is not None else (
            " (no labelled pair was graded)" if not self.n else
            " (people's grades in the sample are all relevant: an eval set that labels relevant documents only; "
            f"a kappa would be 0 whatever the LLM said; the LLM called {self.relevant_both} of them relevant)"
            if all(g >= 1 for g in self.matrix.index) else
            " (people's grades in the sample are all not relevant: a kappa would be 0 whatever the LLM said)")
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
                     cohen_kappa(binary), matrix, binary.get((1, 1), 0))
