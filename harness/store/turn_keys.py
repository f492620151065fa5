"""The keys of a run's turns as integers (the completeness check, harness.store.integrity): the final
rows' (arm_id, repeat, session_id, turn_index) read a part at a time with the ids as dictionaries,
and one integer per planned and per final key, equal where the keys are. A month's run holds 5x10^6
final rows: as Python strings their keys alone took GBs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.store.folder import RunFolder
from harness.store.traces import KEY, each_part, read_part

TURN_KEY = ["arm_id", "repeat", "session_id", "turn_index"]


def final_keys(folder: RunFolder) -> pd.DataFrame:
    """arm_id, repeat, session_id, turn_index of every final row in key order, the ids categorical
    (TraceError when a part is unreadable). Read a part at a time, the ids as dictionaries: the whole
    run's keys as strings held GBs of a month's run."""
    read = [*KEY, "is_final"]

    def finals(p: Path) -> pa.Table:
        t = read_part(p, read, folder.path)
        t = t.filter(pc.fill_null(t.column("is_final"), False)).select(list(KEY))
        for c in ("arm_id", "session_id"):
            t = t.set_column(t.schema.get_field_index(c), c, pc.dictionary_encode(t.column(c)))
        return t

    pieces = each_part(folder.parts(), finals)
    if not pieces:
        return pd.DataFrame({c: pd.Series(dtype="category" if c in ("arm_id", "session_id") else int) for c in TURN_KEY})
    f = pa.concat_tables(pieces).unify_dictionaries().to_pandas()
    for c in ("arm_id", "session_id"):  # categories in text order, so that the rows sort as read_traces' do
        f[c] = f[c].cat.set_categories(sorted(f[c].cat.categories))
    f = f.sort_values(list(KEY), kind="stable", ignore_index=True)[TURN_KEY]
    return f.assign(repeat=f["repeat"].astype(int), turn_index=f["turn_index"].astype(int))


def _codes(*columns) -> list[np.ndarray]:
    """Integer codes of the values of `columns` taken together (equal values, equal codes), one array
    per column. A categorical column is coded through its categories, its strings never made per row."""
    values = [np.asarray(c.cat.categories, dtype=object) if isinstance(c.dtype, pd.CategoricalDtype) else np.asarray(c)
              for c in columns]
    codes, _ = pd.factorize(np.concatenate(values))
    out = np.split(codes.astype(np.int64), np.cumsum([len(v) for v in values])[:-1])
    for i, c in enumerate(columns):
        if isinstance(c.dtype, pd.CategoricalDtype):  # a missing id (code -1) takes the -1 after its codes
            out[i] = np.append(out[i], -1)[c.cat.codes.to_numpy(np.int64)]
    return out


def plan_keys(turns: pd.DataFrame, arm_ids: list[str], repeats: int, finals: pd.DataFrame
               ) -> tuple[np.ndarray, np.ndarray]:
    """One integer per planned key (arm, then repeat, then turn: `turns` in their order) and per final
    row (`finals`: final_keys', its ids categorical text), equal where the (arm_id, repeat, session_id,
    turn_index) are: no frame of the plan's strings (10^6 turns of 5 arms: a cross join of 5 x 10^6
    rows merged twice)."""
    arm_plan = np.repeat(np.arange(len(arm_ids)), repeats)
    rep_plan = np.tile(np.arange(repeats), len(arm_ids))
    arm_p, arm_f = _codes(np.asarray(arm_ids, object)[arm_plan], finals["arm_id"])
    rep_f = finals["repeat"].to_numpy(np.int64)
    ar_p, ar_f = _codes(*_pairs((arm_p, rep_plan), (arm_f, rep_f)))
    s_p, s_f = _codes(turns["session_id"].astype(str).to_numpy(object), finals["session_id"])
    st_p, st_f = _codes(*_pairs((s_p, turns["turn_index"].to_numpy(np.int64)),
                                (s_f, finals["turn_index"].to_numpy(np.int64))))
    width = int(max(st_p.max(initial=-1), st_f.max(initial=-1))) + 1
    plan = (ar_p[:, None] * width + st_p[None, :]).ravel()
    return plan, ar_f * width + st_f


def _pairs(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays of pairs (first codes, second values) as one integer each, equal for equal pairs."""
    second = _codes(a[1], b[1])
    n = int(max(second[0].max(initial=-1), second[1].max(initial=-1))) + 1
    return a[0] * n + second[0], b[0] * n + second[1]
