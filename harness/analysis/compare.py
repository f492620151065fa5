"""Compare runs: every arm of each run paired with the first run's arm of the same label
(harness.analysis.pairing), per metric and segment, the paired difference with session-level bootstrap
CIs, randomization p-values corrected by Holm across the table, and wins/ties/losses by the
metric's direction (harness.metrics.registry). Reads run folders only (their metrics' per-turn
rows, labels and manifest). Rendering (Markdown, CSV) is separate from computing."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.errors import BadInput
from harness.analysis.evidence import (EvidenceError, Incomplete, check_run, coverage_notes, eval_set_files_differ,
                                       label_differences, lost_turns)
from harness.store.folder import RunData
from harness.metrics.registry import Metric, UnknownMetric, is_coverage, on_request, resolve
from harness.metrics.segments import SegmentError, check_segment
from harness.analysis.pairing import Pair, PairingError, find_arm, pair_runs
from harness.analysis.split import Split
from harness.analysis.unchanged import collapse, kept, said as unchanged_said, unchanged
from harness.store.armset import changes
from harness.metrics.signflip import p_said
from harness.metrics.stats import STATS, compare_arms, holm_over, holm_said, p_cells


class CompareError(BadInput, ValueError):
    """Bad input or usage (exit 2)."""


def load_run(path: Path, complete: bool = True) -> RunData:
    """A checked, scored run folder (harness.analysis.evidence.check_run: readable, fresh and,
    with `complete`, complete); bad input as CompareError."""
    try:
        return check_run(path, complete)
    except (EvidenceError, ValueError) as e:
        raise CompareError(str(e)) from None


def check_same_evalset(runs: list[RunData], allow_different: bool) -> None:
    """One eval set (name, version, content hash) and the same labels on the splits the runs share;
    CompareError otherwise, unless `allow_different`."""
    first = runs[0].manifest.eval_set
    for r in runs[1:]:
        es = r.manifest.eval_set
        if (es.name, es.version, es.hash) != (first.name, first.version, first.hash) and not allow_different:
            raise CompareError(f"{runs[0].name} uses eval set {first.name} {first.version} ({str(first.hash)[:12]}), "
                               f"{r.name} uses {es.name} {es.version} ({str(es.hash)[:12]}); "
                               f"{eval_set_files_differ(first, es, runs[0].name, r.name)}"
                               "comparing them is refused unless --allow-different-evalsets")
        differ = None if allow_different else label_differences(runs[0], r)
        if differ:
            raise CompareError(differ)
    check_same_qrels(runs)


def check_same_qrels(runs: list[RunData]) -> None:
    """Runs scored with the same relevance labels (people's, or people's and one LLM's for the holes,
    with the same model, prompt, grade map and depth: harness/metrics/qrels.py), and every hole of a
    `human+llm` run graded; CompareError otherwise, with what differs and what to run."""
    from harness.metrics.provenance import read_stamp
    from harness.metrics.qrels import scored_labels

    scored = {r.name: scored_labels(read_stamp(r.folder)) for r in runs}
    qrels = {n: q for n, (q, _) in scored.items()}
    if len(set(qrels.values())) > 1:
        said = ", ".join(f"{n}: {q}" for n, q in qrels.items())
        raise CompareError(f"the runs were scored with different relevance labels ({said}); nothing was compared. "
                           "Score them alike: `harness metrics RUN --qrels human` (or human+llm for each)")
    llm = {n: x for n, (_, x) in scored.items() if x is not None}
    if not llm:
        return
    if len({x.identity() for x in llm.values()}) > 1:
        said = "; ".join(f"{n}: {x.said()}" for n, x in llm.items())
        raise CompareError(f"the runs' LLM relevance labels differ in model, prompt, grade map or depth ({said}); "
                           "nothing was compared. Label both the same way (`harness judge RUN --relevance ...`)")
    short = [f"{n}: {x.said()}" for n, x in llm.items() if x.graded < x.holes]
    if short:
        raise CompareError(f"holes without an LLM grade would count as not relevant in one run and graded in the "
                           f"other ({'; '.join(short)}); nothing was compared. Run `harness judge RUN --relevance` "
                           "again (the LLM cache keeps the grades it has), or score both with --qrels human")


def why_missing(metric: Metric, run: RunData) -> str:
    """Why a known metric has no value in a run folder."""
    if metric.family == "judged":
        if not run.folder.has_judgments():
            return (f"{run.name} has no judgments: run `harness judge {run.path} --endpoint URL --model M` (or name "
                    "a judge under llm.roles.judge in its config); judging scores the run again")
        return f"{run.name}: its metrics predate its judgments: run `harness metrics {run.path}`"
    if on_request(metric):
        s = run.manifest.metrics or {}
        return (f"{metric.name} was not computed for {run.name} (its metrics settings: {s}); run `harness metrics "
                f"{run.path} -m {metric.name}`, or set metrics.cutoffs / ndcg_at / mrr_at / judged_at or list it "
                "under metrics.measures in the run config")
    return f"{metric.name} was not computed for {run.name}: none of its arms or turns has what it needs ({', '.join(metric.needs)})"


def check_metrics(names: list[str], runs: list[RunData], where: str = "-m/--metric") -> list[Metric]:
    """Every name resolved by the registry and computed in every run; CompareError otherwise."""
    out = []
    for name in names:
        try:
            m = resolve(name, sorted(set().union(*(r.metrics for r in runs))))
        except UnknownMetric as e:
            raise CompareError(f"{where}: {e}") from None
        for r in runs:
            if m.name not in r.metrics and any(m.applies_to(a.capabilities) for a in r.arms):
                raise CompareError(f"{where}: {why_missing(m, r)}")
        out.append(m)
    return out


def compare_pair(base: RunData, cand: RunData, pair: Pair, metric: str, segment: str,
                 n_resamples: int = STATS.n_resamples, seed: int = STATS.seed, alpha: float = STATS.alpha,
                 split: Split | None = None, direction: str | None = None,
                 n_permutations: int = STATS.n_permutations) -> dict:
    """`split`: `Split(base, cand)`, when the caller compares the pair on several metrics or segments
    (its turn means and segments are then computed once). The counts are STATS' unless a policy
    states its own."""
    split = Split(base, cand) if split is None else split
    df = compare_arms(split, metric, "A:" + pair.baseline.arm_id, ["B:" + pair.candidate.arm_id],
                      segment_keys=split.keys(segment), n_resamples=n_resamples,
                      n_permutations=n_permutations, seed=seed, alpha=alpha, direction=direction)
    row = df.iloc[0].to_dict()  # one row per candidate, its smallest detectable change (mde) included
    row.update({"metric": metric, "segment": segment, "label": pair.label, "baseline_arm": pair.baseline.arm_id,
                "candidate_arm": pair.candidate.arm_id, "changes": "; ".join(pair.changes),
                "baseline_run": base.name, "candidate_run": cand.name})
    row.pop("reference", None)
    row.pop("arm", None)
    return row


@dataclass
class Comparison:
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)  # what was not compared, and why
    # candidate run -> label -> why its pair is unchanged (harness.analysis.unchanged)
    unchanged: dict[str, dict[str, str]] = field(default_factory=dict)


def _checked(runs: list[RunData], metrics: list[str], segments: list[str], arms: list[str] | None) -> list[Metric]:
    for s in segments:
        try:
            check_segment(s, runs[0].labels)
        except SegmentError as e:
            raise CompareError(f"-s/--segment: {e}") from None
    _check_arms(arms or [], runs)
    return check_metrics(metrics, runs)


def _rows(base: RunData, cand: RunData, pairs: list[Pair], ms: list[Metric], segments: list[str], notes: list[str],
          n_resamples: int = STATS.n_resamples, seed: int = STATS.seed,
          n_permutations: int = STATS.n_permutations, split: Split | None = None) -> list[dict]:
    split = Split(base, cand) if split is None else split
    rows = []
    for p in pairs:
        for m in ms:
            if not (m.applies_to(p.baseline.capabilities) and m.applies_to(p.candidate.capabilities)):
                notes.append(f"{m.name} is n/a for {p.label} (needs {', '.join(sorted(m.needs))})")
                continue
            rows += [compare_pair(base, cand, p, m.name, s, n_resamples, seed, split=split,
                                  n_permutations=n_permutations) for s in segments]
            lost = lost_turns(base, cand, p.baseline.arm_id, p.candidate.arm_id, m.name, "all", split.sides(p, m.name),
                              split.where)
            if lost.n:
                notes.append(f"{p.label} {m.name}: {lost.describe(cand.name)}; those turns are not paired")
    return rows


def _finish(rows: list[dict], notes: list[str], found: dict[str, dict[str, str]]) -> Comparison:
    if not rows:
        raise CompareError("nothing to compare: " + "; ".join(dict.fromkeys(notes)))
    out = pd.DataFrame(rows)
    cov = out["metric"].map(is_coverage).to_numpy(bool)  # coverage figures (judged@10) are a family of their own:
    out["p_holm"] = float("nan")  # showing them beside the quality metrics leaves those metrics' p unchanged
    out["holm_m"] = 0
    for part in (cov, ~cov):
        holm_over(out, part)
    return Comparison(out, list(dict.fromkeys(notes + disagreements(out))), collapse(out, found))


def disagreements(table: pd.DataFrame, alpha: float = STATS.alpha) -> list[str]:
    """Rows whose CI and raw p say different things at `alpha` (the CI excludes 0 and p ≥ alpha, or
    the reverse), in words: the session bootstrap and the sign-flip test are two methods, and with
    few sessions that differ at all they part near the edge. Said, never resolved silently."""
    out = []
    for r in table.itertuples():
        if any(pd.isna(v) for v in (r.ci_lo, r.ci_hi, r.p)):
            continue
        excludes = r.ci_lo > 0 or r.ci_hi < 0
        if excludes == (r.p < alpha):
            continue
        ci = f"{1 - alpha:.0%} CI [{r.ci_lo:+.3f}, {r.ci_hi:+.3f}] {'excludes' if excludes else 'includes'} 0"
        out.append(f"{r.label} {r.metric} [{r.segment}]: the {ci} but p {p_said(r.p, getattr(r, 'p_floor', None))} "
                   f"is {'not ' if excludes else ''}below {alpha}: the session bootstrap and the sign-flip test part "
                   f"near the edge (W/T/L {r.wins}/{r.ties}/{r.losses} turns): read it as borderline "
                   "(docs/statistics.md)")
    return out


def compare_runs(paths: list[Path], metrics: list[str], segments: list[str], arms: list[str] | None = None,
                 pairs: list[str] | None = None, allow_different_evalsets: bool = False,
                 n_resamples: int = STATS.n_resamples, seed: int = STATS.seed, allow_partial: bool = False) -> Comparison:
    """Each run against the first, arm pair by arm pair (pairing by label). An incomplete run is
    refused unless `allow_partial` (then the notes say which runs are partial)."""
    if len(paths) < 2:
        raise CompareError("compare needs at least two run folders, or one with --reference LABEL")
    runs = [_load(p, allow_partial) for p in paths]
    c = compare_data(runs, metrics, segments, arms, pairs, allow_different_evalsets, n_resamples, seed)
    c.notes = [n for r in runs for n in r.evidence.notes(r.name)] + c.notes
    c.notes = [n for cand in runs[1:] for n in coverage_notes(runs[0], cand, _pairing(runs[0], cand, pairs).pairs)] \
        + c.notes  # a shard, or sessions the candidate lacks: said first
    return c


def _load(path: Path, allow_partial: bool) -> RunData:
    try:
        return check_run(path, complete=not allow_partial)
    except Incomplete as e:
        raise CompareError(f"{e} (--allow-partial compares it anyway, marked partial)") from None
    except (EvidenceError, ValueError) as e:
        raise CompareError(str(e)) from None


def compare_data(runs: list[RunData], metrics: list[str], segments: list[str], arms: list[str] | None = None,
                 pairs: list[str] | None = None, allow_different_evalsets: bool = False,
                 n_resamples: int = STATS.n_resamples, seed: int = STATS.seed,
                 n_permutations: int = STATS.n_permutations) -> Comparison:
    """compare_runs on loaded, scored runs."""
    check_same_evalset(runs, allow_different_evalsets)
    ms = _checked(runs, metrics, segments, arms)
    rows, notes = [], []
    base, found = runs[0], {}
    for cand in runs[1:]:
        pairing = _pairing(base, cand, pairs)
        chosen = [p for p in pairing.pairs if not arms or {p.baseline.label, p.candidate.label,
                                                           p.baseline.arm_id, p.candidate.arm_id} & set(arms)]
        if not chosen:
            raise CompareError(f"{base.name} and {cand.name}: no arm pair to compare ("
                               + (pairing.unpaired(base.name, cand.name) or "none of the --arm names is paired")
                               + "); name pairs with --pair BASELINE=CANDIDATE")
        if pairing.only_baseline or pairing.only_candidate:
            notes.append(f"not compared: {pairing.unpaired(base.name, cand.name)}")
        split = Split(base, cand)
        rows += _rows(base, cand, chosen, ms, segments, notes, n_resamples, seed, n_permutations, split)
        found[cand.name] = unchanged(base, cand, chosen, split)
    return _finish(rows, notes, found)


def compare_within(path: Path, reference: str, metrics: list[str], segments: list[str], arms: list[str] | None = None,
                   n_resamples: int = STATS.n_resamples, seed: int = STATS.seed, allow_partial: bool = False) -> Comparison:
    """The arms of one run against its `reference` arm (a label or id), on any segment."""
    run = _load(path, allow_partial)
    ms = _checked([run], metrics, segments, arms)
    try:
        ref = find_arm(run.arms, reference, run.name)
    except PairingError as e:
        raise CompareError(f"--reference: {e}") from None
    others = [a for a in run.arms if a.arm_id != ref.arm_id and (not arms or {a.label, a.arm_id} & set(arms))]
    if not others:
        raise CompareError(f"{run.name}: no arm to compare with {ref.label}")
    notes: list[str] = []
    pairs, split = [Pair(ref, a, "reference", changes(ref, a)) for a in others], Split(run, run)
    rows = _rows(run, run, pairs, ms, segments, notes, n_resamples, seed, split=split)
    return _finish(rows, run.evidence.notes(run.name) + notes, {run.name: unchanged(run, run, pairs, split)})


def _check_arms(names: list[str], runs: list[RunData]) -> None:
    """Every --arm name is a label or id of some run; a suggestion otherwise."""
    for n in names:
        if not any(n in (a.label, a.arm_id) for r in runs for a in r.arms):
            try:
                find_arm([a for r in runs for a in r.arms], n, " or ".join(r.name for r in runs))
            except PairingError as e:
                raise CompareError(f"--arm: {e}") from None


def _pairing(base: RunData, cand: RunData, pairs: list[str] | None):
    try:
        return pair_runs(base, cand, pairs)
    except PairingError as e:
        raise CompareError(str(e)) from None


COLUMNS = ["candidate_run", "label", "metric", "direction", "segment", "n_turns", "n_sessions", "n_unmeasured",
           "mean_ref", "mean_arm", "diff", "ci_lo", "ci_hi", "p", "p_holm", "holm_m", "p_exact", "p_floor", "wins",
           "ties", "losses", "mde", "changes", "baseline_arm", "candidate_arm"]


def wtl_header(direction: str) -> str:
    return "up/tie/down" if direction == "none" else "W/T/L"


def families(df: pd.DataFrame) -> str:
    """Which families the table's Holm p are adjusted over, in words (compare's tables and compare.md)."""
    cov = df["metric"].map(is_coverage).to_numpy(bool)
    quality = int(df.loc[~cov, "holm_m"].max()) if (~cov).any() else 0
    out = holm_said(quality, "quality comparisons of this table") if quality else "pHolm: —"
    if cov.any():
        out += f"; coverage figures (judged@k) apart, over their {int(df.loc[cov, 'holm_m'].max())}"
    return out


def to_markdown(c: Comparison, base_name: str, show_all: bool = False) -> str:
    """compare.md: the table (without the rows of unchanged arms unless `show_all`: one line each run
    says them), what changed between paired arms, what was not compared."""
    hidden = {} if show_all else c.unchanged
    df = kept(c.table, hidden)
    lines = [f"# Comparison against {base_name}", "",
             "W/T/L counts turns where the candidate is better / equal / worse by the metric's direction "
             "(for metrics without one: higher / equal / lower).", "", f"{STATS.said()}; {families(c.table)}.", ""]
    lines += [f"| run | arm | metric | segment | n | baseline | candidate | diff | {STATS.ci_label} | p | pHolm | W/T/L |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"] if len(df) else []
    for r in df.itertuples():
        arrow = {"higher": "↑", "lower": "↓"}.get(r.direction, "")
        p, p_holm = p_cells(r)
        lines.append(f"| {r.candidate_run} | {r.label} | {r.metric}{arrow} | {r.segment} | {r.n_turns} | {r.mean_ref:.3f} | "
                     f"{r.mean_arm:.3f} | {r.diff:+.3f} | [{r.ci_lo:+.3f}, {r.ci_hi:+.3f}] | {p} | {p_holm} | "
                     f"{r.wins}/{r.ties}/{r.losses} |")
    lines += [""] * (bool(hidden) and len(df) > 0)
    lines += [f"{run}: {unchanged_said(labels)} (their rows, counted in pHolm's family, are in compare.csv)"
              for run, labels in hidden.items()]
    changed = c.table.drop_duplicates("label")
    changed = changed[changed["changes"].astype(str) != ""]
    if len(changed):
        lines += ["", "Changes between paired arms:", ""]
        lines += [f"- {r.label}: {r.changes}" for r in changed.itertuples()]
    if c.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in c.notes]
    return "\n".join(lines) + "\n"
