"""`compute_metrics_fast`: the same MetricsResult as harness.metrics.compute.compute_metrics (the
same per-turn values in the same row order, the same aggregates bit for bit; checked by
tests/test_metrics_fast.py), computed with array kernels so that 100,000s of turns score in
seconds instead of hours.

Where compute_metrics spends its time at scale (cProfile and py-spy on bench/metrics.py): the
per-turn Python loops over pandas groups, each turn paying `.loc`/`sort_values`/`iloc` on a
small frame (operational.py's `.loc` per metric, guards.py and loop.py's groupby-apply),
`aggregate`'s merge per segment, and rankings turned into Python objects twice (final rows and
all rounds: 100 ids x 600,000 rows is 60 million object references in 600,000 arrays, each time).

What this module does instead:
- trace columns stay Arrow and are encoded as integer codes (`dictionary_encode` keeps first
  appearance order, the order `groupby(sort=False)` uses), rankings are read dictionary-encoded
  from Parquet straight into one int code per document;
- relevance is a sorted-array lookup of (label row, document code);
- IR metrics use ranx's formulas, not ranx's objects: recall@k = hits / |R|, MRR@k = 1 / rank,
  nDCG@k with linear gains where the discounts come from numba exactly as in ranx's `_dcg` and
  are summed in the same order; rankings in the order ranx receives them from per_turn_ir's
  {doc: n - i} dict (a document listed twice counts once, at its last position; the rows where
  that changes the top are re-ranked exactly in Python);
- per-turn rows are built as code columns and turned into strings once, at the end;
- sums that pandas computes with compensated summation are still pandas groupby sums, and means
  and quantiles are still pandas Series methods over the same values in the same order.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.manifest import read_manifest
from harness.metrics.compute import MetricsResult, aggregate, load_labels
from harness.guards.identifiers import preserved
from harness.metrics.guards import _norm_filter
from harness.metrics.loop import _topk
from harness.metrics.ir import DEFAULT_SETTINGS, ir_metric_names
from harness.metrics.operational import LATENCY
from harness.metrics.segments import Segment, default_segments
from harness.traces import KEY

SCALAR = ["arm_id", "params", "repeat", "session_id", "turn_index", "round", "is_final", "not_applicable", "error",
          "fallback_reason", "abstained", "answer", "clarify", "applied_filters", "llm_calls", "prompt_tokens",
          "completion_tokens", "cost_usd", "cache_hits", *LATENCY]
AGG_COLUMNS = ["arm_id", "metric", "segment", "mean", "p50", "p95", "n", "n_unmeasured", "n_sessions", "repeat_sd"]


def encode(col) -> tuple[np.ndarray, list]:
    """Integer codes in first-appearance order (-1 for null) and the distinct values."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    enc = pc.dictionary_encode(arr)
    codes = np.asarray(enc.indices.fill_null(-1), dtype=np.int64)
    return codes, enc.dictionary.to_pylist()


def present(col) -> np.ndarray:
    """harness.metrics.ir.present over an Arrow string column: a non-empty string."""
    return np.asarray(pc.fill_null(pc.and_(pc.is_valid(col), pc.not_equal(col, "")), False), dtype=bool)


