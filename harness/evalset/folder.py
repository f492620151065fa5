"""The eval-set folder and its one owner: every file name of an eval set is spelled here and
nowhere else (tests/house/test_house.py checks), as the run folder's are in harness/store/folder.py.

    eval_set.yaml            name, version, languages, filter schema, licence (evalset/model.py: EvalSetInfo)
    corpus.jsonl             the documents
    sessions.jsonl           the main split's sessions and their labels
    sessions.test.jsonl      the held-out split's (optional)
    embeddings/              the shipped embedding cache (read-only for runs)"""
from __future__ import annotations

from pathlib import Path

INFO = "eval_set.yaml"
CORPUS = "corpus.jsonl"
SPLIT_FILES = {"main": "sessions.jsonl", "test": "sessions.test.jsonl"}  # split -> its sessions file
EMBEDDINGS = "embeddings"
FILES = (INFO, CORPUS, *SPLIT_FILES.values())


def is_eval_set(path: Path) -> bool:
    """A folder that holds an eval set (its info file or its corpus)."""
    return (Path(path) / INFO).is_file() or (Path(path) / CORPUS).is_file()


def find_eval_set(given: str | Path, config_dir: Path, work_dir: Path) -> tuple[Path | None, bool]:
    """The folder a config's `eval_set:` names: read from the config's folder (as prompt files are),
    else from the working folder (how configs written before that rule spell it; then the flag is
    True); (None, False) when it is a folder neither way."""
    if (Path(config_dir) / given).is_dir():
        return Path(config_dir) / given, False
    if (Path(work_dir) / given).is_dir():
        return Path(work_dir) / given, True
    return None, False
