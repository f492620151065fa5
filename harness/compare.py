"""Compare runs: for every arm id shared by the runs (or chosen arms, or named pairs), per
metric and segment, the paired difference of each run against the first, with session-level
bootstrap CIs, randomization p-values corrected by Holm across the table, and
wins/ties/losses. Reads run folders only (metrics.parquet per-turn rows, labels.parquet,
manifest.json). Rendering (Markdown, CSV) is separate from computing."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.manifest import read_manifest
from harness.metrics.compute import load_labels
from harness.metrics.segments import parse_segment, segment_keys
from harness.stats import compare_arms, holm


class CompareError(ValueError):
    """Bad input or usage (exit 2)."""


@dataclass
class RunData:
    path: Path
    manifest: dict
    per_turn: pd.DataFrame
    labels: pd.DataFrame

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def arms(self) -> list[str]:
        return [a["arm_id"] for a in self.manifest["arms"]]

    def backends(self, arm_id: str) -> dict:
        return next((a.get("backends") or {} for a in self.manifest["arms"] if a["arm_id"] == arm_id), {})


def load_run(path: Path) -> RunData:
    path = Path(path)
    try:
        man = read_manifest(path)
    except FileNotFoundError as e:
        raise CompareError(str(e)) from None
    mp = path / "metrics.parquet"
    if not mp.exists():
        raise CompareError(f"{path}: no metrics.parquet (run `harness metrics {path}` first)")
    m = pd.read_parquet(mp)
    pt = m[m["kind"] == "turn"][["arm_id", "repeat", "session_id", "turn_index", "metric", "value"]].copy()
    pt["turn_index"] = pt["turn_index"].astype(int)
    pt["value"] = pt["value"].astype(float)
    return RunData(path, man, pt, load_labels(path))


def check_same_evalset(runs: list[RunData], allow_different: bool) -> None:
    first = runs[0].manifest["eval_set"]
    for r in runs[1:]:
        es = r.manifest["eval_set"]
        if (es["name"], es["version"], es.get("hash")) != (first["name"], first["version"], first.get("hash")) and not allow_different:
            raise CompareError(f"{runs[0].name} uses eval set {first['name']} {first['version']} ({str(first.get('hash'))[:12]}), "
                               f"{r.name} uses {es['name']} {es['version']} ({str(es.get('hash'))[:12]}); "
                               "comparing them is refused unless --allow-different-evalsets")


def is_offline(backends: dict) -> bool:
    return not backends or set(backends.values()) == {"offline"}


def resolve_pairs(base: RunData, cand: RunData, pairs: dict[str, str] | None = None,
                  arms: list[str] | None = None) -> list[tuple[str, str]]:
    """Baseline arm -> candidate arm. Named pairs are taken as given; otherwise arms with the same
    canonical id (which names every parameter and model, so an offline arm never meets an LLM
    arm implicitly)."""
    if pairs:
        for b, c in pairs.items():
            if b not in base.arms:
                raise CompareError(f"pair {b}={c}: {b} is not an arm of {base.name}")
            if c not in cand.arms:
                raise CompareError(f"pair {b}={c}: {c} is not an arm of {cand.name}")
        out = list(pairs.items())
    else:
        out = [(a, a) for a in base.arms if a in cand.arms]
    if arms:
        out = [(b, c) for b, c in out if b in arms or c in arms]
    return out


def combined(base: RunData, cand: RunData) -> pd.DataFrame:
    return pd.concat([base.per_turn.assign(arm_id="A:" + base.per_turn["arm_id"]),
                      cand.per_turn.assign(arm_id="B:" + cand.per_turn["arm_id"])], ignore_index=True)


def compare_pair(base: RunData, cand: RunData, b_arm: str, c_arm: str, metric: str, segment: str,
                 n_resamples: int = 5000, seed: int = 0, alpha: float = 0.05, pt: pd.DataFrame | None = None) -> dict:
    """`pt`: `combined(base, cand)`, when the caller compares the pair on several metrics."""
    pt = combined(base, cand) if pt is None else pt
    keys = segment_keys(base.labels, segment)
    df = compare_arms(pt, metric, "A:" + b_arm, ["B:" + c_arm], segment_keys=keys, n_resamples=n_resamples,
                      n_permutations=n_resamples, seed=seed, alpha=alpha)
    row = df.iloc[0].to_dict()  # one row per candidate, its smallest detectable drop (mde) included
    row.update({"metric": metric, "segment": segment, "baseline_arm": b_arm, "candidate_arm": c_arm,
                "baseline_run": base.name, "candidate_run": cand.name})
    row.pop("reference", None)
    row.pop("arm", None)
    return row


def compare_runs(paths: list[Path], metrics: list[str], segments: list[str], arms: list[str] | None = None,
                 pairs: dict[str, str] | None = None, allow_different_evalsets: bool = False,
                 n_resamples: int = 5000, seed: int = 0) -> pd.DataFrame:
    if len(paths) < 2:
        raise CompareError("compare needs at least two run folders")
    runs = [load_run(p) for p in paths]
    check_same_evalset(runs, allow_different_evalsets)
    for s in segments:
        parse_segment(s)
    rows = []
    base = runs[0]
    for cand in runs[1:]:
        pr = resolve_pairs(base, cand, pairs, arms)
        if not pr:
            raise CompareError(f"{base.name} and {cand.name} share no arm; name pairs with --pair BASELINE=CANDIDATE")
        pt = combined(base, cand)
        for b_arm, c_arm in pr:
            for m in metrics:
                for s in segments:
                    rows.append(compare_pair(base, cand, b_arm, c_arm, m, s, n_resamples, seed, pt=pt))
    out = pd.DataFrame(rows)
    if not out.empty:
        out["p_holm"] = holm(out["p"].tolist())
    return out


COLUMNS = ["candidate_run", "baseline_arm", "candidate_arm", "metric", "segment", "n_turns", "n_sessions", "mean_ref",
           "mean_arm", "diff", "ci_lo", "ci_hi", "p", "p_holm", "wins", "ties", "losses", "mde"]


def to_markdown(df: pd.DataFrame, base_name: str) -> str:
    lines = [f"# Comparison against {base_name}", "",
             "| run | arm | metric | segment | n | baseline | candidate | diff | 95% CI | p (Holm) | W/T/L |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        arm = r.candidate_arm if r.baseline_arm == r.candidate_arm else f"{r.baseline_arm} → {r.candidate_arm}"
        lines.append(f"| {r.candidate_run} | `{arm}` | {r.metric} | {r.segment} | {r.n_turns} | {r.mean_ref:.3f} | "
                     f"{r.mean_arm:.3f} | {r.diff:+.3f} | [{r.ci_lo:+.3f}, {r.ci_hi:+.3f}] | {r.p_holm:.4f} | "
                     f"{r.wins}/{r.ties}/{r.losses} |")
    return "\n".join(lines) + "\n"