class Traces:
    """All trace rows of a run in trace order: scalar columns as Arrow, arm and session as codes,
    rankings as CSR (offsets into one int64 code array) over a document dictionary."""

    def __init__(self, run_dir: Path):
        self.parts = sorted((Path(run_dir) / "traces").glob("part-*.parquet"))
        tables, offsets, pieces, dicts = [], [np.zeros(1, np.int64)], [], []
        base = 0
        for p in self.parts:
            try:
                t = pq.read_table(p, columns=SCALAR + ["ranking"], read_dictionary=["ranking.list.element"])
            except (pa.ArrowInvalid, OSError) as e:
                from harness.traces import TraceError

                raise TraceError(f"{p}: unreadable trace part ({e}); run `harness run --resume` to redo it") from None
            tables.append(t.drop_columns(["ranking"]))
            for chunk in t.column("ranking").chunks:
                off = np.asarray(chunk.offsets, dtype=np.int64)
                vals = chunk.values  # a DictionaryArray; offsets index into it
                dicts.append(vals.dictionary)
                idx = np.asarray(vals.indices.fill_null(-1), dtype=np.int32)[off[0]:off[-1]]
                pieces.append((idx, len(dicts) - 1))
                offsets.append(off[1:] - off[0] + base)
                base += int(off[-1] - off[0])
        if not tables:
            raise ValueError(f"{run_dir}: no trace parts")
        t = pa.concat_tables(tables).combine_chunks()
        offsets = np.concatenate(offsets)
        # rows in key order, as harness.traces.read_traces returns them (stable for equal keys)
        order = np.asarray(pc.sort_indices(t, sort_keys=[(k, "ascending") for k in KEY]), dtype=np.int64)
        self.t = t.take(pa.array(order))
        lengths = np.diff(offsets)[order]
        self.offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        self.lengths = lengths
        self.order = order  # key-order row -> trace-order row
        allv = pa.chunked_array(dicts, type=pa.string()).combine_chunks()
        enc = pc.dictionary_encode(allv)
        glob = np.asarray(enc.indices, dtype=np.int32)
        self.docs = enc.dictionary.to_pylist()
        starts = np.cumsum([0] + [len(d) for d in dicts])
        codes = np.empty(base, np.int32)  # one int32 code per listed document, trace order
        pos = 0
        for idx, d in pieces:
            m = glob[starts[d]:starts[d + 1]]
            codes[pos:pos + len(idx)] = np.where(idx >= 0, m[np.clip(idx, 0, None)] if len(m) else -1, -1)
            pos += len(idx)
        del pieces
        self.codes = np.empty_like(codes)  # key order, gathered in blocks of rows
        starts_old = offsets[:-1][order]
        for a in range(0, len(order), 65536):
            b = min(a + 65536, len(order))
            lens, lo, hi = lengths[a:b], self.offsets[a], self.offsets[b]
            self.codes[lo:hi] = codes[np.repeat(starts_old[a:b] - (self.offsets[a:b] - lo), lens) + np.arange(hi - lo)]
        del codes
        self.arm, self.arms = encode(self.t.column("arm_id"))
        self.sess, self.sessions = encode(self.t.column("session_id"))
        self.rep = np.asarray(self.t.column("repeat"), dtype=np.int64)
        self.tix = np.asarray(self.t.column("turn_index"), dtype=np.int64)
        self.round = np.asarray(self.t.column("round"), dtype=np.int64)
        self._issued = None

    def __len__(self) -> int:
        return self.t.num_rows

    def ranking(self, row: int) -> np.ndarray:
        return self.codes[self.offsets[row]:self.offsets[row + 1]]

    def prefix(self, rows: np.ndarray, width: int) -> np.ndarray:
        """Codes of the first `width` documents of each row, padded with -1."""
        out = np.full((len(rows), width), -1, np.int64)
        if width == 0 or len(rows) == 0:
            return out
        lens = np.minimum(self.lengths[rows], width)
        r = np.repeat(np.arange(len(rows)), lens)
        c = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        out[r, c] = self.codes[np.repeat(self.offsets[rows], lens) + c]
        return out

    def issued_queries(self, rows: np.ndarray) -> list:
        if self._issued is None:
            self._issued = pa.chunked_array([c for p in self.parts
                                             for c in pq.read_table(p, columns=["issued_queries"]).column(0).chunks])
        return self._issued.take(pa.array(self.order[rows], pa.int64())).to_pylist() if len(rows) else []

    def list_lengths(self, column: str) -> np.ndarray:
        arrs = [pc.fill_null(pc.list_value_length(c), 0)
                for p in self.parts for c in pq.read_table(p, columns=[column]).column(0).chunks]
        return np.concatenate([np.asarray(a, np.int64) for a in arrs])[self.order]


