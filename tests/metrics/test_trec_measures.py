"""The measures trec_eval, ir_measures and ranx users report (precision@k, map, map@k, rprec,
bpref, success@k, ndcg, mrr, judged@k, unjudged@k): equal to trec_eval's own test suite per query
and overall (tests/fixtures/trec_eval, its README says where from), to ranx and to ir_measures
(pytrec_eval, i.e. trec_eval's code, and its Judged) where they implement the measure, and to
hand-computed values on the edges (unjudged documents, negative grades, short and empty rankings)."""
import json
import math
import random

import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.analysis.trec_eval import score_run
from harness.cli import app
from harness.metrics.families.ir import score_rankings
from harness.metrics.registry import UnknownMetric, lookup, resolve
from tests.conftest import ROOT

SUITE = ROOT / "tests" / "fixtures" / "trec_eval"
QRELS, RESULTS = SUITE / "qrels.test", SUITE / "results.test"

# what a trec_eval user types -> what it is here; cutoffs are trec_eval's all_trec defaults
CUTS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
TREC_NAMES = {**{f"P_{k}": f"precision@{k}" for k in CUTS}, **{f"map_cut_{k}": f"map@{k}" for k in CUTS},
              **{f"ndcg_cut_{k}": f"ndcg@{k}" for k in CUTS}, **{f"recall_{k}": f"recall@{k}" for k in CUTS},
              **{f"success_{k}": f"success@{k}" for k in (1, 5, 10)}, **{f"unj_{k}": f"unjudged@{k}" for k in (5, 10, 20)},
              "map": "map", "Rprec": "rprec", "bpref": "bpref", "recip_rank": "mrr", "ndcg": "ndcg"}


def expected():
    """out.test.aq as {(trec_eval name, qid): printed value}."""
    out = {}
    for line in (SUITE / "out.test.aq").read_text().splitlines():
        name, qid, value = line.split()
        out[(name, qid)] = value
    return out


def run_cli(*args):
    return CliRunner().invoke(app, ["trec-eval", *args])


def printed(output):
    """harness trec-eval's lines as {(metric, qid): printed value}."""
    rows = [line.split("\t") for line in output.splitlines() if "\t" in line]
    return {(m.strip(), q): v for m, q, v in rows}


@pytest.mark.parametrize("trec_name", list(TREC_NAMES))
def test_trec_eval_test_suite_per_query_and_overall(trec_name):
    """`harness trec-eval -q -m NAME` as a trec_eval user types NAME: every value of trec_eval's
    test suite, per topic and overall, to 4 decimals."""
    r = run_cli("-q", "-m", trec_name, str(QRELS), str(RESULTS))
    assert r.exit_code == 0, r.output
    ours, theirs = printed(r.output), expected()
    for qid in ("301", "302", "303", "all"):
        assert ours[(trec_name, qid)] == theirs[(trec_name, qid)], (trec_name, qid)  # under trec_eval's name
    assert ("num_q", "all") not in ours  # trec_eval -m P.10 prints no num_q either


def _theirs_for(ours: str) -> list[str]:
    """The lines of trec_eval's own output (out.test.aq) for the measures `ours` prints, in its order."""
    names = {line.split("\t")[0].strip() for line in ours.splitlines()}
    return [line for line in (SUITE / "out.test.aq").read_text().splitlines() if line.split("\t")[0].strip() in names]


def test_output_diffs_clean_against_trec_eval_on_its_test_suite():
    """`harness trec-eval -m P_10 -m num_q` and `-q -m all_trec` print, line for line, what
    trec_eval prints for those measures (issue 44, item 7): names, order, layout and values."""
    r = run_cli("-m", "P_10", "-m", "num_q", str(QRELS), str(RESULTS))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [x for x in _theirs_for(r.stdout) if "\tall\t" in x]
    assert r.stdout.splitlines() == ["num_q                 \tall\t3", "P_10                  \tall\t0.3000"]
    r = run_cli("-q", "-m", "all_trec", str(QRELS), str(RESULTS))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == _theirs_for(r.stdout) and len(r.stdout.splitlines()) > 150
    assert {n for n in TREC_NAMES} <= {line.split("\t")[0].strip() for line in r.stdout.splitlines()}
    assert "not computed here: runid, num_ret" in " ".join(r.stderr.split())  # the measures it lacks, named


