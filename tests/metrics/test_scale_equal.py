"""Scoring a session group at a time equals scoring the run at once (issue 45): the committed b2b
baseline's tables (scored by the whole-run implementation) and the three demo configs' runs, every
table of the scoring step (aggregates of every metric and segment, per-turn values, paired
comparisons with their CIs and p from the same seed, spread, filter fields, coinciding arms)
with groups of a few turns, so that every session group boundary is crossed. Reference
implementations of the whole-run tables are the ones before streaming (kept here)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from harness.defaults import metric_settings
from harness.metrics.registry import headline
from harness.metrics.score import score_run
from harness.metrics.segments import default_segments, parse_segment, segment_keys
from harness.metrics.paired import oracle_gap_closed
from harness.metrics.stats import TurnMeans, compare_arms, holm_over
from harness.store.armset import run_arms
from harness.store.folder import RunFolder
from tests.conftest import ROOT
from tests.oracle_metrics import aggregate
from tests.reliability_helpers import HARNESS

DEFAULT_SEGMENTS = ("all", "turn_index>=2")
KEYS = ["kind", "arm_id", "metric", "segment", "session_id", "turn_index", "repeat", "arm", "bucket", "field"]


def tables(run) -> dict[str, pd.DataFrame]:
    return {p.name: pq.read_table(p).to_pandas() for p in sorted(run.glob("*.parquet")) if p.name != "labels.parquet"}


def assert_same_table(name: str, a: pd.DataFrame, b: pd.DataFrame, exact: bool = False) -> None:
    """Equal rows (keyed: the order of rows is not compared), strings and counts exactly, floats
    exactly or to 1e-12 relative (a mean summed over sessions instead of over turns)."""
    assert sorted(a.columns) == sorted(b.columns), name
    keys = [k for k in KEYS if k in a.columns]
    a = a.sort_values(keys).reset_index(drop=True)
    b = b[a.columns].sort_values(keys).reset_index(drop=True)
    assert len(a) == len(b), name
    for c in a.columns:
        x, y = a[c], b[c]
        if x.dtype.kind in "fiu" or str(x.dtype) in ("Int64", "Float64"):
            x, y = x.to_numpy(float, na_value=np.nan), y.to_numpy(float, na_value=np.nan)
            ok = np.array_equal(x, y, equal_nan=True) if exact else np.allclose(x, y, rtol=1e-12, atol=0, equal_nan=True)
        else:
            ok = x.astype(str).tolist() == y.astype(str).tolist()
        assert ok, f"{name}: column {c} differs"


def assert_same_statistics(got: dict, want: dict) -> None:
    """CIs, p and counts bit for bit: the same per-session sums resampled with the same seed."""
    for t in ("comparisons.parquet", "spread.parquet"):
        cols = [c for c in want[t].columns if c in ("ci_lo", "ci_hi", "p", "p_holm", "lo", "hi", "n_sessions", "n_turns")]
        keys = [k for k in KEYS if k in want[t]]
        assert_same_table(t, got[t][[*cols, *keys]], want[t][[*cols, *keys]], exact=True)


def score_copies(run, tmp_path, small: int) -> tuple[dict, dict]:
    """The run scored in one group and in groups of `small` labelled turns (copies of its folder)."""
    out = []
    for name, turns in (("whole", 10 ** 9), ("groups", small)):
        d = tmp_path / name
        shutil.copytree(run, d)
        score_run(d, group_turns=turns)
        out.append(tables(d))
    return out[0], out[1]


def test_the_committed_baseline_scored_in_groups_equals_its_tables(tmp_path):
    base = ROOT / "runs/baselines/b2b"
    d = tmp_path / "b2b"
    shutil.copytree(base, d)
    score_run(d, group_turns=5)
    got, want = tables(d), tables(base)
    assert set(got) == set(want)
    for name in want:
        assert_same_table(name, got[name], want[name])
    assert_same_statistics(got, want)


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    """The three demo configs (mtrag-un on its test split) replayed offline by `harness run`."""
    tmp = tmp_path_factory.mktemp("demos")
    runs = {}
    for name, splits in (("b2b", None), ("handbook", None), ("mtrag", ["test"])):
        raw = yaml.safe_load((ROOT / f"configs/{name}.yaml").read_text(encoding="utf-8"))
        raw.update(eval_set=str((ROOT / "configs" / raw["eval_set"]).resolve()), runs_dir=str(tmp / "runs"))
        if splits:
            raw["splits"] = splits
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        r = subprocess.run([str(HARNESS), "run", str(path), "--run-id", name, "--no-progress"], cwd=tmp,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        runs[name] = tmp / "runs" / name
    return runs


@pytest.mark.parametrize("name", ["b2b", "handbook", "mtrag"])
def test_a_demo_run_scored_in_groups_equals_the_whole_run(demo_runs, tmp_path, name):
    whole, groups = score_copies(demo_runs[name], tmp_path, small=7)
    assert set(whole) == set(groups) and {"metrics.parquet", "comparisons.parquet", "spread.parquet"} <= set(whole)
    for t in whole:
        assert_same_table(t, groups[t], whole[t])
    assert_same_statistics(groups, whole)


@pytest.mark.parametrize("name", ["b2b", "handbook", "mtrag"])
def test_a_demo_run_scored_in_groups_equals_the_reference_tables(demo_runs, tmp_path, name):
    """Against the whole-run implementations of before: pandas aggregation and paired_table over
    the per-turn table at once."""
    _, groups = score_copies(demo_runs[name], tmp_path, small=7)
    folder = RunFolder(tmp_path / "groups")
    m = groups["metrics.parquet"]
    per_turn = m[m["kind"] == "turn"].reset_index(drop=True)
    labels, man = folder.labels(), folder.read_manifest()
    agg = aggregate(per_turn, labels, default_segments(labels))
    got = m[m["kind"] == "aggregate"][list(agg.columns)]
    assert_same_table("aggregates", got, agg)
    want = reference_paired_table(per_turn, labels, run_arms(man), settings=metric_settings(man.metrics))
    assert_same_table("comparisons", groups["comparisons.parquet"], want)


def reference_paired_table(per_turn: pd.DataFrame, labels: pd.DataFrame, arms: list, reference: str | None = None,
                           metrics=None, segments=DEFAULT_SEGMENTS, settings: dict | None = None) -> pd.DataFrame:
    """paired_table before it was fed session groups (harness.metrics.paired at b975ce7, STATS' counts). `arms`: the run's arms (harness.store.armset.ArmInfo); the reference is `reference` (an arm id)
    or the arm that declares the `reference` capability; the oracle gap is measured to the arm
    that declares `oracle`. `metrics`: the run's headline recall and nDCG (its metric `settings`)
    unless given."""
    metrics = metrics or headline(settings)[:2]
    recall = headline(settings)[0]
    ids = [a.arm_id for a in arms]
    ref = reference or next((a.arm_id for a in arms if "reference" in a.capabilities), None)
    if ref is None:
        return pd.DataFrame()
    oracle = next((a.arm_id for a in arms if "oracle" in a.capabilities), None)
    others = [a for a in ids if a != ref]
    if tuple(segments) == DEFAULT_SEGMENTS and "split" in labels and labels["split"].nunique() > 1:
        # tuned on one split, held out on another: every figure on each split
        segments = (*segments, *[f"split={s} & turn_index>=2" for s in sorted(labels["split"].unique())])
    frames = []
    measured = set(per_turn["metric"])
    means = TurnMeans(per_turn)  # each arm's turn means grouped once for every segment
    for seg_text in segments:
        seg = parse_segment(seg_text)
        key_set = segment_keys(labels, seg)
        if not key_set:
            continue
        for m in metrics:
            if m not in measured:
                continue
            df = compare_arms(means, m, ref, others, segment_keys=key_set)
            if df.empty:
                continue
            df = df.assign(segment=seg.name)
            if oracle is not None and df["direction"].iloc[0] != "none":
                o = df[df["arm"] == oracle]
                if not o.empty and pd.notna(o["mean_arm"].iloc[0]):
                    df["oracle_gap_closed"] = [oracle_gap_closed(r.mean_ref, r.mean_arm, o["mean_arm"].iloc[0])
                                               if r.arm != oracle else None for r in df.itertuples()]
            frames.append(df)
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    holm_over(out)  # across every comparison of this table
    # cost per recall point relative to the reference: extra USD per turn per +1 point of headline recall
    cost = per_turn[per_turn["metric"] == "cost_usd"].groupby("arm_id")["value"].mean()
    rec = out[(out["metric"] == recall) & (out["segment"] == "all")].set_index("arm")["diff"]
    out["cost_per_recall_point"] = [
        (cost.get(r.arm, float("nan")) - cost.get(ref, float("nan"))) / (100 * rec[r.arm])
        if r.metric == recall and r.segment == "all" and r.arm in rec and rec[r.arm] not in (0,) else float("nan")
        for r in out.itertuples()]
    return out


@pytest.mark.parametrize("name", ["b2b", "handbook", "mtrag"])
def test_session_groups_scored_on_two_processes_equal_one_process_bit_for_bit(demo_runs, tmp_path, name):
    """harness.metrics.fanout: groups scored by two worker processes and merged in order give every
    table of one process's scoring exactly (values, types, row order), and the metrics file its
    row groups."""
    files = {}
    for workers in (1, 2):
        d = tmp_path / f"w{workers}"
        shutil.copytree(demo_runs[name], d)
        score_run(d, group_turns=7, workers=workers)
        files[workers] = d
    names = sorted(p.name for p in files[1].glob("*.parquet"))
    assert names == sorted(p.name for p in files[2].glob("*.parquet")) and "metrics.parquet" in names
    for n in names:
        assert pq.read_table(files[2] / n).equals(pq.read_table(files[1] / n)), n
    one, two = (pq.ParquetFile(files[w] / "metrics.parquet").metadata for w in (1, 2))
    assert [one.row_group(i).num_rows for i in range(one.num_row_groups)] == [
        two.row_group(i).num_rows for i in range(two.num_row_groups)]