class Labels:
    """labels.parquet with integer lookups: trace (session, turn) -> label row, and each label
    row's relevant documents (grade >= 1) as codes of the traces' document dictionary."""

    def __init__(self, labels: pd.DataFrame, tr: Traces):
        self.df = labels
        self.n = len(labels)
        self.stride = int(max(labels["turn_index"].max() if self.n else 0, tr.tix.max(initial=0))) + 1
        self.usess = pd.Index(pd.unique(labels["session_id"].astype(object)), dtype=object)
        lab_key = self.usess.get_indexer(labels["session_id"].astype(object)) * self.stride \
            + labels["turn_index"].to_numpy(np.int64)
        self.lookup = pd.Index(lab_key)
        self.trace_sess = self.usess.get_indexer(pd.Index(tr.sessions, dtype=object))  # trace session code -> label's
        self.qrels = [{d: int(g) for d, g in json.loads(q).items() if int(g) >= 1} for q in labels["qrels"]]
        self.measured = labels["qrels_measured"].to_numpy(bool)
        self.n_rel = np.array([len(q) for q in self.qrels], np.int64)
        doc_index = pd.Index(tr.docs, dtype=object)
        lab = np.array([i for i, q in enumerate(self.qrels) for _ in q], np.int64)
        docs = [d for q in self.qrels for d in q]
        grade = np.array([g for q in self.qrels for g in q.values()], np.float64)
        code = doc_index.get_indexer(pd.Index(docs, dtype=object)) if docs else np.zeros(0, np.int64)
        keep = code >= 0  # a relevant document that no ranking holds is never hit
        self.D = max(len(tr.docs), 1)
        key = lab[keep] * self.D + code[keep]
        o = np.argsort(key, kind="stable")
        self.key, self.grade = key[o], grade[keep][o]
        self.rel_codes: list[set] = [set() for _ in range(self.n)]
        for li, c in zip(lab[keep].tolist(), code[keep].tolist()):
            self.rel_codes[li].add(c)

    def rows_of(self, sess: np.ndarray, tix: np.ndarray, table: list | None = None) -> np.ndarray:
        """Label row of each (session code, turn index); -1 where the turn has no label.
        Session codes index the traces' sessions, or `table` when given."""
        to_lab = self.trace_sess if table is None else self.usess.get_indexer(pd.Index(table, dtype=object))
        ls = to_lab[sess] if len(sess) else np.zeros(0, np.int64)
        ok = (ls >= 0) & (tix >= 0) & (tix < self.stride)
        return np.where(ok, self.lookup.get_indexer(np.where(ok, ls * self.stride + tix, -1)), -1)

    def grades(self, label_rows: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Grade of each code of a 2-D block (one row per label row); 0 where not relevant."""
        if not len(self.key):
            return np.zeros(codes.shape)
        key = label_rows[:, None] * self.D + codes
        pos = np.clip(np.searchsorted(self.key, key), 0, len(self.key) - 1)
        hit = (codes >= 0) & (label_rows[:, None] >= 0) & (self.key[pos] == key)
        return np.where(hit, self.grade[pos], 0.0)


class Long:
    """Per-turn rows as code columns (arm, session and metric as codes into tables)."""

    FIELDS = ("arm", "rep", "sess", "tix", "metric", "value", "unm")

    def __init__(self, **cols):
        self.cols = cols

    @classmethod
    def from_rows(cls, rows: list[tuple]) -> "Long":
        if not rows:
            return cls(**{f: np.zeros(0, np.float64 if f == "value" else object if f == "unm" else np.int64)
                          for f in cls.FIELDS})
        cols = list(zip(*rows))
        return cls(arm=np.asarray(cols[0], np.int64), rep=np.asarray(cols[1], np.int64), sess=np.asarray(cols[2], np.int64),
                   tix=np.asarray(cols[3], np.int64), metric=np.asarray(cols[4], np.int64),
                   value=np.asarray(cols[5], np.float64), unm=np.asarray(cols[6], dtype=object))

    def __len__(self) -> int:
        return len(self.cols["value"])

    @staticmethod
    def concat(parts: list["Long"]) -> "Long":
        return Long(**{f: np.concatenate([p.cols[f] for p in parts]) for f in Long.FIELDS})


class Metrics:
    """Metric names as codes, in the order they are first produced."""

    def __init__(self):
        self.names: list[str] = []
        self.code: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        if name not in self.code:
            self.code[name] = len(self.names)
            self.names.append(name)
        return self.code[name]


def _log2_ranks(k):
    return np.log2(np.arange(1, k + 1) + 1)


_JIT = None


def _discounts(k: int) -> np.ndarray:
    """log2(rank + 1) for ranks 1..k, computed by numba exactly as ranx's `_dcg` does (numba's
    log2 and numpy's may differ in the last bit; ranx's values are the reference)."""
    global _JIT
    if k <= 0:
        return np.zeros(0)
    if _JIT is None:
        from numba import njit

        _JIT = njit(cache=True)(_log2_ranks)
    return _JIT(k)


def _ranx_top(codes: np.ndarray, width: int) -> np.ndarray:
    """The first `width` documents as ranx ranks per_turn_ir's {doc: n - i}: each once, at its
    last position."""
    last: dict[int, int] = {}
    for i, c in enumerate(codes.tolist()):
        last[c] = i
    order = sorted(last, key=last.__getitem__)[:width]
    out = np.full(width, -1, np.int64)
    out[:len(order)] = order
    return out


# --- per-turn kernels ------------------------------------------------------------------------
def ir_and_outcomes(tr: Traces, lab: Labels, M: Metrics, names: list[str]) -> tuple[Long, Long]:
    """per_turn_ir, then compute_metrics' zero_results / error_rate / fallback_rate rows."""
    final = np.nonzero(np.asarray(pc.fill_null(tr.t.column("is_final"), False), dtype=bool))[0]
    ft = tr.t.take(pa.array(final, pa.int64()))
    arm, rep, sess, tix = tr.arm[final], tr.rep[final], tr.sess[final], tr.tix[final]
    na, err, fb = present(ft.column("not_applicable")), present(ft.column("error")), present(ft.column("fallback_reason"))
    li = lab.rows_of(sess, tix)
    if (li < 0).any():
        i = int(np.nonzero(li < 0)[0][0])
        raise KeyError((tr.sessions[sess[i]], int(tix[i])))  # as per_turn_ir: a turn without labels
    na_codes, na_values = encode(ft.column("not_applicable"))
    na_text = np.array([f"n/a: {v}" for v in na_values] + [None], dtype=object)[np.where(na, na_codes, -1)]
    reason = np.where(~lab.measured[li], "no relevance labels",
                      np.where(lab.n_rel[li] == 0, "no relevant document", None)).astype(object)
    reason = np.where(reason != None, reason, np.where(na, na_text, np.where(err, "error", None))).astype(object)  # noqa: E711
    measured = np.equal(reason, None)

    kinds = []
    for m in names:
        kind, _, k = m.partition("@")
        if kind not in ("recall", "ndcg", "mrr") or not k.isdigit():
            raise ValueError(f"compute_metrics_fast: unsupported IR metric {m!r}")
        kinds.append((kind, int(k)))
    K = max([k for _, k in kinds] + [0])
    gkey = pd.factorize(arm * (int(rep.max(initial=0)) + 1) + rep)[0]  # (arm, repeat) in first-appearance order
    values = np.full((len(final), len(kinds)), np.nan)
    mrows = np.nonzero(measured)[0]
    if len(mrows):
        # one ranking per (arm, repeat, turn): the last row's, as per_turn_ir's run dict keeps
        pair = gkey[mrows] * (lab.n + 1) + li[mrows]
        last = pd.Series(mrows).groupby(pair, sort=False).transform("last").to_numpy(np.int64)
        rows = final[last]
        top = tr.prefix(rows, K)
        lens = tr.lengths[rows]
        suspect = np.zeros(len(rows), bool)  # a top document listed again further down
        cand = np.nonzero(lens > 1)[0]
        for s in range(0, len(cand), 32768):
            c = cand[s:s + 32768]
            full = tr.prefix(rows[c], int(lens[c].max()))
            for j in range(min(K, full.shape[1] - 1)):
                suspect[c] |= (top[c, j] >= 0) & (full[:, j + 1:] == top[c, j:j + 1]).any(axis=1)
        for r in np.nonzero(suspect)[0]:
            top[r] = _ranx_top(tr.ranking(rows[r]), K)
        G = lab.grades(li[mrows], top)
        disc = _discounts(K)
        nrel = lab.n_rel[li[mrows]]
        for c, (kind, k) in enumerate(kinds):
            if kind == "recall":
                hits = np.zeros(len(rows))
                for j in range(k):
                    hits += G[:, j] > 0
                values[mrows, c] = hits / nrel
            elif kind == "mrr":
                v, found = np.zeros(len(rows)), np.zeros(len(rows), bool)
                for j in range(k):
                    new = (G[:, j] > 0) & ~found
                    v[new] = 1 / (j + 1)
                    found |= new
                values[mrows, c] = v
            else:
                dcg = np.zeros(len(rows))
                for j in range(k):
                    dcg = dcg + G[:, j] / disc[j]
                idcg = _ideal_dcg(lab, k, disc)[li[mrows]]
                values[mrows, c] = dcg / np.where(idcg == 0.0, 1.0, idcg)
    o = np.argsort(gkey, kind="stable")
    n, m = len(o), len(names)
    mcodes = np.array([M(x) for x in names], np.int64)
    ir = Long(arm=np.repeat(arm[o], m), rep=np.repeat(rep[o], m), sess=np.repeat(sess[o], m), tix=np.repeat(tix[o], m),
              metric=np.tile(mcodes, n), value=values[o].reshape(-1), unm=np.repeat(reason[o], m))
    why = np.where(na, na_text, None).astype(object)
    zero = np.where(na | err, np.nan, (tr.lengths[final] == 0).astype(np.float64))
    zero_why = np.where(na, why, np.where(err, "error", None)).astype(object)
    ocodes = np.array([M("zero_results"), M("error_rate"), M("fallback_rate")], np.int64)
    outcomes = Long(arm=np.repeat(arm, 3), rep=np.repeat(rep, 3), sess=np.repeat(sess, 3), tix=np.repeat(tix, 3),
                    metric=np.tile(ocodes, len(final)),
                    value=np.column_stack([zero, err.astype(np.float64), np.where(na, np.nan, fb.astype(np.float64))]).reshape(-1),
                    unm=np.column_stack([zero_why, why, why]).reshape(-1))
    return ir, outcomes


