"""scripts/metrics_equal.py, the check that a refactor moved no number (issue 43: the demo's
metrics equal before and after): equal for a copy, unequal when one quality value moves, equal
when only an operational (timing) value moves."""
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import Exit
from harness.metrics.registry import resolve
from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "metrics_equal.py"
BASELINE = ROOT / "runs" / "baselines" / "b2b"


def _compare(a, b):
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True, timeout=120)


def _moved(tmp_path, operational: bool):
    """A copy of the baseline with one per-turn value of a quality (or operational) metric changed."""
    run = tmp_path / ("ops" if operational else "quality")
    run.mkdir()
    shutil.copy(BASELINE / "metrics.parquet", run / "metrics.parquet")
    t = pq.read_table(run / "metrics.parquet")
    df = t.to_pandas()
    pick = df[(df["kind"] == "turn") & df["value"].notna()
              & df["metric"].map(lambda m: (resolve(m).kind == "operational") == operational)].index[0]
    df.loc[pick, "value"] += 1.0
    pq.write_table(pa.Table.from_pandas(df, schema=t.schema, preserve_index=False), run / "metrics.parquet")
    return run, df.loc[pick, "metric"]


def test_a_copy_is_equal(tmp_path):
    p = _compare(BASELINE, BASELINE)
    assert p.returncode == Exit.PASS and ": equal" in p.stdout and " operational left out" in p.stdout, p.stdout + p.stderr


def test_one_moved_quality_value_is_named(tmp_path):
    run, metric = _moved(tmp_path, operational=False)
    p = _compare(BASELINE, run)
    assert p.returncode == Exit.REGRESSION and f"DIFFERENT in {metric}" in p.stdout, p.stdout + p.stderr


def test_a_moved_timing_is_no_difference(tmp_path):
    run, _ = _moved(tmp_path, operational=True)
    p = _compare(BASELINE, run)
    assert p.returncode == Exit.PASS and ": equal" in p.stdout, p.stdout + p.stderr
