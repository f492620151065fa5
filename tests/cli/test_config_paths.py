"""Paths in a run config are read from the config's folder, as its prompt files are; a wrong one
names the config file and line; a required key left out names a line, never `?`; a grade written
as a string is refused with file and line (issue 44, items 6 and 8)."""
import copy
import shutil

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.config import ConfigError, load_config
from harness.evalset.load import EvalSetError, load_eval_set
from tests.conftest import ROOT, TINY_SESSIONS, write_set


def _run(cfg, *args):
    return CliRunner().invoke(app, ["run", str(cfg), "--no-metrics", "-q", *map(str, args)])


def test_eval_set_is_read_from_the_configs_folder(tmp_path, monkeypatch):
    write_set(tmp_path / "eval_sets/tiny")
    (tmp_path / "configs").mkdir()
    cfg = tmp_path / "configs/t.yaml"
    cfg.write_text(f"name: t\neval_set: ../eval_sets/tiny\narms: [original]\nruns_dir: {tmp_path / 'runs'}\n")
    monkeypatch.chdir("/")  # neither the config's folder's parent nor the repository
    r = _run(cfg)
    assert r.exit_code == 0, r.output
    assert load_eval_set(load_config(cfg)[0].eval_set).name == "tiny"


def test_a_wrong_eval_set_names_the_config_file_and_line(tmp_path):
    cfg = tmp_path / "t.yaml"
    cfg.write_text("name: t\n# the eval set\neval_set: ../nowhere/b2b-shop\narms: [original]\n")
    r = _run(cfg)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"{cfg}:3: eval_set: ../nowhere/b2b-shop: not a folder" in " ".join(r.output.split())


def test_the_old_spelling_still_runs_and_is_told_the_new_one(tmp_path, monkeypatch):
    """Configs written before the rule (the working folder's path) still run, with a note that
    names the spelling from the config's folder."""
    write_set(tmp_path / "eval_sets/tiny")
    (tmp_path / "configs").mkdir()
    cfg = tmp_path / "configs/t.yaml"
    cfg.write_text(f"name: t\neval_set: eval_sets/tiny\narms: [original]\nruns_dir: {tmp_path / 'runs'}\n")
    monkeypatch.chdir(tmp_path)
    r = _run(cfg)
    assert r.exit_code == 0, r.output
    assert "configs/t.yaml:2: eval_set: eval_sets/tiny is found from the working folder only" in " ".join(r.output.split())
    assert "write ../eval_sets/tiny" in " ".join(r.output.split())


@pytest.mark.parametrize("config", ["b2b", "handbook", "mtrag", "sweep-handbook", "sweep-mtrag", "prompt-gate"])
def test_the_shipped_configs_find_their_eval_sets(config, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg, _ = load_config(ROOT / f"configs/{config}.yaml")
    assert (ROOT / cfg.eval_set / "eval_set.yaml").is_file()


def test_a_required_key_left_out_names_a_line(tmp_path):
    cfg = tmp_path / "t.yaml"
    cfg.write_text("name: t\narms: [original]\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert f"{cfg}:1: eval_set: Field required" in str(e.value) and ":?:" not in str(e.value)


@pytest.mark.parametrize("grade", ["2", 2.0, True])
def test_a_grade_of_the_wrong_type_is_refused_with_file_and_line(tmp_path, grade):
    sessions = copy.deepcopy(TINY_SESSIONS)
    sessions[1]["turns"][0]["labels"]["qrels"] = {"d3": 2, "d4": grade}
    es = write_set(tmp_path / "set", sessions=sessions)
    with pytest.raises(EvalSetError) as e:
        load_eval_set(es)
    assert "sessions.jsonl:2: turns.0.labels.qrels.d4:" in str(e.value)
    r = CliRunner().invoke(app, ["eval-set", "validate", str(es)])
    assert r.exit_code == 2 and "sessions.jsonl:2" in r.output
    shutil.rmtree(es)


def _set_config(tmp_path):
    es = write_set(tmp_path / "set")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: t\neval_set: {es}\narms:\n  - original\n  - {{name: original, depth: 20, label: shallow}}\n"
                   f"runs_dir: {tmp_path / 'runs'}\n")
    return cfg


def test_set_overrides_a_key_and_the_manifest_records_it(tmp_path):
    """`harness run CONFIG --set arms.LABEL.PARAM=VALUE` (issue 44, item 6): arms by label or name,
    the value read as YAML, the config that ran (with the override) in the manifest."""
    from harness.store.manifest import read_manifest

    cfg = _set_config(tmp_path)
    r = _run(cfg, "--run-id", "s", "--set", "arms.original.depth=50", "--set", "arms.shallow.depth=5", "--set", "seed=3")
    assert r.exit_code == 0, r.output
    man = read_manifest(tmp_path / "runs/s")
    assert man.config["arms"] == [{"name": "original", "depth": 50}, {"name": "original", "depth": 5, "label": "shallow"}]
    assert man.config["seed"] == 3
    assert {a["params"]["depth"] for a in man.arms} == {50, 5}


@pytest.mark.parametrize("item, said", [
    ("arms.orignal.depth=50", "'orignal' names no arm of the config; did you mean 'original'?"),
    ("arms.original.dpth=50", "arms.0.dpth: Extra inputs are not permitted; did you mean 'depth'?"),
    ("arms.original.depth=abc", "arms.0.depth: Input should be a valid integer"),
    ("concurrency=0", "concurrency: Input should be greater than or equal to 1"),
    ("depth", "expected KEY=VALUE"),
])
def test_a_wrong_set_exits_2_with_what_is_wrong(tmp_path, item, said):
    r = _run(_set_config(tmp_path), "--set", item)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert said in " ".join(r.output.split())


def test_no_error_says_a_line_it_does_not_know_as_a_question_mark(tmp_path):
    """`file:?: field: message` where the line was not known (no text, or text that is not YAML);
    now `file: field: message` (issue 44, item 8), and no module writes `:?` after a file name."""
    import re

    from harness.yamlpos import located, read_yaml, where

    assert located("c.yaml", None, [(("eval_set",), "Field required")]) == "c.yaml: eval_set: Field required"
    assert located("c.yaml", "a: [", [(("a",), "bad")]) == "c.yaml: a: bad"
    assert where("c.yaml", None) == "c.yaml" and where("c.yaml", 3) == "c.yaml:3"
    bad = tmp_path / "p.yaml"
    bad.write_text("rules:\n  - {metric: recall@10\n")
    with pytest.raises(ConfigError) as e:
        read_yaml(bad, ConfigError)
    assert re.match(rf"{re.escape(str(bad))}:\d+: invalid YAML", str(e.value)), str(e.value)
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in (ROOT / "harness").rglob("*.py")
             for m in re.finditer(r":\{[^{}\n]*or '\?'\}", p.read_text(encoding="utf-8"))]
    assert not found, found
