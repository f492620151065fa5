"""harness.analysis.base_evalset, what scripts/eval_gate.sh asks about the eval set it takes from the
base commit (issue 42, item 3): the folder a config names, read as the harness reads a config's
eval_set (the config's folder first: the old script took `../eval_sets/NAME` for a path outside the
repository and let each run read its own commit's eval set), and the summary's note on a change."""
import json
import shutil
from pathlib import Path

import pytest

from harness.analysis.base_evalset import change_note, config_eval_set, eval_set_change, main
from harness.errors import BadInput
from harness.evalset.folder import CORPUS, SPLIT_FILES
from tests.conftest import TINY_SESSIONS, write_set


def repo(tmp_path: Path, eval_set: str) -> Path:
    root = tmp_path / "repo"
    write_set(root / "eval_sets/tiny")
    (root / "configs").mkdir(parents=True)
    (root / "configs/gate.yaml").write_text(f"name: gate\neval_set: {eval_set}\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("spelling", ["../eval_sets/tiny", "eval_sets/tiny", "./eval_sets/tiny/", "../eval_sets/tiny/"])
def test_every_spelling_of_one_folder_is_one_repository_path(tmp_path, spelling):
    root = repo(tmp_path, spelling)
    assert config_eval_set(root / "configs/gate.yaml", root) == "eval_sets/tiny"


def test_a_folder_of_the_config_folder_wins_over_the_working_folders(tmp_path):
    root = repo(tmp_path, "eval_sets/tiny")
    write_set(root / "configs/eval_sets/tiny")  # as the harness reads it: from the config's folder first
    assert config_eval_set(root / "configs/gate.yaml", root) == "configs/eval_sets/tiny"


def test_a_folder_outside_the_repository_is_absolute_and_a_missing_one_as_written(tmp_path):
    outside = write_set(tmp_path / "elsewhere")
    root = repo(tmp_path, str(outside))
    assert config_eval_set(root / "configs/gate.yaml", root) == str(outside)
    root = repo(tmp_path / "b", "eval_sets/downloaded")  # not there yet (a git-ignored download)
    assert config_eval_set(root / "configs/gate.yaml", root) == "eval_sets/downloaded"


def test_a_config_without_an_eval_set_or_with_it_twice(tmp_path, capsys):
    root = repo(tmp_path, "eval_sets/tiny")
    (root / "configs/none.yaml").write_text("name: gate\n", encoding="utf-8")
    assert config_eval_set(root / "configs/none.yaml", root) == ""
    (root / "configs/twice.yaml").write_text("name: g\neval_set: eval_sets/tiny\neval_set: x\n", encoding="utf-8")
    with pytest.raises(BadInput, match=r"twice.yaml:3: eval_set: written twice \(first on line 2\)"):
        config_eval_set(root / "configs/twice.yaml", root)
    assert main(["folder", str(root / "configs/twice.yaml"), str(root)]) == 2
    assert "written twice" in capsys.readouterr().err
    assert main(["folder"]) == 2 and "base_evalset folder CONFIG ROOT" in capsys.readouterr().err


def test_the_note_names_the_files_and_counts_the_labels_a_change_removes(tmp_path, capsys):
    base = write_set(tmp_path / "base")
    sessions = json.loads(json.dumps(TINY_SESSIONS))
    del sessions[0]["turns"][1]["labels"]["qrels"]  # a turn's qrels deleted
    sessions[1]["turns"][0]["labels"]["qrels"]["d4"] = 2  # a grade changed: one qrel removed, one added
    head = write_set(tmp_path / "head", sessions=sessions)
    change = eval_set_change(base, head)
    assert change.files == {SPLIT_FILES["main"]: "changed"}
    assert change.counts == {"sessions": (2, 2, 0, 0), "labelled turns": (3, 3, 0, 0),
                             "turns with qrels": (3, 2, 0, 1), "qrels": (4, 3, 1, 2)}
    note = change_note(change, "eval_sets/tiny")
    assert note.startswith("Note: this change edits the eval set `eval_sets/tiny`: `eval_sets/tiny/sessions.jsonl` "
                           "(changed). It is gated on the base commit's eval set (corpus, sessions, labels): the "
                           "edit is not evaluated here, and applies once merged.")
    assert "turns with qrels: 3 in the base, 2 here: 0 added, 1 removed" in note and CORPUS not in note
    assert main(["change", str(base), str(head), "eval_sets/tiny"]) == 0 and capsys.readouterr().out.strip() == note


def test_files_only_on_one_side_and_an_eval_set_that_does_not_load(tmp_path):
    base = write_set(tmp_path / "base")
    head = tmp_path / "head"
    shutil.copytree(base, head)
    (head / SPLIT_FILES["test"]).write_text("{not json\n", encoding="utf-8")
    (head / CORPUS).unlink()
    change = eval_set_change(base, head)
    assert change.files == {CORPUS: "only in the base", SPLIT_FILES["test"]: "only here"}
    assert change.counts == {} and change.unloadable.startswith("this change's eval set does not load: ")
    assert "2 problem(s) in eval set: corpus.jsonl: missing" in change.unloadable  # the first, as the loader says it
    note = change_note(change, "eval_sets/tiny")
    assert "`eval_sets/tiny/corpus.jsonl` (only in the base)" in note
    assert "the labels could not be counted: this change's eval set does not load" in note


def test_an_eval_set_the_change_deletes(tmp_path):
    base = write_set(tmp_path / "base")
    change = eval_set_change(base, tmp_path / "gone")
    assert set(change.files.values()) == {"only in the base"} and CORPUS in change.files
    assert change.unloadable.startswith("this change's eval set does not load: ")
