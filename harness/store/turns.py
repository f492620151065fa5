"""Reading the per-turn rows of a run folder's metrics file a metric at a time (issue 45). Scoring
writes each metric's rows of each arm together (harness.metrics.score), so the row groups that can
hold a metric are known from their statistics and only those are read: one metric of a month's run
costs its own rows, never the run's (a hundred million rows for 10^6 turns x 5 arms). Strings come
as pandas categoricals (an arm id per row as text took 150 bytes), session ids in sorted order, so
sorting or grouping by them orders sessions as their text does. `folder`: a harness.store.folder.RunFolder
(which imports this module where it reads per-turn rows)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    import pandas as pd

STRINGS = ["kind", "arm_id", "session_id", "metric", "unmeasured"]  # read dictionary-encoded
TURNS_KEPT = 2  # metrics whose per-turn rows a run's reader keeps once read (kept_rows)


def _stats(rg, name: str):
    """(min, max) of a column of a row group, or None when the file has no statistics for it."""
    for j in range(rg.num_columns):
        col = rg.column(j)
        if col.path_in_schema == name:
            st = col.statistics
            return (st.min, st.max) if st is not None and st.has_min_max else None
    return None


def _may_hold(rg, metrics: set[str] | None, session: str | None = None, arm: str | None = None) -> bool:
    """Whether a row group can hold per-turn rows of `metrics` (None: of any metric) and, when
    given, of `session` and of `arm`."""
    kind = _stats(rg, "kind")
    if kind is not None and kind[0] == kind[1] == "aggregate":
        return False
    for name, value in (("session_id", session), ("arm_id", arm)):
        span = _stats(rg, name) if value is not None else None
        if span is not None and not span[0] <= value <= span[1]:
            return False
    if metrics is None:
        return True
    span = _stats(rg, "metric")
    return span is None or any(span[0] <= m <= span[1] for m in metrics)


def row_groups(folder, metrics: list[str] | None, columns: list[str],
               session: str | None = None, arm: str | None = None) -> Iterator[pa.Table]:
    """`columns` of the per-turn rows of `metrics` (None: every metric), of one `session` and of one
    `arm` when given, a row group at a time."""
    f = folder.metrics_file(read_dictionary=[c for c in STRINGS if c in columns or c == "kind"])
    wanted = None if metrics is None else set(metrics)
    have = set(f.schema_arrow.names)
    read = [c for c in dict.fromkeys(["kind", "metric", *columns, *(["session_id"] if session is not None else []),
                                     *(["arm_id"] if arm is not None else [])]) if c in have]
    for i in range(f.num_row_groups):
        if not _may_hold(f.metadata.row_group(i), wanted, session, arm):
            continue
        t = f.read_row_group(i, columns=read)
        keep = pc.equal(t.column("kind"), "turn")
        for name, value in (("session_id", session), ("arm_id", arm)):
            if value is not None:
                keep = pc.and_(keep, pc.equal(t.column(name), value))
        if wanted is not None:
            keep = pc.and_(keep, pc.is_in(t.column("metric"), pa.array(sorted(wanted), pa.string())))
        t = t.filter(pc.fill_null(keep, False))
        if t.num_rows:
            yield t.select([c for c in columns if c in have])


def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-turn frames in one, their categorical columns over the union of their categories (sorted)
    and kept categorical (pandas' concat of differing categories falls back to Python strings)."""
    import pandas as pd
    from pandas.api.types import union_categoricals

    if len(frames) == 1:
        return frames[0]
    frames = [f for f in frames if len(f)] or frames[:1]
    cats = [c for c in frames[0].columns if all(isinstance(f[c].dtype, pd.CategoricalDtype) for f in frames)]
    out = pd.concat([f.drop(columns=cats) for f in frames], ignore_index=True)
    for c in cats:  # categories as text, whatever dtype an empty or all-null column's took; no frame copied per column
        out[c] = union_categoricals([f[c].cat.set_categories(f[c].cat.categories.astype(str), rename=True).array
                                     for f in frames], sort_categories=True)
    return out[list(dict.fromkeys(c for f in frames for c in f.columns))]  # pd.concat's order of the columns


def categorical(df: pd.DataFrame, columns=("arm_id", "session_id", "metric", "unmeasured")) -> pd.DataFrame:
    """`df` with its string `columns` as categoricals (an arm id per row as text takes 150 bytes)."""
    return df.astype({c: "category" for c in columns if c in df.columns})