def _ideal_dcg(lab: Labels, k: int, disc: np.ndarray) -> np.ndarray:
    R = int(lab.n_rel.max(initial=0))
    g = np.zeros((lab.n, max(R, 1)))
    for i, q in enumerate(lab.qrels):
        if q:
            v = sorted(q.values(), reverse=True)
            g[i, :len(v)] = v
    out = np.zeros(lab.n)
    for j in range(min(k, R)):
        out = out + g[:, j] / disc[j]
    return out


class Groups:
    """Turns (arm, repeat, session, turn) over all trace rows: a group id per row in
    first-appearance order, rows sorted by (group, round), each group's bounds and final row."""

    def __init__(self, tr: Traces, lab: Labels):
        self.li = lab.rows_of(tr.sess, tr.tix)
        turn = tr.sess * lab.stride + tr.tix
        key = (tr.arm * (int(tr.rep.max(initial=0)) + 1) + tr.rep) * (int(turn.max(initial=0)) + 1) + turn
        self.gid = pd.factorize(key)[0]
        self.order = np.lexsort((tr.round, self.gid))
        self.bounds = np.r_[0, np.nonzero(np.diff(self.gid[self.order]))[0] + 1, len(self.order)]
        self.final = self.order[self.bounds[1:] - 1]

    def rows(self, g: int) -> np.ndarray:
        return self.order[self.bounds[g]:self.bounds[g + 1]]

    def __len__(self) -> int:
        return len(self.bounds) - 1


