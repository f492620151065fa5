"""Writing converted eval sets: the folder layout of docs/eval-sets.md, atomically."""
from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from harness.evalset.folder import CORPUS, INFO, SPLIT_FILES
from harness.evalset.load import dump_jsonl, load_eval_set


def write_eval_set(out: Path, info: dict, docs, sessions, test_sessions=None, notices: list[Path] = ()) -> Path:
    """Write an eval set folder and validate it; on a validation error the folder is left as
    it was before (everything is written to a temporary sibling first)."""
    out = Path(out)
    tmp = out.with_name(out.name + ".importing")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    (tmp / INFO).write_text(yaml.safe_dump(info, sort_keys=False, allow_unicode=True), encoding="utf-8")
    dump_jsonl(docs, tmp / CORPUS)
    dump_jsonl(sessions, tmp / SPLIT_FILES["main"])
    if test_sessions:
        dump_jsonl(test_sessions, tmp / SPLIT_FILES["test"])
    for n in notices:
        shutil.copyfile(n, tmp / Path(n).name)
    load_eval_set(tmp)  # raises EvalSetError naming file, line and field
    if out.exists():
        # keep what was there (e.g. a shipped embedding cache), replace the data files
        for f in tmp.iterdir():
            f.replace(out / f.name)
        tmp.rmdir()
    else:
        tmp.rename(out)
    return out
