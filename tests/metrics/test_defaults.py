"""One place for defaults (issue 27): the headline metrics come from the registry and the run's own
metric settings. With `cutoffs: [5, 20]` (no recall@10) every command's tables and every section of
the report still show every arm; the report's trade-off section dropped them all before."""
import re

import pytest

from harness.metrics.registry import headline, judged
from tests.evidence import copy_run, invoke, manifest, write_manifest

LABELS = ["original", "concat", "rewrite", "rewrite rules", "multi_query_rrf", "rewrite_adaptive", "rewrite_hyde",
          "oracle"]


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    """The committed b2b baseline with `metrics: {cutoffs: [5, 20]}`, scored again."""
    tmp = tmp_path_factory.mktemp("cutoffs")
    run = copy_run(tmp / "cut")
    m = manifest(run)
    m["metrics"] = {"cutoffs": [5, 20], "ndcg_at": 10, "mrr_at": 10}
    m["config"]["metrics"] = m["metrics"]
    write_manifest(run, m)
    r = invoke("metrics", run)
    assert r.exit_code == 0, r.output
    return run, r.output


def test_the_headline_follows_the_settings():
    assert headline(None) == ["recall@10", "ndcg@10", "mrr@10"]
    assert headline({"cutoffs": [5, 20], "ndcg_at": 5, "mrr_at": 20}) == ["recall@5", "ndcg@5", "mrr@20"]
    assert headline({"cutoffs": [20, 100], "ndcg_at": 10, "mrr_at": 10})[0] == "recall@20"
    assert judged() == ["faithfulness", "response_relevancy"]


def test_metrics_prints_every_arm_at_the_runs_cutoffs(cut):
    _, out = cut
    assert "recall@5 on b2b-shop" in out and "recall@10" not in out
    table = out[out.index("recall@5 on b2b-shop"):out.index("ndcg@10 on b2b-shop")]
    for lab in LABELS:
        assert lab in table, lab


def test_compare_defaults_to_the_runs_headline(cut, tmp_path):
    run, _ = cut
    r = invoke("compare", run, run, "-o", tmp_path / "cmp")
    assert r.exit_code == 0, r.output
    csv = (tmp_path / "cmp/compare.csv").read_text()
    assert "recall@5" in csv and "recall@10" not in csv
    assert all(lab in csv for lab in LABELS)


def test_no_section_of_the_report_drops_an_arm(cut, tmp_path):
    run, _ = cut
    r = invoke("report", run, run, "-o", tmp_path / "r.html")
    assert r.exit_code == 0, r.output
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    for name in ("verdict", "headline", "metrics", "tradeoff", "comparisons", "drilldown"):
        sec = html[html.index(f'<section id="{name}">'):].split("</section>", 1)[0].replace("<wbr>", "")
        missing = [lab for lab in LABELS if not re.search(rf">{re.escape(lab)}(<| )", sec)]
        assert not missing, (name, missing)
    trade = html[html.index('<section id="tradeoff">'):].split("</section>", 1)[0]
    assert "Recall@5 versus cost" in trade and "No arm with a measured" not in trade