def loop_metrics(tr: Traces, lab: Labels, G: Groups, M: Metrics) -> Long:
    """harness.metrics.loop.per_turn_loop."""
    t = tr.t
    na, clar, has_answer = present(t.column("not_applicable")), present(t.column("clarify")), \
        np.asarray(pc.is_valid(t.column("answer")), dtype=bool)
    abst = np.asarray(pc.fill_null(t.column("abstained"), False), dtype=bool)
    answer_failed = np.asarray(pc.fill_null(pc.match_substring(t.column("fallback_reason"), "answer failed"), False), dtype=bool)
    pcode, pvals = encode(t.column("params"))
    last_n = np.array(["last_n" in (p or "") for p in pvals] + [False], bool)[pcode]

    topks = [_topk(p) for p in pvals] + [None]
    c = {x: M(x) for x in ("clarified", "answered", "abstained", "rounds_used", "rescued", "wasted_rounds", "recall_at_stop")}
    out = []
    for g, fi in enumerate(G.final.tolist()):
        if na[fi]:
            continue
        key = (tr.arm[fi], tr.rep[fi], tr.sess[fi], tr.tix[fi])
        if last_n[fi]:
            out.append((*key, c["clarified"], float(clar[fi]), None))
        if has_answer[fi]:
            out.append((*key, c["answered"], float(not abst[fi]), None))
            out.append((*key, c["abstained"], float(abst[fi]), None))
        elif answer_failed[fi]:  # the answer call failed: unmeasured, not dropped
            out.append((*key, c["answered"], np.nan, "answer failed"))
            out.append((*key, c["abstained"], np.nan, "answer failed"))
        k = topks[pcode[fi]]
        if k is None:
            continue
        rows = G.rows(g)
        out.append((*key, c["rounds_used"], float(len(rows)), None))
        li = G.li[fi]
        relevant = lab.rel_codes[li] if li >= 0 else set()
        n_rel = int(lab.n_rel[li]) if li >= 0 else 0
        if n_rel == 0:
            for x in ("rescued", "wasted_rounds", "recall_at_stop"):
                out.append((*key, c[x], np.nan, "no relevant document"))
            continue
        hit = [bool(relevant & set(tr.ranking(r)[:k].tolist())) for r in rows.tolist()]
        first_ok = next((i for i, h in enumerate(hit) if h), None)
        out.append((*key, c["rescued"], float((not hit[0]) and hit[-1]), None))
        out.append((*key, c["wasted_rounds"], float(len(rows) - 1 - first_ok) if first_ok is not None else 0.0, None))
        out.append((*key, c["recall_at_stop"], len(relevant & set(tr.ranking(fi)[:k].tolist())) / n_rel, None))
    return Long.from_rows(out)