def test_trec_eval_dotted_cutoffs_are_its_measures():
    r = run_cli("-m", "P.5,10", str(QRELS), str(RESULTS))
    assert r.exit_code == 0, r.output
    assert printed(r.stdout) == {("P_5", "all"): "0.2667", ("P_10", "all"): "0.3000"}


def test_judged_at_k_is_one_minus_unj_on_the_test_suite():
    """judged@k is ir_measures' Judged@k; on the suite (500 documents per topic, no negative
    grade) it equals 1 - trec_eval's unj_k."""
    df = score_run(*_suite(), ["judged@5", "judged@10", "judged@20"])
    theirs = expected()
    for r in df.itertuples():
        k = r.metric.partition("@")[2]
        assert r.value == pytest.approx(1 - float(theirs[(f"unj_{k}", r.qid)]), abs=5e-5)


def _suite():
    from harness.importers.trec import read_trec_qrels, read_trec_run

    return read_trec_qrels(QRELS), read_trec_run(RESULTS)


def test_precision_at_10_and_uncut_reciprocal_rank_are_back():
    r = run_cli("-m", "precision@10", "-m", "mrr", "-m", "mrr@10", str(QRELS), str(RESULTS))
    assert r.exit_code == 0, r.output
    p = printed(r.output)
    assert p[("P_10", "all")] == "0.3000"  # trec_eval's name for trec_eval's measure, however it was asked
    assert p[("recip_rank", "all")] == "0.4064" and p[("mrr@10", "all")] == "0.3889"  # recip_rank has no cutoff


def test_usual_spellings_resolve_to_the_canonical_names():
    cases = {"P@10": "precision@10", "p@10": "precision@10", "P_10": "precision@10", "precision@10": "precision@10",
             "AP": "map", "MAP": "map", "AP@10": "map@10", "map_cut_10": "map@10", "R-prec": "rprec",
             "Rprec": "rprec", "r-precision": "rprec", "Bpref": "bpref", "nDCG@10": "ndcg@10", "NDCG@10": "ndcg@10",
             "ndcg_cut_10": "ndcg@10", "nDCG": "ndcg", "RR": "mrr", "recip_rank": "mrr", "MRR": "mrr",
             "RR@10": "mrr@10", "R@10": "recall@10", "recall_10": "recall@10", "Success@10": "success@10",
             "success_10": "success@10", "hit_rate@10": "success@10", "Judged@10": "judged@10",
             "unj_10": "unjudged@10", " recall@10 ": "recall@10"}
    for spelling, name in cases.items():
        assert resolve(spelling).name == name, spelling
    assert lookup("unj_10").direction == "lower" and lookup("judged@10").direction == "none"  # coverage, not quality
    for bad in ("P_0", "P@x", "recip_rank@10", "rprec@10", "bpref_5", "recal@10"):
        with pytest.raises(UnknownMetric):
            resolve(bad)
    r = run_cli("-m", "unj_10", str(QRELS), str(RESULTS))
    assert r.exit_code == 0 and "unj_10" in r.output and "judged@10" not in r.output  # what it is, not judged@10


def test_unknown_measure_still_exits_2_with_a_suggestion():
    r = run_cli("-m", "P_1O", str(QRELS), str(RESULTS))
    assert r.exit_code == 2 and "unknown metric" in r.output
    r = run_cli("-m", "faithfulness", str(QRELS), str(RESULTS))
    assert r.exit_code == 2 and "ranking" in r.output


# -- against ranx and ir_measures on graded qrels with unretrieved relevant documents ------------

def _random_case(seed, negative=False):
    rng = random.Random(seed)
    docs = [f"d{i:02d}" for i in range(40)]
    qrels, run = {}, {}
    for q in range(30):
        qid = f"q{q:02d}"
        grades = [0, 0, 1, 2, 3] + ([-1] if negative else [])
        judged = {d: rng.choice(grades) for d in rng.sample(docs, rng.randint(3, 15))}
        judged[rng.choice(list(judged))] = rng.choice([1, 2, 3])  # at least one relevant
        if q % 7 == 0:  # no judged non-relevant document at all
            judged = {d: g for d, g in judged.items() if g >= 1}
        qrels[qid] = judged
        ranking = rng.sample(docs, rng.randint(1, 25))
        run[qid] = {d: float(len(ranking) - i) for i, d in enumerate(ranking)}  # strictly decreasing: no tie
    return qrels, run


