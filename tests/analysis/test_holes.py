"""Issue 29, items 2 and 4: judged@10 is a coverage figure shown beside the ranking metrics (never a
regression by itself), a candidate whose judged@10 falls more than 0.05 below the baseline's on a
gated segment is warned about, and the hole report (top-10 documents without a judgment for the
turn, and those of them judged relevant for another turn of the same session)."""
import json
from types import SimpleNamespace as NS

import pandas as pd
import pytest

from harness.analysis.pool_warnings import holes_by_arm, judged_warnings
from harness.analysis.verdict import mark
from harness.metrics.families.ir import score_rankings
from harness.metrics.registry import lookup, ranking_names


def test_judged_at_10_is_coverage_never_a_regression():
    m = lookup("judged@10")
    assert m.direction == "none"
    assert mark(m.direction, -0.3, 0.0001) == ""
    assert "judged@10" in ranking_names(None)


def _run(name, values):
    """A scored run's stand-in: per-turn judged@10 of arm `a` on session s, turns 1..n."""
    pt = pd.DataFrame([{"arm_id": "a", "repeat": 0, "session_id": "s", "turn_index": t + 1, "metric": "judged@10",
                        "value": v, "unmeasured": None} for t, v in enumerate(values)])
    labels = pd.DataFrame([{"session_id": "s", "turn_index": t + 1} for t in range(len(values))])
    return NS(name=name, metrics={"judged@10"}, scored=True, turns=lambda ms: pt[pt["metric"].isin(ms)], labels=labels)


def test_a_candidate_judged_much_less_than_the_baseline_is_warned_about():
    pair = NS(label="rewrite", baseline=NS(arm_id="a"), candidate=NS(arm_id="a"))
    base, same, low = _run("base", [1.0, 0.9]), _run("same", [0.98, 0.88]), _run("low", [0.8, 0.8])
    assert judged_warnings(base, same, [pair], ["all"]) == []  # 0.02 lower: within 0.05
    w = judged_warnings(base, low, [pair], ["all"])
    assert len(w) == 1 and "rewrite [all]" in w[0] and "0.80" in w[0] and "0.95" in w[0]
    assert "part of this difference may be unjudged documents" in w[0]
    assert judged_warnings(low, base, [pair], ["all"]) == []  # higher coverage warns of nothing


def _score(rankings, qrels_by_turn, names):
    lab = pd.DataFrame([{"session_id": "s", "turn_index": t, "qrels": json.dumps(q), "qrels_measured": True}
                        for t, q in qrels_by_turn.items()])
    rows = [{"session_id": "s", "turn_index": t, "ranking": r} for t, r in rankings.items()]
    df = score_rankings(lab, rows, names)
    return {(r.turn_index, r.metric): r.value for r in df.itertuples()}


def test_holes_count_unjudged_top_documents_and_those_relevant_for_another_turn():
    qrels = {1: {"a": 1, "n": 0}, 2: {"b": 2, "c": 0}, 3: {"d": 1}}
    # turn 1: a, n judged; b (relevant for turn 2), c (judged 0 for turn 2), u, d (relevant for turn 3) unjudged
    rankings = {1: ["a", "b", "n", "c", "u", "d"], 2: ["b", "a", "x"], 3: ["d"]}
    v = _score(rankings, qrels, ["holes@10", "holes_relevant_elsewhere@10", "holes@2"])
    assert v[(1, "holes@10")] == 4 and v[(1, "holes_relevant_elsewhere@10")] == 2
    assert v[(1, "holes@2")] == 1
    assert v[(2, "holes@10")] == 2 and v[(2, "holes_relevant_elsewhere@10")] == 1  # a is relevant for turn 1
    assert v[(3, "holes@10")] == 0 and v[(3, "holes_relevant_elsewhere@10")] == 0


def test_holes_are_computed_by_default_and_told_per_arm():
    assert {"holes@10", "holes_relevant_elsewhere@10"} <= set(ranking_names(None))
    pt = pd.DataFrame([{"arm_id": "a", "repeat": 0, "session_id": "s", "turn_index": t, "metric": m, "value": v,
                        "unmeasured": None} for t, m, v in [(1, "holes@10", 4), (2, "holes@10", 2),
                                                             (1, "holes_relevant_elsewhere@10", 2),
                                                             (2, "holes_relevant_elsewhere@10", 1)]])
    assert holes_by_arm(pt) == {"a": {"turns": 2, "holes": 6, "relevant_elsewhere": 3}}