def guard_metrics(tr: Traces, lab: Labels, G: Groups, M: Metrics, schema: list[dict]) -> Long:
    """harness.metrics.guards.per_turn_guards."""
    entitlement = {f["field"] for f in schema if f.get("kind") == "entitlement"}
    units = {f["field"]: f.get("unit") for f in schema}
    L = lab.df
    ids_of = [[i for i in (list(ids) if ids is not None else []) if i in (u or "")]
              for ids, u in zip(L["identifiers"].to_numpy(object), L["user"].astype(object).to_numpy(object))]
    expected = [{_norm_filter(f, units) for f in json.loads(e or "[]")} for e in L["expected_filters"].astype(object)]
    na = present(tr.t.column("not_applicable"))
    acode, avals = encode(tr.t.column("applied_filters"))
    applied = [{_norm_filter(f, units) for f in json.loads(a or "[]") if f.get("field") not in entitlement}
               for a in avals] + [set()]
    viol = tr.list_lengths("filter_violations")
    fin = G.final
    fli = G.li[fin]
    top10 = (lab.grades(fli, tr.prefix(fin, 10)) > 0).any(axis=1) if len(fin) else np.zeros(0, bool)
    need = [g for g in range(len(G)) if fli[g] >= 0 and ids_of[fli[g]] and not na[fin[g]]]
    qrows = np.concatenate([G.rows(g) for g in need]) if need else np.zeros(0, np.int64)
    queries = dict(zip(qrows.tolist(), tr.issued_queries(qrows)))
    c = {x: M(x) for x in ("identifier_preservation", "identifier_dropped", "filter_precision", "filter_recall",
                           "entitlement_violations", "wrong_filter_zero_relevant")}
    out = []
    for g, fi in enumerate(fin.tolist()):
        if na[fi]:
            continue
        r = fli[g]
        if r < 0:
            raise KeyError((tr.sessions[tr.sess[fi]], int(tr.tix[fi])))
        key = (tr.arm[fi], tr.rep[fi], tr.sess[fi], tr.tix[fi])
        ids = ids_of[r]
        if ids:
            qs = [q for row in G.rows(g).tolist() for q in (queries[row] or [])]
            p = preserved(ids, qs)
            out.append((*key, c["identifier_preservation"], p, None))
            out.append((*key, c["identifier_dropped"], float(p < 1), None))
        a, e = applied[acode[fi]], expected[r]
        if a:
            out.append((*key, c["filter_precision"], len(a & e) / len(a), None))
        if e:
            out.append((*key, c["filter_recall"], len(a & e) / len(e), None))
        out.append((*key, c["entitlement_violations"], float(viol[fi]), None))
        if lab.n_rel[r] and (a - e):
            out.append((*key, c["wrong_filter_zero_relevant"], float(not top10[g]), None))
    return Long.from_rows(out)


def ops_metrics(tr: Traces, G: Groups, M: Metrics) -> Long:
    """harness.metrics.operational.per_turn_ops: the same pandas groupby sums, rows built
    without a per-turn `.loc`."""
    keep = ~present(tr.t.column("not_applicable"))
    cols = ["llm_calls", "prompt_tokens", "completion_tokens", "cache_hits", "cost_usd", *LATENCY]
    df = tr.t.select(cols).filter(pa.array(keep)).to_pandas()
    gid = G.gid[keep]
    g = df.groupby(gid, sort=False)
    s = g[["llm_calls", "prompt_tokens", "completion_tokens", "cache_hits"]].sum()
    known = df["cost_usd"].notna().groupby(gid, sort=False).all().reindex(s.index).to_numpy(bool)
    conv = df.assign(cost_usd=pd.to_numeric(df["cost_usd"], errors="coerce"),
                     **{m: pd.to_numeric(df[m], errors="coerce") for m in LATENCY})
    g2 = conv.groupby(gid, sort=False)
    cost = g2["cost_usd"].sum(min_count=1).reindex(s.index).to_numpy(np.float64)
    lat = g2[list(LATENCY)].sum(min_count=1).reindex(s.index)
    n = len(s)
    calls = s["llm_calls"].to_numpy().astype(np.float64)
    ok = known & ~np.isnan(cost)
    with np.errstate(divide="ignore", invalid="ignore"):
        blocks = [("llm_calls", calls, np.ones(n, bool), None),
                  ("prompt_tokens", s["prompt_tokens"].to_numpy().astype(np.float64), np.ones(n, bool), None),
                  ("completion_tokens", s["completion_tokens"].to_numpy().astype(np.float64), np.ones(n, bool), None),
                  ("cost_usd", np.where(calls == 0, 0.0, np.where(ok, cost, np.nan)), np.ones(n, bool),
                   np.where((calls != 0) & ~ok, "price unknown", None).astype(object)),
                  ("cache_hit_rate", s["cache_hits"].to_numpy().astype(np.float64) / calls, calls > 0, None)]
    for m in LATENCY:
        v = lat[m].to_numpy(np.float64)
        blocks.append((f"latency_{m[3:]}_ms", v, ~np.isnan(v), None))
    val = np.column_stack([b[1] for b in blocks])
    have = np.column_stack([b[2] for b in blocks])
    why = np.column_stack([b[3] if b[3] is not None else np.full(n, None, dtype=object) for b in blocks])
    r, k = np.nonzero(have)  # row-major: turns in order, metrics in order
    mcodes = np.array([M(b[0]) for b in blocks], np.int64)
    first = G.order[G.bounds[:-1]]  # any row of a turn names it; map group id -> one of its rows
    row_of = np.empty(len(G), np.int64)
    row_of[G.gid[first]] = first
    rows = row_of[s.index.to_numpy(np.int64)][r]
    return Long(arm=tr.arm[rows], rep=tr.rep[rows], sess=tr.sess[rows], tix=tr.tix[rows], metric=mcodes[k],
                value=val[r, k], unm=why[r, k])


