"""Human review (sample, ratings) and `import log` with redaction."""
import csv
import json

import pandas as pd
from typer.testing import CliRunner

from harness.cli import app
from harness.importers.log import redact
from tests.conftest import write_set
from tests.run.test_replay_arms import run_tiny, tiny  # noqa: F401  (module fixture)


def test_redaction_keeps_identifiers():
    t = redact("mail jo.doe+x@firm.example, call +49 (0)30 1234-5678 or 0151 23456789, IBAN DE44 5001 0517 5407 3249 31; "
               "part 4711-32, EAN 4006381333931")
    assert "[email]" in t and t.count("[phone]") == 2 and "[iban]" in t
    assert "4711-32" in t and "4006381333931" in t and "@" not in t and "5407" not in t


def test_import_log_redacts_before_writing(tmp_path):
    base = write_set(tmp_path / "base")
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in [
        {"session_id": 7, "turn": 2, "user": "and in A4? mail me at a@b.example", "relevant": ["d3"]},
        {"session_id": 7, "turn": 1, "user": "4711-32 please, my phone is 0151 23456789", "shown": [{"doc_id": "d3", "name": "bolt"}]},
    ]) + "\n")
    r = CliRunner().invoke(app, ["import", "log", str(log), "--corpus-from", str(base), "-o", str(tmp_path / "logset"),
                                 "--name", "prod-log"])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "logset/sessions.jsonl").read_text()
    assert "a@b.example" not in text and "23456789" not in text and "4711-32" in text
    s = json.loads(text.splitlines()[0])
    assert [t["turn_index"] for t in s["turns"]] == [1, 2] and s["turns"][1]["labels"]["qrels"] == {"d3": 1}
    log.write_text('{"session_id": 1, "user": "x"}\nnot json\n')
    r = CliRunner().invoke(app, ["import", "log", str(log), "--corpus-from", str(base), "-o", str(tmp_path / "bad"), "--name", "x"])
    assert r.exit_code == 2 and "log.jsonl:1: turn: missing" in r.output and "log.jsonl:2: (line): invalid JSON" in r.output
    assert not (tmp_path / "bad").exists()


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_sample_and_ratings_round_trip(tiny, tmp_path):  # noqa: F811
    run = run_tiny(tiny, tmp_path, arms=[{"name": "original", "answer": True}, {"name": "concat", "answer": True}])
    r = CliRunner().invoke(app, ["sample", str(run), "--n", "4", "-o", str(tmp_path / "rev")])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(open(tmp_path / "rev/ratings.csv")))
    assert len(rows) == 4 and {x["arm_id"] for x in rows} == {"original(answer=true,depth=100,id_lane=true,lane=hybrid,model=offline)",
                                                               "concat(answer=true,depth=100,id_lane=true,lane=hybrid,max_turns=0,model=offline)"}
    assert "rating_faithful" in rows[0] and (tmp_path / "rev/rating_sheet.html").exists()
    for x in rows:
        x["rating_faithful"] = "1"
    rows[0]["rating_helpful"] = "9"
    write_csv(tmp_path / "rated.csv", rows)
    r = CliRunner().invoke(app, ["import", "ratings", str(run), str(tmp_path / "rated.csv")])
    assert r.exit_code == 2 and "rated.csv:2: rating_helpful: expected 1 to 5" in r.output
    rows[0]["rating_helpful"] = "4"
    write_csv(tmp_path / "rated.csv", rows)
    r = CliRunner().invoke(app, ["import", "ratings", str(run), str(tmp_path / "rated.csv")])
    assert r.exit_code == 0, r.output
    h = pd.read_parquet(run / "human_judgments.parquet")
    assert len(h) == 4 and (h["human_faithful"] == 1.0).all()


def test_report_shows_judge_agreement_with_people(tiny, tmp_path):  # noqa: F811
    from harness.report.render import render_report

    run = run_tiny(tiny, tmp_path, arms=[{"name": "original", "answer": True}])
    t = pd.read_parquet(next((run / "traces").glob("part-*.parquet")))
    fin = t[t["is_final"] & ~t["abstained"].astype(bool)]
    pd.DataFrame({"arm_id": fin["arm_id"], "repeat": fin["repeat"], "session_id": fin["session_id"],
                  "turn_index": fin["turn_index"], "metric": "faithfulness", "value": [1.0, 0.0][: len(fin)] + [1.0] * max(0, len(fin) - 2),
                  "status": "ok"}).to_parquet(run / "judgments.parquet")
    pd.DataFrame({"arm_id": fin["arm_id"], "repeat": fin["repeat"], "session_id": fin["session_id"],
                  "turn_index": fin["turn_index"], "human_faithful": 1.0, "human_helpful": None,
                  "comment": ""}).to_parquet(run / "human_judgments.parquet")
    html = render_report([run], tmp_path / "r.html").read_text()
    n = len(fin)
    agree = (n - (1 if n >= 2 else 0)) / n
    assert f"agrees with\nthe human rating on {agree:.0%} of {n} rated answers" in html