def test_the_gate_and_the_reports_verdict_block_carry_the_judged_warning(tmp_path, monkeypatch):
    """End to end on the committed baseline against itself, the comparison forced to warn: the
    warning reaches gate.json and the HTML verdict block (without a policy: the block itself), and
    judged@10 is shown beside the ranking metrics, never marked. In the report the candidate's HQE
    rewrite lost its first turns' rankings, so its row is not collapsed as unchanged."""
    from harness.analysis import gate, verdict
    from tests.evidence import BASELINE, POLICY, copy_run, invoke, traces, write_traces
    from tests.analysis.test_evidence_adversary import damaged, empty, first_turns

    said = "rewrite [all]: judged@10 is 0.50 ... part of this difference may be unjudged documents"
    seen = []

    def fake(base, cand, pairs, segments):
        seen.append(list(segments))
        return [said]

    monkeypatch.setattr(gate, "judged_warnings", fake)
    monkeypatch.setattr(verdict, "judged_warnings", fake)
    r = invoke("gate", "--baseline", BASELINE, "--candidate", BASELINE, "--policy", POLICY, "-o", tmp_path / "g")
    assert r.exit_code == 0, r.output
    assert said in json.loads((tmp_path / "g/gate.json").read_text())["warnings"] and seen[0]
    cand = copy_run(tmp_path / "cand")
    t = traces(cand)
    empty(t, damaged(t, first_turns(cand)))
    write_traces(cand, t)
    assert invoke("metrics", cand).exit_code == 0
    r = invoke("report", BASELINE, cand, "-o", tmp_path / "r.html")
    assert r.exit_code == 0, r.output
    html = (tmp_path / "r.html").read_text()
    block = html[html.index('id="verdict"'):html.index("</section>", html.index('id="verdict"'))]
    assert "part of this difference may be unjudged documents" in block and 'data-metric="judged@10"' in block


# -- item 3: condensed scoring, trec_eval -J ---------------------------------------------------------

def test_judged_only_scores_the_condensed_ranking_by_hand():
    from harness.analysis.trec_eval import score_run

    qrels = {"q": {"a": 1, "b": 1, "n": 0, "x": -1}}
    run = {"q": {"u": 5.0, "a": 4.0, "n": 3.0, "x": 2.0, "b": 1.0}}  # condensed: a, n, b (u unjudged, x negative)
    full = score_run(qrels, run, ["P_2", "recall_2", "recip_rank"]).set_index(["qid", "metric"])["value"]
    cond = score_run(qrels, run, ["P_2", "recall_2", "recip_rank"], judged_only=True).set_index(["qid", "metric"])["value"]
    assert full[("q", "precision@2")] == 0.5 and full[("q", "mrr")] == 0.5
    assert cond[("q", "precision@2")] == 0.5 and cond[("q", "recall@2")] == 0.5 and cond[("q", "mrr")] == 1.0
    cond3 = score_run(qrels, run, ["P_3"], judged_only=True).set_index(["qid", "metric"])["value"]
    assert cond3[("q", "precision@3")] == pytest.approx(2 / 3)


def test_judged_only_on_trec_evals_suite_equals_p10_counted_by_hand():
    """P_10 -J of each topic of tests/fixtures/trec_eval, counted plainly: the run's documents in
    trec_eval's order (score descending, then document id descending), those without a judgment
    dropped, relevant ones among the first 10."""
    from harness.analysis.trec_eval import trec_eval
    from tests.conftest import ROOT

    suite = ROOT / "tests" / "fixtures" / "trec_eval"
    qrels: dict = {}
    for line in (suite / "qrels.test").read_text().splitlines():
        q, _, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
    run: dict = {}
    for line in (suite / "results.test").read_text().splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, []).append((float(s), d))
    df = trec_eval(suite / "qrels.test", suite / "results.test", ["P_10"], judged_only=True)
    got = {r.qid: r.value for r in df.itertuples() if r.qid != "all"}
    for q, docs in run.items():
        kept = [d for s, d in sorted(docs, reverse=True) if d in qrels[q] and qrels[q][d] >= 0][:10]
        assert got[q] == pytest.approx(sum(qrels[q][d] >= 1 for d in kept) / 10), q