def aggregates(folder) -> pd.DataFrame:
    """The aggregate rows of the metrics file, its per-turn row groups left unread."""
    f = folder.metrics_file()
    groups = []
    for i in range(f.num_row_groups):
        kind = _stats(f.metadata.row_group(i), "kind")
        if kind is None or kind[0] != "turn" or kind[1] != "turn":
            groups.append(i)
    df = (f.read_row_groups(groups) if groups else f.schema_arrow.empty_table()).to_pandas()
    return df[df["kind"] == "aggregate"].reset_index(drop=True)


def turn_rows(folder, metrics: list[str] | None, columns: list[str],
              session: str | None = None, arm: str | None = None) -> pd.DataFrame:
    """The per-turn rows of `metrics` (of one `session`, of one `arm` when given) as a DataFrame
    (`columns` the file has; categorical strings, session ids sorted, integer turn index and
    repeat, float values)."""
    import pandas as pd

    tables = list(row_groups(folder, metrics, columns, session, arm))
    if not tables:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "value" else "int64" if c in (
            "turn_index", "repeat") else "category") for c in columns if c in folder.metrics_file().schema_arrow.names})
    df = pa.concat_tables(tables).to_pandas()
    for c in df.columns:
        if isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].cat.remove_unused_categories()
    if "session_id" in df:
        df["session_id"] = df["session_id"].cat.reorder_categories(sorted(df["session_id"].cat.categories))
    if "turn_index" in df:
        df["turn_index"] = df["turn_index"].astype(int)
    if "value" in df:
        df["value"] = df["value"].astype(float)
    return df


def kept_rows(folder, kept: dict, metrics: list[str], columns: list[str]) -> pd.DataFrame:
    """`columns` of the per-turn rows of `metrics`, read once per metric into `kept` (metric ->
    rows), which holds the last TURNS_KEPT metrics read (or the ones asked, when more)."""
    import pandas as pd

    wanted = list(dict.fromkeys(metrics))
    new = [m for m in wanted if m not in kept]
    if new:
        got = turn_rows(folder, new, columns)
        for m, g in got.groupby("metric", sort=False, observed=True):
            kept[m] = g
        for m in new:
            kept.setdefault(m, got.iloc[:0])
    frames = [kept[m] for m in wanted]
    for m in [m for m in kept if m not in wanted][:max(0, len(kept) - max(TURNS_KEPT, len(wanted)))]:
        del kept[m]  # the oldest first
    if not frames:
        return turn_rows(folder, [], columns)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def arm_rows(folder, kept: dict, metric: str | None, arm_id: str, columns: list[str]) -> pd.DataFrame:
    """`columns` of the per-turn rows of one metric (None: none) of one arm: from `kept` (as
    kept_rows fills it) when the metric is there, else from the file's row groups of that arm."""
    if metric in kept:
        rows = kept[metric]
        return rows[(rows["arm_id"] == arm_id).to_numpy(bool)]
    return turn_rows(folder, [] if metric is None else [metric], columns, arm=arm_id)


def turn_metrics(folder) -> set[str]:
    """The metrics with per-turn rows: a row group's statistics where it holds one metric, its
    column otherwise."""
    f = folder.metrics_file(read_dictionary=["kind", "metric"])
    out: set[str] = set()
    for i in range(f.num_row_groups):
        rg = f.metadata.row_group(i)
        if not _may_hold(rg, None):
            continue
        kind, span = _stats(rg, "kind"), _stats(rg, "metric")
        if kind is not None and kind[0] == kind[1] == "turn" and span is not None and span[0] == span[1]:
            out.add(span[0])
            continue
        t = f.read_row_group(i, columns=["kind", "metric"])
        t = t.filter(pc.fill_null(pc.equal(t.column("kind"), "turn"), False))
        out.update(x for x in pc.unique(t.column("metric").combine_chunks().dictionary_decode()).to_pylist()
                   if x is not None)
    return out


def unmeasured_reasons(folder) -> dict[str, set[str]]:
    """metric -> the reasons its unmeasured per-turn rows record, read a row group at a time."""
    out: dict[str, set[str]] = {}
    if "unmeasured" not in folder.metrics_file().schema_arrow.names:
        return out
    for t in row_groups(folder, None, ["metric", "unmeasured"]):
        t = t.filter(pc.is_valid(t.column("unmeasured")))
        if not t.num_rows:
            continue
        pairs = pa.table({"m": t.column("metric").cast(pa.string()), "u": t.column("unmeasured").cast(pa.string())})
        g = pairs.group_by(["m", "u"]).aggregate([]).to_pydict()
        for m, u in zip(g["m"], g["u"]):
            out.setdefault(m, set()).add(u)
    return out
