"""Issue 42, build item 8: the report renders every run folder the gate accepts or refuses (a
shard, a merge that lost sessions); refused evidence is shown as refused, never a crash."""
import html
import re

from tests.evidence import BASELINE, copy_run, invoke, sharded, traces, write_traces


def page_text(path) -> str:
    s = re.sub(r"<(style|script).*?</\1>", "", path.read_text(encoding="utf-8"), flags=re.S)
    return re.sub(r" ([:.,;)])", r"\1", " ".join(html.unescape(re.sub(r"<[^>]+>", " ", s)).split()))


def test_the_report_of_a_shard_shows_it_refused(tmp_path):
    shard = sharded(tmp_path / "shard")
    r = invoke("report", BASELINE, shard, "-o", tmp_path / "x.html")
    assert r.exit_code == 0, r.output
    t = page_text(tmp_path / "x.html")
    assert "refused by the gate: shard 0/2 of its run (30 of 50 sessions)" in t
    assert "the gate refuses this candidate unless the policy says `coverage: subset`" in t


def test_the_report_of_a_merge_that_lost_sessions_shows_it_partial(tmp_path):
    run = copy_run(tmp_path / "merged")
    t = traces(run)
    write_traces(run, t[t["session_id"].isin(sorted(set(t["session_id"]))[:40])])  # ten sessions lost, no arm has them
    assert invoke("metrics", run).exit_code == 0
    r = invoke("report", BASELINE, run, "-o", tmp_path / "x.html")
    assert r.exit_code == 0, r.output
    t = page_text(tmp_path / "x.html")
    assert "partial: merged is incomplete" in t and "refused by the gate" in t