def _ours(qrels, run, names):
    df = score_run(qrels, run, names)
    return {(r.qid, r.metric): r.value for r in df.itertuples() if r.qid != "all"}


RANX = {"precision@5": "precision@5", "precision@10": "precision@10", "map": "map", "map@10": "map@10",
        "rprec": "r-precision", "success@1": "hit_rate@1", "success@10": "hit_rate@10", "ndcg": "ndcg",
        "ndcg@5": "ndcg@5", "mrr": "mrr", "mrr@3": "mrr@3", "recall@10": "recall@10", "bpref": "bpref"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_equal_to_ranx(seed):
    """ranx through tests/oracle_metrics.ranx_scores: the documents under one-character codes, so
    the kernels ranx compiles for the reference serve here too (a renaming changes no value)."""
    from tests.oracle_metrics import ranx_scores

    qrels, run = _random_case(seed)
    ours = _ours(qrels, run, list(RANX))
    scores = {}
    theirs_all = ranx_scores(qrels, run, list(RANX.values()))
    for name, theirs in RANX.items():
        for qid, v in theirs_all[theirs].items():
            if name == "bpref" and not any(g == 0 for g in qrels[qid].values()):
                continue  # ranx divides by min(R, judged non-relevant) = 0 there; trec_eval special-cases it
            scores[(qid, name)] = v
    assert len(scores) > 300
    for key, v in scores.items():
        assert ours[key] == pytest.approx(v, abs=1e-12), key


IR_MEASURES = {"precision@5": "P@5", "precision@10": "P@10", "map": "AP", "map@10": "AP@10", "rprec": "Rprec",
               "bpref": "Bpref", "success@1": "Success@1", "success@10": "Success@10", "ndcg": "nDCG",
               "ndcg@10": "nDCG@10", "mrr": "RR", "recall@10": "R@10", "judged@5": "Judged@5", "judged@10": "Judged@10"}


@pytest.mark.parametrize("seed", [4, 5])
def test_equal_to_ir_measures_and_pytrec_eval(seed):
    """ir_measures computes P, AP, Rprec, Bpref, Success, nDCG, RR and R with pytrec_eval (trec_eval's
    code) and Judged in Python; negative grades (in the pool, unjudged to trec_eval) included."""
    import ir_measures  # a test dependency (requirements.lock): missing, the test fails, never skips
    qrels, run = _random_case(seed, negative=True)
    ours = _ours(qrels, run, list(IR_MEASURES))
    measures = {ir_measures.parse_measure(v): k for k, v in IR_MEASURES.items()}
    n = 0
    for m in ir_measures.iter_calc(list(measures), qrels, run):
        assert ours[(m.query_id, measures[m.measure])] == pytest.approx(m.value, abs=1e-9), (m.query_id, m.measure)
        n += 1
    assert n == 30 * len(IR_MEASURES)


# -- by hand, on the edges -------------------------------------------------------------------------

def _per_turn(qrels, ranking, names):
    lab = pd.DataFrame([{"session_id": "q", "turn_index": 1, "qrels": json.dumps(qrels), "qrels_measured": True}])
    df = score_rankings(lab, [{"session_id": "q", "turn_index": 1, "ranking": ranking}], names)
    return {r.metric: (r.value, r.unmeasured) for r in df.itertuples()}


def test_bpref_skips_unjudged_and_negative_grades_by_hand():
    # relevant a, b, c (R = 3); judged non-relevant n1, n2 (N = 2); u unjudged; x grade -1 (in the pool, unjudged)
    qrels = {"a": 1, "b": 2, "c": 1, "n1": 0, "n2": 0, "x": -1}
    v = _per_turn(qrels, ["u", "a", "n1", "x", "b", "n2", "u2"], ["bpref"])
    # a: no judged non-relevant above -> 1; b: n1 above -> 1 - 1/min(2, 3); c not retrieved -> 0
    assert v["bpref"][0] == pytest.approx((1 + (1 - 1 / 2)) / 3)


def test_judged_and_unjudged_on_short_and_empty_rankings_by_hand():
    qrels = {"a": 1, "n": 0, "x": -1}
    v = _per_turn(qrels, ["a", "u", "x"], ["judged@10", "unjudged@10", "judged@2", "unjudged@2"])
    assert v["judged@10"][0] == pytest.approx(2 / 3)  # of the 3 retrieved, a and x have a judgment (ir_measures)
    assert v["unjudged@10"][0] == pytest.approx(2 / 10)  # u and x (grade < 0) over the cutoff (trec_eval's unj)
    assert v["judged@2"][0] == pytest.approx(1 / 2) and v["unjudged@2"][0] == pytest.approx(1 / 2)
    v = _per_turn(qrels, [], ["judged@10", "unjudged@10", "precision@10"])
    assert math.isnan(v["judged@10"][0]) and v["judged@10"][1] == "empty ranking"
    assert v["unjudged@10"][0] == 0.0 and v["precision@10"][0] == 0.0


def test_rprec_map_and_uncut_measures_by_hand():
    qrels = {"a": 1, "b": 2, "c": 1}  # R = 3
    v = _per_turn(qrels, ["x", "a", "y", "b"], ["rprec", "map", "map@2", "mrr", "precision@3", "success@1",
                                                  "success@2", "ndcg"])
    assert v["rprec"][0] == pytest.approx(1 / 3)  # one relevant in the top 3
    assert v["map"][0] == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert v["map@2"][0] == pytest.approx((1 / 2) / 3)  # trec_eval's map_cut divides by R
    assert v["mrr"][0] == 0.5 and v["precision@3"][0] == pytest.approx(1 / 3)
    assert v["success@1"][0] == 0.0 and v["success@2"][0] == 1.0
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)  # every relevant document, retrieved or not
    assert v["ndcg"][0] == pytest.approx(dcg / idcg)
    v = _per_turn(qrels, ["a"], ["rprec"])  # fewer retrieved than R
    assert v["rprec"][0] == pytest.approx(1 / 3)


