"""Issue 42, statistics (observations 6-8): one engine, the same CI and p for one comparison in
compare, gate.json, gate.md and the report's data; an exact sign-flip test on few sessions; a p at
the resolution limit printed as a bound; a change that did nothing never called a regression."""
from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis.compare import compare_data, compare_within, to_markdown
from harness.analysis.evidence import check_run
from harness.analysis.explain import explain
from harness.analysis.gate import evaluate
from harness.analysis.gate_report import write_outputs
from harness.analysis.policy import load_policy
from harness.analysis.verdict import block
from harness.metrics.stats import randomization_of_sums

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "runs" / "baselines" / "b2b"
POLICY = ROOT / "configs" / "gate.yaml"


@pytest.fixture(scope="module")
def last_n_2(tmp_path_factory) -> Path:
    """The b2b demo config with the rewrite arms' last_n 4 -> 2, replayed offline: a change that did
    (almost) nothing (W/T/L 4/196/4 on recall@10)."""
    tmp = tmp_path_factory.mktemp("lastn")
    text = (ROOT / "configs" / "b2b.yaml").read_text(encoding="utf-8")
    text = text.replace("eval_sets/b2b-shop", str(ROOT / "eval_sets" / "b2b-shop"))
    text = re.sub(r"^  - rewrite +#", "  - {name: rewrite, last_n: 2}  #", text, flags=re.M)
    text = text.replace("method: rules, label", "method: rules, last_n: 2, label")
    assert text.count("last_n: 2") == 2
    cfg = tmp / "b2b.yaml"
    cfg.write_text(text, encoding="utf-8")
    subprocess.run([str(Path(sys.executable).parent / "harness"), "run", str(cfg), "--run-id", "lastn2", "-q"], cwd=tmp,
                   check=True, capture_output=True, env={**__import__("os").environ, "HARNESS_HOME": str(tmp)})
    return tmp / "runs" / "lastn2"


def test_exact_sign_flip_equals_the_enumeration():
    sums = np.array([0.3, -0.1, 0.2, 0.5, 0.05, 0.12, -0.04])
    observed = abs(sums.sum())
    flips = [abs(np.dot(e, sums)) >= observed - 1e-12 for e in itertools.product([-1, 1], repeat=len(sums))]
    assert randomization_of_sums(sums) == sum(flips) / 2 ** len(sums)
    assert randomization_of_sums(sums, seed=1) == randomization_of_sums(sums, seed=2)  # no draw: exact


def test_a_p_at_the_resolution_limit_is_printed_as_a_bound():
    c = compare_within(BASE, "original", ["ndcg@10"], ["all"], ["rewrite rules"])
    row = c.table.iloc[0]
    assert row["p"] <= row["p_floor"] * (1 + 1e-9)  # the test's smallest value: not evidence of its size
    md = to_markdown(c, "b2b")
    line = next(x for x in md.splitlines() if "rewrite rules" in x and "ndcg@10" in x)
    cells = [x.strip() for x in line.split("|")]
    assert cells[10].startswith("≤") and cells[11].startswith("≤")  # p and pHolm: bounds, not values
    assert "pHolm over 1 comparison" in md  # the family a Holm p is adjusted over is named


def _same(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=0, abs=1e-12)


def test_one_comparison_has_one_ci_and_p_everywhere(last_n_2, tmp_path):
    base, cand = check_run(BASE), check_run(last_n_2)
    table = compare_data([base, cand], ["recall@10"], ["all"]).table
    row = table[table["label"] == "rewrite"].iloc[0]
    v = evaluate(BASE, last_n_2, load_policy(POLICY))
    rule = next(r for r in v["results"] if r["name"] == "rule 1: noninferiority recall@10 [all] rewrite")
    write_outputs(v, tmp_path)
    js = next(r for r in json.loads((tmp_path / "gate.json").read_text())["results"] if r["name"] == rule["name"])
    b = block(base, cand, None, [], None, None)
    cell = next(lab for lab in b["labels"] if lab["label"] == "rewrite")["rows"][0]["cells"]["recall@10"]
    for where in (rule, js):
        assert _same(where["ci"][0], row["ci_lo"]) and _same(where["ci"][1], row["ci_hi"])
        assert _same(where["p"], row["p"])
    assert _same(cell["ci_lo"], row["ci_lo"]) and _same(cell["ci_hi"], row["ci_hi"]) and _same(cell["p"], row["p"])
    md = (tmp_path / "gate.md").read_text()
    assert f"[{row['ci_lo']:+.4f}, {row['ci_hi']:+.4f}], p {row['p']:.4f}" in md
    assert cell["holm_family"].startswith("pHolm over ")


def test_a_change_that_did_nothing_is_never_a_regression(last_n_2, tmp_path):
    v = evaluate(BASE, last_n_2, load_policy(POLICY))
    assert v["status"] == 1 and v["verdict"] == "insufficient data"
    rule = next(r for r in v["results"] if r["name"] == "rule 1: noninferiority recall@10 [all] rewrite")
    assert rule["status"] == "insufficient"
    assert re.search(r"insufficient data: this set can show a drop of at most 0\.06\d+ with 50 sessions", rule["detail"])
    assert re.search(r"about \d+ sessions would be needed", rule["detail"])
    assert not [r for r in v["results"] if r["kind"] == "rule" and r["status"] == "fail"]
    write_outputs(v, tmp_path)
    assert "regression" not in (tmp_path / "gate.md").read_text().splitlines()[0].lower()


def test_explain_states_each_rules_power_before_anything_runs(last_n_2):
    x = explain(BASE, last_n_2, load_policy(POLICY))
    row = next(r for r in x["rows"] if r["check"] == "rule 1" and r["label"] == "rewrite")
    assert row["detectable"] == pytest.approx(0.0648, abs=5e-4)
    assert "can show a drop of at most 0.06" in row["will"]


LITERAL = re.compile(r"(n_resamples|n_permutations|N_RESAMPLES|N_PERMUTATIONS)\s*(:\s*\w+\s*)?=\s*[\d.]+|"
                     r"\b(alpha|ALPHA)\s*(:\s*\w+\s*)?=\s*0\.0[15]\b|"
                     r"\b(?:1|2|5|10|20)_?000\b\s*#.*(?:resampl|permut)|p_holm\s*<\s*0\.05")


def test_statistics_constants_have_one_home():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in sorted((ROOT / "harness").rglob("*.py"))
             if p.name != "defaults.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if LITERAL.search(line)]
    assert not found, "statistics constants outside harness/defaults.py:\n" + "\n".join(found)
