"""`harness compare` without -o writes into a folder named for what it compares, so a second
comparison never replaces the first's tables silently (issue 44, item 7); with -o it says when it
replaced earlier tables."""
from typer.testing import CliRunner

from harness.cli import app
from tests.analysis.test_compare_gate import ARM, make_run


def _compare(*args):
    return CliRunner().invoke(app, ["compare", *map(str, args), "-m", "recall@10", "-s", "all"])


def test_two_comparisons_keep_their_own_tables(tmp_path, monkeypatch):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, shift=0.1, seed=3)
    d = make_run(tmp_path, "other", {ARM: {"rewrite": "offline"}}, shift=-0.1, seed=4)
    monkeypatch.chdir(tmp_path)
    r1, r2 = _compare(b, c), _compare(b, d)
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    first, second = tmp_path / "reports/compare/base_vs_cand", tmp_path / "reports/compare/base_vs_other"
    assert (first / "compare.md").is_file() and (second / "compare.csv").is_file()
    assert "| cand |" in (first / "compare.md").read_text() and "| cand |" not in (second / "compare.md").read_text()
    assert "saved: reports/compare/base_vs_cand/compare.md" in " ".join(r1.output.split())  # where it wrote


def test_an_explicit_folder_says_it_replaced_earlier_tables(tmp_path):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, shift=0.1, seed=3)
    out = tmp_path / "cmp"
    assert "saved:" in _compare(b, c, "-o", out).output
    r = _compare(b, c, "-o", out)
    assert r.exit_code == 0 and "replaced:" in r.output