def judgment_rows(run_dir: Path, tr: Traces, M: Metrics, arms: list, sessions: list) -> Long | None:
    jpath = Path(run_dir) / "judgments.parquet"
    if not jpath.exists():
        return None
    j = pd.read_parquet(jpath)
    j = j[~j["status"].astype(str).str.startswith("skipped")]

    def codes(values, table):
        idx = {v: i for i, v in enumerate(table)}
        out = []
        for v in values:
            if v not in idx:
                idx[v] = len(table)
                table.append(v)
            out.append(idx[v])
        return np.asarray(out, np.int64)

    return Long(arm=codes(j["arm_id"].tolist(), arms), rep=j["repeat"].to_numpy(np.int64),
                sess=codes(j["session_id"].tolist(), sessions), tix=j["turn_index"].to_numpy(np.int64),
                metric=np.asarray([M(x) for x in j["metric"]], np.int64), value=j["value"].astype(float).to_numpy(),
                unm=j["status"].where(j["status"] != "ok", None).astype(object).to_numpy())


def to_frame(long: Long, arms: list, sessions: list, metrics: list) -> pd.DataFrame:
    """The per-turn DataFrame of compute_metrics (str columns decoded by Arrow from the codes).
    Consumes `long`: its columns are released as the frame's are built."""
    c = long.cols

    def strings(name, table):
        codes = c.pop(name)
        arr = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(table, pa.string())).dictionary_decode()
        return pd.array(arr, dtype=pd.StringDtype("pyarrow", na_value=np.nan))

    cols = {"arm_id": strings("arm", arms), "repeat": c.pop("rep"), "session_id": strings("sess", sessions),
            "turn_index": c.pop("tix"), "metric": strings("metric", metrics), "value": c.pop("value")}
    unm = c.pop("unm")
    unm[pd.isna(unm)] = None
    cols["unmeasured"] = pd.Series(unm, dtype=object, copy=False)
    return pd.DataFrame(cols, copy=False)


# --- aggregation -----------------------------------------------------------------------------
def aggregate_long(long: Long, lab: Labels, arms: list, sessions: list, metrics: list,
                   labels: pd.DataFrame, segments: list[Segment]) -> pd.DataFrame | None:
    """compute.aggregate without a merge per segment: each (arm, metric) group's rows are
    contiguous once (stable sort), a segment is a boolean mask over them. None when turns repeat
    (repeats: the per-turn mean and spread need compute.aggregate's groupby)."""
    c = long.cols
    turn = c["sess"] * (int(c["tix"].max(initial=0)) + 1) + c["tix"]
    am = c["arm"] * (len(metrics) + 1) + c["metric"]
    key = am * (int(turn.max(initial=0)) + 1) + turn
    if pd.Index(key).has_duplicates:
        return None
    li = lab.rows_of(c["sess"], c["tix"], sessions)
    value = c["value"]
    measured = ~np.isnan(value)
    am_code = pd.factorize(am)[0]
    go = np.argsort(am_code, kind="stable")
    b = np.r_[0, np.nonzero(np.diff(am_code[go]))[0] + 1, len(go)]
    group_rows = [go[b[i]:b[i + 1]] for i in range(len(b) - 1)]
    n_sess = int(c["sess"].max(initial=0)) + 1
    out = []
    for seg in segments:
        mask = seg.mask(labels).to_numpy(bool)
        sel_row = (li >= 0) & mask[np.clip(li, 0, None)] if len(li) else np.zeros(0, bool)
        found = []
        for rows in group_rows:
            sel = rows[sel_row[rows]]
            if len(sel):
                found.append((sel[0], sel))
        for _, sel in sorted(found, key=lambda x: x[0]):
            meas = measured[sel]
            nm = int(meas.sum())
            vals = pd.Series(value[sel][meas])
            r0 = sel[0]
            out.append({"arm_id": arms[c["arm"][r0]], "metric": metrics[c["metric"][r0]], "segment": seg.name,
                        "mean": float(vals.mean()) if nm else np.nan,
                        "p50": float(vals.quantile(0.5)) if nm else np.nan,
                        "p95": float(vals.quantile(0.95)) if nm else np.nan,
                        "n": nm, "n_unmeasured": int(len(sel) - nm),
                        "n_sessions": int(np.count_nonzero(np.bincount(c["sess"][sel][meas], minlength=n_sess))),
                        "repeat_sd": np.nan})
    return pd.DataFrame(out, columns=AGG_COLUMNS)


