"""Issue 42, statistics as a new user meets them (observations 6, 7, 8): one comparison prints the same
CI and p in the terminal, gate.md, gate.json and the report, each Holm p names its family, a p at the
Monte Carlo test's resolution says so, few sessions get the exact sign-flip distribution, and a change
that did nothing (`last_n 4 -> 2` on the b2b baseline) is never called a regression."""
from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pandas as pd
import pytest

from harness.metrics.signflip import p_said
from harness.metrics.stats import STATS, randomization_of_sums
from tests.evidence import BASELINE, copy_run, gate, invoke, manifest, traces, write_manifest, write_traces
from tests.conftest import ROOT

LAST_N2 = ROOT / "tests/fixtures/b2b_rewrite_last_n2.json"
HQE = "rewrite(answer=false,budget_ms=0,decide=false,depth=100,id_lane=true,lane=hybrid,last_n=4,method=hqe,"


def last_n2(dst):
    """The b2b baseline with its `rewrite` arm replayed at last_n 2 (the fixture holds the first 20
    documents of every turn whose ranking the replay changed; the rest of each ranking follows)."""
    run = copy_run(dst)
    man = manifest(run)
    old = next(a for a in man["arms"] if a["arm_id"].startswith(HQE))
    new_id = old["arm_id"].replace("last_n=4", "last_n=2")
    old.update(arm_id=new_id, params={**old["params"], "last_n": 2})
    man["run_id"] = run.name
    write_manifest(run, man)
    t = traces(run)
    moved = json.loads(LAST_N2.read_text(encoding="utf-8"))["rankings"]
    mine = t["arm_id"].str.startswith(HQE)
    for i in t.index[mine & t["is_final"]]:
        top = moved.get(f"{t.at[i, 'session_id']}|{t.at[i, 'turn_index']}")
        if top is not None:
            t.at[i, "ranking"] = top + [d for d in t.at[i, "ranking"] if d not in top]
    t.loc[mine, "arm_id"] = new_id
    t.loc[mine, "params"] = t.loc[mine, "params"].str.replace('"last_n":4', '"last_n":2')
    t["run_id"] = run.name
    write_traces(run, t, parts=2)
    assert invoke("metrics", run).exit_code == 0
    return run


@pytest.fixture(scope="module")
def cand(tmp_path_factory):
    return last_n2(tmp_path_factory.mktemp("stats") / "cand")


def test_exact_sign_flip_equals_hand_enumeration():
    """Few sessions: every one of the 2^S sign patterns, not a Monte Carlo floor."""
    sums = np.array([0.5, 0.25, -0.125, 1.0, 0.375])
    observed = abs(sums.sum())
    patterns = list(itertools.product((-1, 1), repeat=len(sums)))
    by_hand = sum(abs(np.dot(e, sums)) >= observed - 1e-12 for e in patterns) / len(patterns)
    test = randomization_of_sums(sums)
    assert test.exact and test.p == by_hand == 4 / 32
    assert test.resolution == 2 / 32 and not test.at_resolution
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 12):
        s = rng.normal(size=n)
        hand = np.mean([abs(np.dot(e, s)) >= abs(s.sum()) - 1e-12 for e in itertools.product((-1, 1), repeat=n)])
        assert randomization_of_sums(s).p == pytest.approx(hand, abs=1e-15)


def test_monte_carlo_above_the_exact_limit_and_its_resolution_said():
    sums = np.ones(STATS.exact_max_sessions + 10)
    test = randomization_of_sums(sums)
    assert not test.exact and test.p == 1 / (1 + STATS.n_permutations) and test.at_resolution
    floor = test.resolution
    assert p_said(test.p, floor) == "<0.0001 (resolution)"
    assert p_said(0.0123) == "0.0123" and p_said(0.0042, floor, adjusted=True) == "≤0.0042 (resolution)"


def test_b2b_compare_labels_resolution_and_holm_family(tmp_path):
    """Observation 6: every significant b2b row showed `p 0.028`, the floor of the permutations times
    the Holm family, as if it were evidence; a Holm p beside a CI without naming its family."""
    r = invoke("compare", BASELINE, "--reference", "original", "-o", tmp_path)
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "(resolution)" in flat and "0.028" not in flat
    assert re.search(r"pHolm: Holm over the \d+ quality comparisons of this table", flat), flat[:2000]
    md = (tmp_path / "compare.md").read_text(encoding="utf-8")
    assert "| p | pHolm |" in md and "10,000 resamples, seed 0" in md


def test_within_run_compare_equals_the_scored_comparisons_table(tmp_path):
    """Observation 7: b2b `rewrite rules` vs `original` ndcg@10 was [+0.406, +0.511] in the terminal and
    [+0.403, +0.511] in the report (2,000 resamples at scoring, 5,000 in compare)."""
    from harness.analysis.compare import compare_within

    run = copy_run(tmp_path / "b2b")
    assert invoke("metrics", run).exit_code == 0
    table = pd.read_parquet(run / "comparisons.parquet")
    c = compare_within(run, "original", ["ndcg@10"], ["all"]).table
    arm = next(a["arm_id"] for a in manifest(run)["arms"] if a["label"] == "rewrite rules")
    mine = table[(table["arm"] == arm) & (table["metric"] == "ndcg@10") & (table["segment"] == "all")].iloc[0]
    theirs = c[c["label"] == "rewrite rules"].iloc[0]
    for k in ("diff", "ci_lo", "ci_hi", "p"):
        assert mine[k] == pytest.approx(theirs[k], abs=1e-12), k