# -- in a run folder: every case of the kernels, on request, by default ---------------------------

EVERY = ["precision@3", "precision@10", "success@1", "success@5", "map", "map@5", "rprec", "ndcg", "ndcg@3", "mrr",
         "mrr@5", "bpref", "judged@3", "judged@10", "unjudged@5", "recall@7"]


def test_every_measure_equals_the_reference_on_every_case(tmp_path):
    """Documents listed twice, empty and missing rankings, n/a, errors, unmeasured turns, graded
    qrels with judged non-relevant documents, repeats: the kernels against ranx and the plain
    reference (tests/oracle_metrics.py), each measure asked for by the run's metrics.measures."""
    from harness.metrics.compute import compute_metrics
    from harness.store.manifest import read_manifest, write_manifest
    from tests.oracle_metrics import reference_metrics
    from tests.metrics.test_metrics_oracle import KEY, _sorted, write_run

    run = write_run(tmp_path / "run", repeats=2, judgments=False)
    man = read_manifest(run)
    write_manifest(run, man.model_copy(update={"metrics": {**man.metrics, "measures": EVERY}}))
    a, b = reference_metrics(run), compute_metrics(run)
    assert set(EVERY) <= set(b.metric_names) and set(a.metric_names) == set(b.metric_names)
    pa, pb = _sorted(a.per_turn, KEY), _sorted(b.per_turn, KEY)
    assert pa[KEY + ["unmeasured"]].equals(pb[KEY + ["unmeasured"]])
    assert pa["value"].to_numpy() == pytest.approx(pb["value"].to_numpy(), abs=1e-12, nan_ok=True)
    reasons = set(pb.loc[pb["metric"].isin(EVERY), "unmeasured"].dropna())
    assert {"no relevance labels", "no relevant document", "error", "empty ranking"} <= reasons


def _imported_run(tmp_path):
    from tests.conftest import write_set

    es = write_set(tmp_path / "set")
    run = tmp_path / "bm25.run"
    run.write_text("s2::1 Q0 d4 1 2.0 x\ns2::1 Q0 d3 2 1.0 x\ns1::1 Q0 d2 1 3.0 x\ns1::1 Q0 d1 2 2.0 x\n")
    r = CliRunner().invoke(app, ["import", "run", str(run), "--eval-set", str(es), "--runs-dir", str(tmp_path / "runs"),
                                 "--run-id", "ext"])
    assert r.exit_code == 0, r.output
    return tmp_path / "runs" / "ext"


