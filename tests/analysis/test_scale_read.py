"""Compare, gate and report at scale (issue 45 item 3): the metrics file's per-turn rows in blocks of
one metric and one arm, read a metric at a time; the statistics in their large-sample form from
STATS.normal_from_sessions sessions on (agreeing with the resampling they stand for); content hashes
that do not depend on how a table is chunked or encoded; and the drill-down's sample, stated, with
`harness show` reaching a session it does not show."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.metrics import stats
from harness.metrics.provenance import content_hash
from harness.metrics.score import score_run
from harness.report.load import load_run
from harness.report.sections import drilldown
from harness.store.folder import RunData, RunFolder
from harness.store.turns import _may_hold
from tests.conftest import ROOT
from tests.evidence import invoke
from tests.report.test_report_top import section

BASELINE = ROOT / "runs/baselines/b2b"


def test_a_metric_is_read_from_its_own_row_groups(tmp_path):
    run = tmp_path / "b2b"
    shutil.copytree(BASELINE, run)
    score_run(run)
    f = pq.ParquetFile(run / "metrics.parquet")
    full = f.read().to_pandas()
    turns = full[full["kind"] == "turn"]
    for i in range(f.num_row_groups):  # a row group of per-turn rows: one metric of one arm
        t = f.read_row_group(i, columns=["kind", "metric", "arm_id"]).to_pandas()
        if (t["kind"] == "turn").all():
            assert t["metric"].nunique() == 1 and t["arm_id"].nunique() == 1
    data = RunData.load(run)
    assert data.metrics == set(turns["metric"])
    m = "ndcg@10"
    got = data.turns([m])
    want = turns[turns["metric"] == m]
    key = ["arm_id", "session_id", "turn_index", "repeat"]
    g = got.astype({"arm_id": str, "session_id": str}).sort_values(key).reset_index(drop=True)
    w = want.astype({"arm_id": str, "session_id": str}).sort_values(key).reset_index(drop=True)
    assert g[key].astype(str).equals(w[key].astype(str)) and np.array_equal(g["value"], w["value"].astype(float),
                                                                            equal_nan=True)
    read = [i for i in range(f.num_row_groups) if _may_hold(f.metadata.row_group(i), {m})]
    assert len(read) == int(full.loc[full["kind"] == "turn", "arm_id"][turns["metric"] == m].nunique())
    assert list(got["session_id"].cat.categories) == sorted(got["session_id"].cat.categories)


def test_with_many_sessions_the_statistics_are_the_resamplings_normal_limit(monkeypatch):
    """25,000 sessions: the CI and p in their normal forms, against the bootstrap and the sign-flip
    draws they stand for (as many draws as a test affords)."""
    rng = np.random.default_rng(1)
    counts = rng.integers(1, 5, 25_000).astype(float)
    sums = rng.normal(0.004, 0.3, 25_000) * counts
    normal = stats.bootstrap_of_sums(sums, counts, 2_000)
    p_normal = stats.randomization_of_sums(sums, 2_000)
    assert normal == stats.normal_ratio_ci(sums, counts) and not p_normal.exact and p_normal.at_resolution is False
    monkeypatch.setattr(stats, "STATS", stats.StatsDefaults(normal_from_sessions=10 ** 9))
    drawn = stats.bootstrap_of_sums(sums, counts, 2_000)
    p_drawn = stats.randomization_of_sums(sums, 2_000)
    width = drawn[2] - drawn[1]
    assert normal[0] == drawn[0] and abs(normal[1] - drawn[1]) < 0.1 * width and abs(normal[2] - drawn[2]) < 0.1 * width
    assert abs(p_normal.p - p_drawn.p) < 0.05, (p_normal.p, p_drawn.p)


def test_a_content_hash_is_the_same_however_the_table_is_chunked_or_encoded():
    t = pa.table({"a": ["x", None, "yy", "x", ""], "v": [1.0, 2.0, None, 4.0, 5.0], "n": [1, 2, 3, 4, 5]})
    pieces = [t.slice(0, 2), t.slice(2)]
    encoded = t.set_column(0, "a", pa.chunked_array([t.column("a").combine_chunks().dictionary_encode()]))
    assert content_hash([t]) == content_hash(pieces) == content_hash([encoded])
    other = t.set_column(0, "a", pa.array(["x", None, "yy", "x", "z"]))
    assert content_hash([other]) != content_hash([t])


def test_the_drill_down_shows_a_stated_sample_and_harness_show_reaches_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(drilldown, "LISTED", 5)
    out = tmp_path / "r.html"
    r = invoke("report", BASELINE, "--drill-sessions", 3, "-o", out)
    assert r.exit_code == 0, r.output
    drill = section(out.read_text(encoding="utf-8"), "drilldown")
    shown = re.findall(r'<details class="session"[^>]*><summary><strong>([^<]+)</strong>', drill)
    listed = re.findall(r'<tr><td class="mono">([^<]+)</td>', drill.split('<details class="page rest">', 1)[1])
    n = RunFolder(BASELINE).labels()["session_id"].nunique()
    random = drilldown.SAMPLE_RANDOM
    assert len(shown) == 3 + random and len(listed) == 5 and not set(shown) & set(listed)
    said = f"{random} drawn from the sessions past them (those whose ids hash lowest)"
    assert said in drill and f"{n - 3 - random - 5} more sessions are neither shown nor listed" in drill
    counted = sorted(set(RunFolder(BASELINE).labels()["session_id"]) - set(shown) - set(listed))[0]
    r = invoke("show", BASELINE, counted, 1)
    assert r.exit_code == 0 and counted in r.output and "top 5" in r.output, r.output
    order = drilldown.disagreement(load_run(BASELINE))["session_id"].astype(str).tolist()
    assert set(order[:3]) <= set(shown) and shown == [s for s in order if s in set(shown)]  # most disagreement first