def test_last_n_change_is_insufficient_data_never_regression(cand, tmp_path):
    """Observation 8: `last_n 4 -> 2` (W/T/L 4/196/4 on recall@10) failed rule 1 as REGRESSION on a set
    whose smallest detectable difference (0.065) is three times the margin (0.02)."""
    r = gate(tmp_path / "g", BASELINE, cand)
    v = json.loads((tmp_path / "g/gate.json").read_text(encoding="utf-8"))
    assert r.exit_code == 1 and v["verdict"] == "insufficient data", r.output
    assert "Gate: INSUFFICIENT DATA (exit 1: regression or insufficient data)" in r.output
    rule1 = next(x for x in v["results"] if x["name"] == "rule 1: noninferiority recall@10 [all] rewrite")
    assert rule1["status"] == "insufficient" and rule1["mde"] > 0.02
    assert re.search(r"insufficient data: with 50 sessions the smallest drop this set can show is 0\.06\d\d "
                     r"\(more than max_drop 0\.02\); about \d+ sessions would be needed", rule1["detail"])
    assert not [x for x in v["results"] if x["status"] == "fail"]
    md = (tmp_path / "g/gate.md").read_text(encoding="utf-8")
    assert "## Gate: ❌ insufficient data" in md and "regression" not in md.split("\n")[0]


def test_explain_states_power_per_rule(cand, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # a cell per line: the power of each rule read whole
    r = invoke("gate", "--baseline", BASELINE, "--candidate", cand, "--policy", ROOT / "configs/gate.yaml",
               "--explain")
    flat = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "smallest drop each rule can show" in flat
    assert len(re.findall(r"smallest drop this set can show is 0\.0\d+", flat)) >= 6


def test_one_comparison_same_numbers_everywhere(cand, tmp_path, monkeypatch):
    """Observation 7: the terminal, gate.md, gate.json and the report show the same CI and p."""
    g = gate(tmp_path / "g", BASELINE, cand)
    assert g.exit_code == 1
    v = json.loads((tmp_path / "g/gate.json").read_text(encoding="utf-8"))
    res = next(x for x in v["results"] if x["name"] == "rule 4: noninferiority ndcg@10 [all] rewrite")
    lo, hi = res["ci"]
    p = p_said(res["p"], res.get("p_floor"))
    md = (tmp_path / "g/gate.md").read_text(encoding="utf-8")
    row = next(line for line in md.splitlines() if line.startswith(f"| {res['name']} |"))
    assert f"95% CI [{lo:+.4f}, {hi:+.4f}], p {p}" in row
    assert f"Each rule: {STATS.said()}" in md and v["statistics"]["n_resamples"] == STATS.n_resamples
    monkeypatch.setenv("COLUMNS", "400")
    c = invoke("compare", BASELINE, cand, "-m", "ndcg@10", "-s", "all", "-o", tmp_path / "c")
    line = next(x for x in c.output.splitlines() if "rewrite " in x and "ndcg@10" in x and "rules" not in x)
    assert f"[{lo:+.3f}, {hi:+.3f}]" in line and p_said(res["p"], res.get("p_floor")) in line, line
    csv = pd.read_csv(tmp_path / "c/compare.csv")
    row = csv[(csv["label"] == "rewrite") & (csv["metric"] == "ndcg@10")].iloc[0]
    assert (row["ci_lo"], row["ci_hi"], row["p"]) == pytest.approx((lo, hi, res["p"]), abs=1e-12)
    out = tmp_path / "r.html"
    rep = invoke("report", BASELINE, cand, "--policy", ROOT / "configs/gate.yaml", "-o", out)
    assert rep.exit_code == 0, rep.output
    html = out.read_text(encoding="utf-8")
    cell = re.search(r'data-label="rewrite" data-segment="all">.*?data-metric="ndcg@10".*?</td>', html, re.S).group(0)
    text = re.sub(r"<[^>]+>", "", cell)  # the cell's words, without the spans that keep them whole on a line
    assert f"[{lo:+.3f}, {hi:+.3f}] p {p_said(res['p'], res.get('p_floor'), digits=3)}" in text, cell


def test_a_ci_and_a_p_that_disagree_are_said(tmp_path):
    """Observation 6 (handbook-de's oracle recall@10, 6/54/1 turns): the 95% CI excludes 0, the raw
    p is 0.0642. Both are right for their method; the table said nothing, so the reader saw a
    significant CI beside a p that is not."""
    from harness.analysis.compare import disagreements

    row = {"label": "oracle", "metric": "recall@10", "segment": "all", "diff": 0.074, "ci_lo": 0.008, "ci_hi": 0.148,
           "p": 0.0642, "p_floor": None, "wins": 6, "ties": 54, "losses": 1}
    agree = {**row, "label": "rewrite", "ci_lo": -0.01, "p": 0.3}
    notes = disagreements(pd.DataFrame([row, agree]))
    assert notes == ["oracle recall@10 [all]: the 95% CI [+0.008, +0.148] excludes 0 but p 0.0642 is not below 0.05: "
                     "the session bootstrap and the sign-flip test part near the edge (W/T/L 6/54/1 turns): read it "
                     "as borderline (docs/statistics.md)"], notes
