"""The drill-down's turn tables, said once: what each arm's cell shows is compared with the cells
to its left, so that a cell the same as another arm's says `= that arm` instead of repeating it
(queries, filters, verdicts, top hits, answer, scores), a query the same as the user's turn or as
a query shown to its left says so, a document's title is shown where it first appears in the
turn (the relevant documents above the table come first), and a row no arm fills (filters,
verdicts, answers) is left out. Formatting only: every value shown comes from the arms' cells."""
from __future__ import annotations

ROWS = ("queries", "filters", "verdict", "hits", "answer", "scores")  # the rows of a turn's table


def cell_keys(a: dict) -> dict[str, tuple]:
    """What each row of a turn's table shows of an arm, as a key to compare arms by; () where the
    cell is empty."""
    verdicts = tuple((r["round"], r["verdict"], r["verdict_reason"]) for r in a["rounds"]) if a["multi_round"] else ()
    verdict = (a["not_applicable"], a["error"], a["fallback"], a["turn_class"], verdicts, a["verdict"],
               a["verdict_reason"], a["clarify"])
    filters = (tuple((f["text"], f["account"]) for f in a["filters"]), tuple(a["filters_removed"]), tuple(a["violations"]))
    return {"queries": tuple((r["round"], tuple(r["queries"])) for r in a["rounds"] if r["queries"]),
            "filters": filters if any(filters) else (), "verdict": verdict if any(verdict) else (),
            "hits": tuple(h["doc_id"] for h in a["hits"]),
            "answer": (a["answer"], a["abstained"]) if a["answer"] else (),
            "scores": tuple((c["metric"], c["value"], c["baseline"], c["worse"]) for c in a["scores"])}


def same_cells(arms: list[dict]) -> dict[str, bool]:
    """Set each arm's `same`: per row, the label of the first arm left of it whose cell is the same,
    or None. Returns which rows any arm fills."""
    first: dict[str, dict] = {}
    filled = dict.fromkeys(ROWS, False)  # every row named, also on a turn no arm has a trace for
    for a in arms:
        if a["missing"]:
            continue
        a["same"] = {}
        for row, key in cell_keys(a).items():
            a["same"][row] = first.setdefault(row, {}).get(key) if key else None
            if key:
                first[row].setdefault(key, a["label"])
            filled[row] = filled.get(row, False) or bool(key)
    return filled


def _shown(arms: list[dict], row: str) -> list[dict]:
    """The arms whose cell of `row` is shown in full (not missing, not `= another arm`)."""
    return [a for a in arms if not a["missing"] and not a["same"][row]]


def query_refs(arms: list[dict], user: str) -> None:
    """Each round's `shown`: its queries, each as text or as what it repeats ({"same": "the user's
    turn"} or {"same": an arm's label}) when the user's turn or a query shown to its left is the same."""
    seen: dict[str, str] = {}
    for a in _shown(arms, "queries"):
        for r in a["rounds"]:
            r["shown"] = []
            for q in r["queries"]:
                same = "the user's turn" if q.strip() == user.strip() else seen.get(q)
                r["shown"].append({"same": same, "text": None if same else q})
        for r in a["rounds"]:
            for q in r["queries"]:
                seen.setdefault(q, a["label"])


def titles_once(arms: list[dict], listed: set[str]) -> None:
    """Clear a hit's title where the turn has shown the document's title already: among the
    relevant documents (`listed`) or in a list to its left."""
    seen = set(listed)
    for a in _shown(arms, "hits"):
        hits = []
        for h in a["hits"]:
            hits.append(h if h["doc_id"] not in seen else {**h, "title": ""})
            seen.add(h["doc_id"])
        a["hits"] = hits


def compact(arms: list[dict], user: str, relevant: set[str]) -> dict[str, bool]:
    """All of the above for one turn's arms; returns which rows any arm fills."""
    filled = same_cells(arms)
    query_refs(arms, user)
    titles_once(arms, relevant)
    return filled
