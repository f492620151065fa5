"""Human review: a stratified sample of answers for people to rate (CSV plus an HTML rating
sheet), and the ratings brought back as human judgments beside the judge's, so a report can
show how far the judge agrees with people."""
from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pandas as pd
from jinja2 import Environment, select_autoescape

from harness.errors import BadInput
from harness.store.folder import RunFolder
from harness.store.traces import read_traces

SAMPLE_COLUMNS = ["sample_id", "arm_id", "repeat", "session_id", "turn_index", "answerability", "question",
                  "answer", "sources", "rating_faithful", "rating_helpful", "comment"]

SHEET = """<!doctype html><html><head><meta charset="utf-8"><title>Rating sheet {{ run }}</title>
<style>body{font-family:sans-serif;max-width:60em;margin:auto}article{border:1px solid #ccc;padding:.5em 1em;margin:1em 0}
.q{font-weight:bold}.src{color:#555;font-size:.9em}</style></head><body>
<h1>Rating sheet: {{ run }}</h1>
<p>Rate each answer in the CSV file beside this sheet: <code>rating_faithful</code> 1 when every statement is
supported by the sources, 0 otherwise; <code>rating_helpful</code> 1 to 5. The sample is stratified by arm, turn
index and answerability.</p>
{% for r in rows %}<article id="{{ r.sample_id }}"><p>#{{ r.sample_id }} · arm <code>{{ r.arm_id }}</code> ·
turn {{ r.turn_index }} · {{ r.answerability }}</p><p class="q">{{ r.question }}</p><p>{{ r.answer }}</p>
<p class="src">{{ r.sources }}</p></article>{% endfor %}</body></html>"""


def sample_answers(run_dir: Path, n: int = 100, seed: int = 0) -> pd.DataFrame:
    """Final rows with an answer, stratified by (arm, turn index bucket, answerability): strata
    share the sample evenly, a deterministic hash decides within a stratum."""
    run_dir = Path(run_dir)
    t = read_traces(run_dir, ["arm_id", "repeat", "session_id", "turn_index", "is_final", "answer", "answer_doc_ids",
                              "abstained", "original_query"]).to_pandas()
    t = t[t["is_final"] & t["answer"].notna()]
    labels = RunFolder(run_dir).labels()[["session_id", "turn_index", "answerability", "user"]]
    t = t.merge(labels, on=["session_id", "turn_index"], how="left")
    if t.empty:
        return pd.DataFrame(columns=SAMPLE_COLUMNS)
    t["bucket"] = t["turn_index"].clip(upper=4)
    t["h"] = [hashlib.sha256(f"{seed}|{a}|{r}|{s}|{i}".encode()).hexdigest() for a, r, s, i in
              zip(t["arm_id"], t["repeat"], t["session_id"], t["turn_index"])]
    groups = [g.sort_values("h") for _, g in t.groupby(["arm_id", "bucket", t["answerability"].fillna("?")], sort=True)]
    picked, i = [], 0
    while len(picked) < n and any(i < len(g) for g in groups):  # round robin over strata
        for g in groups:
            if i < len(g) and len(picked) < n:
                picked.append(g.iloc[i])
        i += 1
    out = pd.DataFrame(picked)
    return pd.DataFrame({
        "sample_id": [f"r{k:04d}" for k in range(len(out))], "arm_id": out["arm_id"].values, "repeat": out["repeat"].values,
        "session_id": out["session_id"].values, "turn_index": out["turn_index"].values,
        "answerability": [a if isinstance(a, str) else "" for a in out["answerability"]],
        "question": [u if isinstance(u, str) and u else q for u, q in zip(out["user"], out["original_query"])],
        "answer": out["answer"].values, "sources": [" ".join(list(x)) for x in out["answer_doc_ids"]],
        "rating_faithful": "", "rating_helpful": "", "comment": ""})


def write_sample(df: pd.DataFrame, out_dir: Path, run_name: str) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, html_path = out_dir / "ratings.csv", out_dir / "rating_sheet.html"
    df.to_csv(csv_path, index=False, quoting=csv.QUOTE_NONNUMERIC)
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    html_path.write_text(env.from_string(SHEET).render(run=run_name, rows=df.to_dict("records")), encoding="utf-8")
    return csv_path, html_path


class RatingsError(BadInput, ValueError):
    pass


def import_ratings(run_dir: Path, ratings_csv: Path) -> Path:
    """Rated CSV -> the run folder's human judgments; bad rows name line and field."""
    folder = RunFolder(run_dir).require()
    folder.read_manifest()  # a run folder whose manifest can be read, or an error naming it
    rows, problems = [], []
    with open(ratings_csv, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("arm_id", "session_id", "turn_index", "rating_faithful") if c not in (reader.fieldnames or [])]
        if missing:
            raise RatingsError(f"{ratings_csv}: missing column(s) {', '.join(missing)} (the sample CSV of `harness sample`)")
        for no, r in enumerate(reader, start=2):
            raw = (r.get("rating_faithful") or "").strip()
            if raw == "":
                continue  # not rated (yet)
            if raw not in ("0", "1"):
                problems.append(f"{ratings_csv}:{no}: rating_faithful: expected 0 or 1, got {raw!r}")
                continue
            helpful = (r.get("rating_helpful") or "").strip()
            if helpful and helpful not in ("1", "2", "3", "4", "5"):
                problems.append(f"{ratings_csv}:{no}: rating_helpful: expected 1 to 5, got {helpful!r}")
                continue
            rows.append({"arm_id": r["arm_id"], "repeat": int(r.get("repeat") or 0), "session_id": r["session_id"],
                         "turn_index": int(r["turn_index"]), "human_faithful": float(raw),
                         "human_helpful": float(helpful) if helpful else None, "comment": r.get("comment") or ""})
    if problems:
        raise RatingsError("\n".join(problems))
    return folder.write_human_judgments(pd.DataFrame(rows, columns=[
        "arm_id", "repeat", "session_id", "turn_index", "human_faithful", "human_helpful", "comment"]))


def judge_agreement(run_dir: Path) -> dict | None:
    """Agreement of the judge's faithfulness (>= 0.5 counts as faithful) with people's ratings."""
    folder = RunFolder(run_dir)
    if not folder.has_human_judgments() or not folder.has_judgments():
        return None
    h, j = folder.human_judgments(), folder.judgments()
    j = j[(j["metric"] == "faithfulness") & j["value"].notna()]
    m = h.merge(j, on=["arm_id", "repeat", "session_id", "turn_index"])
    if m.empty:
        return {"n": 0, "agreement": None}
    agree = ((m["value"] >= 0.5).astype(float) == m["human_faithful"]).mean()
    return {"n": int(len(m)), "agreement": float(agree),
            "judge_mean": float(m["value"].mean()), "human_mean": float(m["human_faithful"].mean())}

