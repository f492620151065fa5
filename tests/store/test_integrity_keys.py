"""Issue 45: the completeness check reads the final rows' keys a part at a time with the ids as
dictionaries (a month's run held 3.6 GB in that check when every key was a Python string). Its
keys are the ones a whole-run read gives, in key order, whatever order the parts hold them in."""
import pandas as pd
import pyarrow.parquet as pq

from harness.store.folder import RunFolder
from harness.store.integrity import completeness
from harness.store.turn_keys import TURN_KEY, final_keys
from harness.store.traces import read_traces
from tests.evidence import copy_run


def split_backwards(run, pieces: int = 3) -> None:
    """The run's one part rewritten as `pieces` parts holding its rows last first."""
    folder = RunFolder(run)
    (part,) = folder.parts()
    t = pq.read_table(part)
    part.unlink()
    step = -(-t.num_rows // pieces)
    for i in range(pieces):
        pq.write_table(t.slice(t.num_rows - (i + 1) * step if i < pieces - 1 else 0,
                               step if i < pieces - 1 else t.num_rows - (pieces - 1) * step), folder.new_part(i))


def whole_run(run) -> pd.DataFrame:
    t = read_traces(run, [*TURN_KEY, "is_final"]).to_pandas()
    t = t[t["is_final"].astype(bool)][TURN_KEY].reset_index(drop=True)
    return t.astype({"arm_id": object, "session_id": object, "repeat": int, "turn_index": int})


def test_final_keys_are_a_whole_reads_in_key_order_with_categorical_ids(tmp_path):
    run = copy_run(tmp_path / "run")
    split_backwards(run)
    assert len(RunFolder(run).parts()) == 3
    keys = final_keys(RunFolder(run))
    assert all(isinstance(keys[c].dtype, pd.CategoricalDtype) for c in ("arm_id", "session_id"))
    pd.testing.assert_frame_equal(keys.astype({"arm_id": object, "session_id": object}), whole_run(run))
    done = completeness(RunFolder(run))
    assert done.sound and done.complete, done.describe()


def test_a_final_row_twice_across_parts_is_still_counted(tmp_path):
    run = copy_run(tmp_path / "run")
    folder = RunFolder(run)
    (part,) = folder.parts()
    t = pq.read_table(part)
    finals = t.filter(t.column("is_final"))
    pq.write_table(finals.slice(0, 2), folder.new_part(1))
    done = completeness(RunFolder(run))
    assert not done.sound and done.duplicates == 2, done.describe()


def test_final_rows_without_a_session_id_are_named_not_a_crash(tmp_path):
    """Every final row's session id null: an IndexError (exit 3, "a bug of the harness") where the
    check names rows its plan does not hold."""
    import pyarrow as pa

    run = copy_run(tmp_path / "run")
    (part,) = RunFolder(run).parts()
    t = pq.read_table(part)
    i = t.schema.get_field_index("session_id")
    pq.write_table(t.set_column(i, t.schema.field(i), pa.nulls(t.num_rows, pa.string())), part)
    done = completeness(RunFolder(run))
    assert not done.sound and not done.complete, done.describe()
