"""The HTML review report of one or more run folders: one self-contained file (plots as base64
PNG, its one script and the DataTables library inlined: harness.report.interactive; no external
URL, no absolute path of the machine that built it). It opens with
the answer (each run's best arm against its reference arm, computed by the analysis stage and
handed in), the evidence (complete or partial runs, tables scored again, failed turns), then the
verdict blocks (candidate − baseline, computed by the analysis stage and handed in), then the
headline, warnings, metrics and plots, the drill-down, and the manifests last. Loads the runs
(harness.report.load), asks each section (harness.report.sections) for its plain data, and renders templates/report.html.j2 and its
partials templates/sections/*.html.j2 with jinja2, autoescape on, so every text from eval sets,
corpora, traces and models is escaped. Reads run folders only; never writes into them, and
computes no metric: what a folder lacks is a warning, and so are stale tables (`harness report`
scores them again before rendering, as every command that reads run folders does:
harness.analysis.evidence)."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from harness import env as _env  # noqa: F401  (offline-safe environment first)
from harness.analysis.pool_warnings import qrels_said
from harness.metrics.families.answers import SHOULD_ABSTAIN
from harness.report import interactive
from harness.report.format import shown_path
from harness.report.limits import DRILL_SESSIONS
from harness.report.load import ReportRun, load_runs
from harness.metrics.stats import STATS
from harness.report.sections import (abstention, agreement, comparisons, drilldown, evidence, guards, headline,
                                     leaders as leaders_, manifests, metrics, rounds, tradeoff, verdict, warnings)
from harness.store.folder import JUDGMENTS, METRICS, TABLES

TEMPLATES = Path(__file__).with_name("templates")
DICT_ATTRIBUTES = frozenset(dir({}))  # what getattr finds on a dict (its methods): jinja returns those first
FILES = {"metrics": METRICS, "judgments": JUDGMENTS, **TABLES}  # the run-folder files the text names


def run_context(run: ReportRun, plots: bool = True, against=None,
                drill_sessions: int = DRILL_SESSIONS) -> dict:
    """One run's part of every section; `against`: its baseline run's key and per-turn values when
    it is a verdict block's candidate (the drill-down marks the turns where it regressed);
    `drill_sessions`: the sessions the drill-down shows turn by turn (0: all)."""
    es = run.manifest.eval_set.model_dump()
    return {
        "key": run.key, "dir": shown_path(run.dir), "eval_set": f"{es.get('name')} {es.get('version')}",
        "n_sessions": int(run.labels["session_id"].nunique()), "n_turns": int(len(run.labels)),
        "metrics": metrics.build(run, plots),
        "tradeoff": tradeoff.build(run, plots),
        "rounds": rounds.build(run, plots),
        "guards": guards.build(run),
        "abstention": abstention.build(run),
        "comparisons": comparisons.build(run),
        "drill": drilldown.build(run, against, sessions=drill_sessions),
        "warnings": warnings.build(run),
        "agreement": agreement.build(run),
        "qrels": qrels_said(run.folder),
    }


def _headline(runs: list[ReportRun]) -> list[str]:
    """The headline metric names the report's prose uses: the runs' own when they share them."""
    names = {tuple(r.headline) for r in runs}
    return list(names.pop()) if len(names) == 1 else ["recall", "nDCG", "MRR"]


def build_context(run_dirs: list[Path], plots: bool = True, verdicts: dict | None = None,
                  leaders: dict | Callable[[], dict] | None = None, drill_sessions: int = DRILL_SESSIONS,
                  checked: dict | None = None) -> dict:
    """`verdicts`: the verdict blocks the analysis stage computed for these runs
    (harness.analysis.verdict.verdicts), or None (the report then says how to get them); `leaders`:
    each run's best arm against its reference (harness.analysis.leaders.leaders), or None likewise,
    or the function that gives them, called once the runs' sections are built (their plots are then
    being drawn when they are drawn elsewhere: harness.report.plotting); `drill_sessions`: see
    run_context; `checked`: the runs the caller loaded already (load_runs)."""
    runs = load_runs([Path(d) for d in run_dirs], checked)
    keys = [r.key for r in runs]
    against = verdict.pairs_of(verdicts, runs)
    v = verdict.build(verdicts, runs)
    per_run = [run_context(r, plots, against.get(r.key), drill_sessions) for r in runs]
    leaders = leaders() if callable(leaders) else leaders
    return {
        "title": "Review report: " + ", ".join(keys),
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run_keys": keys,
        "headline_names": _headline(runs),
        "files": FILES,
        "method": STATS.said(), "alpha": STATS.alpha,
        "top_hits": drilldown.TOP_HITS,
        "abstention_should": sorted(SHOULD_ABSTAIN),
        "leaders": leaders_.build(leaders, runs, v),
        "evidence": evidence.build(runs),
        "verdict": v,
        "manifests": manifests.build(runs),
        "headline": headline.build(runs, leaders_.marks(leaders, runs)),
        "drill_sessions": drill_sessions,
        "runs": per_run,
        "assets": interactive.assets(),
    }


def environment():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    class DictFirst(Environment):
        """`x.name` of a plain dict without an attribute of that name (every key of the sections'
        data) looked up as its key at once: jinja tries the attribute first, and the exception it
        catches cost a third of the rendering. Any other object, or name, as jinja does."""

        def getattr(self, obj, attribute):
            if type(obj) is dict and attribute not in DICT_ATTRIBUTES:
                try:
                    return obj[attribute]
                except KeyError:
                    return self.undefined(obj=obj, name=attribute)
            return super().getattr(obj, attribute)

    env = DictFirst(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                    trim_blocks=True, lstrip_blocks=True)
    env.filters["anchor"] = interactive.anchor
    env.filters["breakable"] = interactive.breakable
    return env


def render_html(context: dict) -> str:
    return environment().get_template("report.html.j2").render(**context)


def render_report(run_dirs: list[Path], out: Path, verdicts: dict | None = None,
                  leaders: dict | Callable[[], dict] | None = None, drill_sessions: int = DRILL_SESSIONS,
                  checked: dict | None = None) -> Path:
    """Write one self-contained HTML report of the run folders to `out`; returns `out`.
    `verdicts`, `leaders`, `drill_sessions`, `checked`: see build_context."""
    html = render_html(build_context(run_dirs, verdicts=verdicts, leaders=leaders, drill_sessions=drill_sessions,
                                     checked=checked))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return out
