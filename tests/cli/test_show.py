"""`harness show RUN SESSION [TURN]`: the drill-down of one turn in a terminal (issue 44, item 5):
per arm the queries it issued, its filters, its top 5 with relevance marks and its metric values,
at 80 and 120 columns; unknown sessions, turns and arms exit 2 with what there is."""
import json

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from harness.cli import app
from harness.store.folder import RunFolder
from harness.store.traces import read_traces
from tests.conftest import ROOT

B2B = ROOT / "runs/baselines/b2b"
LABELS = ["original", "concat", "rewrite", "rewrite rules", "multi_query_rrf", "rewrite_adaptive", "rewrite_hyde",
          "oracle"]


def show(*args, columns=120):
    return CliRunner().invoke(app, ["show", *map(str, args)], env={"COLUMNS": str(columns)})


def _blocks(text: str) -> dict[str, str]:
    """Each arm's block of lines, by label (a wrapped line joined to the one it continues)."""
    out, label = {}, None
    for line in text.splitlines():
        if line.startswith("── "):
            label = line[3:].strip()
            out[label] = ""
        elif label is not None:
            out[label] += ("\n" if line.startswith("  ") else " ") + line.strip()
    return out


@pytest.mark.parametrize("columns", [80, 120])
def test_show_prints_each_arms_query_filters_top_5_and_metrics(columns):
    r = show(B2B, "b2b-m01", 2, columns=columns)
    assert r.exit_code == 0, r.output
    assert all(cell_len(x) <= columns and x == x.rstrip() for x in r.output.splitlines()), r.output
    assert "user: the second one in 60 mm?" in r.output and "relevant: p0014 [2], p0019 [1]" in r.output
    blocks = _blocks(r.output)
    assert list(blocks) == LABELS
    t = read_traces(B2B).to_pandas()
    t = t[(t["session_id"] == "b2b-m01") & (t["turn_index"] == 2) & t["is_final"]]
    qrels = json.loads(RunFolder(B2B).labels().set_index(["session_id", "turn_index"]).loc[("b2b-m01", 2), "qrels"])
    by_label = {a["label"]: a["arm_id"] for a in RunFolder(B2B).read_manifest().arms}
    for label, text in blocks.items():
        row = t[t["arm_id"] == by_label[label]].iloc[0]
        for q in row["issued_queries"]:
            assert f"query: {q}" in text, (label, q)
        assert "filters: assortment eq A-industrial" in text  # the account's filters, applied by every arm
        hits = [x.strip() for x in text.splitlines() if x.strip()[:2] in {f"{i}." for i in range(1, 6)}]
        assert len(hits) == min(5, len(row["ranking"]))
        for i, (hit, doc) in enumerate(zip(hits, row["ranking"]), 1):
            g = qrels.get(doc)
            mark = "[?] unjudged" if g is None else f"[{g}] relevant" if g >= 1 else f"[{g}] not relevant"
            assert hit == f"{i}. {doc} {mark}", (label, hit)
        assert "recall@10 " in text and "ndcg@10 " in text and "mrr@10 " in text


def test_show_only_the_arms_asked_for():
    r = show(B2B, "b2b-m01", 2, "--arms", "original, multi_query_rrf")
    assert r.exit_code == 0, r.output
    assert list(_blocks(r.output)) == ["original", "multi_query_rrf"]


@pytest.mark.parametrize("args, said", [
    (["b2b-m01x", "2"], "session 'b2b-m01x' is not in this run; did you mean 'b2b-m01'?"),
    (["b2b-m01", "9"], "session 'b2b-m01' has no labelled turn 9 (its turns: 1, 2, 3, 4, 5)"),
    (["b2b-m01", "2", "--arms", "multi_query"], "arm 'multi_query' is not in this run; did you mean 'multi_query_rrf'?"),
])
def test_unknown_names_exit_2_with_a_suggestion(args, said):
    r = show(B2B, *args)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert said in " ".join(r.output.split())