def compute_metrics_fast(run_dir: Path, segments: list[Segment] | None = None, timings: dict | None = None) -> MetricsResult:
    """compute_metrics with array kernels: the same MetricsResult (values, order, aggregates).
    `timings`, when given, receives seconds per stage."""
    import time

    clock = [time.perf_counter()]

    def stage(name):
        if timings is not None:
            import resource

            t = time.perf_counter()
            timings[name] = timings.get(name, 0.0) + t - clock[0]
            timings[f"peak MB after {name}"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            clock[0] = t

    run_dir = Path(run_dir)
    if not any((run_dir / "traces").glob("part-*.parquet")):
        from harness.metrics.compute import compute_metrics

        return compute_metrics(run_dir, segments)
    man = read_manifest(run_dir)
    mcfg = man.get("metrics") or DEFAULT_SETTINGS
    labels = load_labels(run_dir)
    tr = Traces(run_dir)
    lab = Labels(labels, tr)
    stage("read traces and labels")
    names = ir_metric_names(mcfg["cutoffs"], mcfg["ndcg_at"], mcfg["mrr_at"])
    M = Metrics()
    ir, outcomes = ir_and_outcomes(tr, lab, M, names)
    stage("IR metrics and outcomes")
    G = Groups(tr, lab)
    loop = loop_metrics(tr, lab, G, M)
    stage("loop metrics")
    guards = guard_metrics(tr, lab, G, M, man.get("filter_schema", []))
    stage("guard metrics")
    ops = ops_metrics(tr, G, M)
    stage("operational metrics")
    extra = [loop, guards, ops]
    arms_t, sess_t = list(tr.arms), list(tr.sessions)
    extra_names = [[M.names[i] for i in dict.fromkeys(e.cols["metric"].tolist())] for e in extra]
    j = judgment_rows(run_dir, tr, M, arms_t, sess_t)
    if j is not None:
        extra.append(j)
        extra_names.append([M.names[i] for i in dict.fromkeys(j.cols["metric"].tolist())])
    del tr, G
    long = Long.concat([p for p in [ir, outcomes, *extra] if len(p)])
    del ir, outcomes, extra, loop, guards, ops
    segs = segments or default_segments(labels)
    agg = aggregate_long(long, lab, arms_t, sess_t, M.names, labels, segs)
    stage("aggregates")
    per_turn = to_frame(long, arms_t, sess_t, M.names)
    del long
    if agg is None:
        agg = aggregate(per_turn, labels, segs)
        stage("aggregates")
    stage("per-turn frame")
    names = names + ["zero_results", "error_rate", "fallback_rate"] + [m for e in extra_names for m in e]
    return MetricsResult(per_turn, agg, [a["arm_id"] for a in man["arms"]], names, labels)


def write_metrics_fast(run_dir: Path, res: MetricsResult, chunk_rows: int = 1_000_000) -> Path:
    """harness.metrics.compute.write_metrics, streamed: the same metrics.parquet content (same
    columns, types and rows in the same order), built and written a million per-turn rows at a
    time instead of one concatenated copy of everything (which doubles the memory of a
    100,000-turn run)."""
    from harness.metrics.compute import typed_metrics_frame

    def typed(df: pd.DataFrame) -> pa.Table:
        return pa.Table.from_pandas(typed_metrics_frame(df), preserve_index=False)

    agg = res.aggregates.assign(kind="aggregate", session_id=None, turn_index=None, repeat=None, value=None, unmeasured=None)
    chunks = [agg]
    pt = res.per_turn
    path = Path(run_dir) / "metrics.parquet"
    tmp = path.with_name("metrics.parquet.tmp")
    writer = None
    try:
        for start in [None, *range(0, len(pt), chunk_rows)]:
            if start is None:
                part = chunks[0]
            else:
                part = pt.iloc[start:start + chunk_rows].assign(
                    kind="turn", segment=None, mean=None, p50=None, p95=None, n=None, n_unmeasured=None,
                    n_sessions=None, repeat_sd=None)
            t = typed(part)
            if writer is None:
                writer = pq.ParquetWriter(tmp, t.schema)
            writer.write_table(t.cast(writer.schema) if not t.schema.equals(writer.schema) else t)
    finally:
        if writer is not None:
            writer.close()
    tmp.replace(path)
    return path