def test_harness_metrics_computes_a_measure_on_request_and_judged_at_10_by_default(tmp_path):
    run = _imported_run(tmp_path)
    m = pd.read_parquet(run / "metrics.parquet")
    assert "judged@10" in set(m["metric"]) and "map" not in set(m["metric"])  # judged@10 by default, map on request
    r = CliRunner().invoke(app, ["metrics", str(run), "-m", "AP", "-m", "P_5", "-m", "bpref"])
    assert r.exit_code == 0, r.output
    agg = pd.read_parquet(run / "metrics.parquet").query("kind == 'aggregate' and segment == 'all'")
    means = agg.set_index("metric")["mean"]
    # s1::1 ranks d2, d1 (d1 relevant): AP 1/2, P@5 1/5; s2::1 ranks d4, d3 (both relevant): AP 1, P@5 2/5;
    # s1::2 is missing from the run (an empty ranking): 0
    assert means["map"] == pytest.approx((0.5 + 1 + 0) / 3) and means["precision@5"] == pytest.approx(0.6 / 3)
    assert "bpref" in means and "map" in r.output
    r = CliRunner().invoke(app, ["compare", str(run), str(run), "-m", "ndcg"])
    assert r.exit_code == 2 and f"harness metrics {run} -m ndcg" in r.output  # says how to compute it


def test_a_config_names_further_measures_and_an_unknown_one_is_refused(tmp_path):
    from harness.cli.run import _config
    from harness.config import ConfigError
    from tests.conftest import write_set

    es = write_set(tmp_path / "set")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: t\neval_set: {es}\narms: [original]\nmetrics:\n  measures: [P_10, bpref]\n")
    c, _, _ = _config(cfg, None, None, None, None, None)
    from harness.metrics.registry import ranking_names

    assert ranking_names(c.metrics.model_dump())[-2:] == ["precision@10", "bpref"]
    cfg.write_text(f"name: t\neval_set: {es}\narms: [original]\nmetrics:\n  measures: [P_10, bperf]\n")
    with pytest.raises(ConfigError, match=r"c.yaml:5: metrics.measures.1: unknown metric 'bperf'; did you mean 'bpref'"):
        _config(cfg, None, None, None, None, None)


def test_trec_eval_says_which_queries_of_the_qrels_the_run_lacks(tmp_path):
    """trec_eval's rule (queries absent from the run are not averaged without -c) said where it
    applies: the number missing and what -c does, so a mean over fewer queries is not mistaken
    for the harness's own (issue 30, item 5)."""
    (tmp_path / "q").write_text("a 0 d1 1\nb 0 d2 1\nc 0 d3 1\nz 0 d9 0\n", encoding="utf-8")
    (tmp_path / "r").write_text("a Q0 d1 1 2.0 t\nb Q0 d5 1 2.0 t\n", encoding="utf-8")
    r = run_cli(str(tmp_path / "q"), str(tmp_path / "r"), "-m", "P_1", "-m", "num_q")
    assert r.exit_code == 0, r.output
    assert "the run lacks 1 of the qrels' 3 queries with a relevant document" in r.output and "-c scores them as 0" in r.output
    assert "num_q                 \tall\t2" in r.output
    r = run_cli(str(tmp_path / "q"), str(tmp_path / "r"), "-m", "P_1", "-m", "num_q", "-c")
    assert "-c: 1 of the qrels' 3 queries" in r.output and "num_q                 \tall\t3" in r.output
    (tmp_path / "r").write_text("a Q0 d1 1 2.0 t\nb Q0 d5 1 2.0 t\nc Q0 d3 1 1.0 t\n", encoding="utf-8")
    assert "lacks" not in run_cli(str(tmp_path / "q"), str(tmp_path / "r"), "-m", "P_1").output


def test_trec_eval_names_printed_are_the_ones_the_registry_reads():
    """What trec-eval prints for a measure (analysis/trec_eval.TREC_EVAL) reads back as that
    measure (registry ALIASES), for every cutoff form."""
    from harness.analysis.trec_eval import TREC_EVAL, trec_name

    for name in TREC_EVAL:
        concrete = name.replace("@k", "@10")
        assert resolve(trec_name(concrete)).name == concrete, name
