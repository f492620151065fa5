"""Configs from the command line (issue 44, item 5): `harness init` writes a commented run config
that validates and runs on the eval set it names; `harness sweep CONFIG --grid KEY=V1,V2` replays
the grid a config's list builds into one run folder that `harness compare` reads; --grid's keys
are checked as --set's are."""
import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.config import command_line_sets, load_config, parse_config
from harness.store.manifest import read_manifest
from tests.conftest import ROOT, write_set


def _invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r, " ".join(r.output.split())


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A working folder with an eval set under eval_sets/ and a configs/ folder, as the repository has."""
    write_set(tmp_path / "eval_sets/tiny")
    (tmp_path / "configs").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_init_writes_a_config_that_validates_and_runs(project):
    r, said = _invoke("init", "--eval-set", "eval_sets/tiny", "-o", "configs/mine.yaml")
    assert r.exit_code == 0, r.output
    assert "harness run configs/mine.yaml" in said
    text = (project / "configs/mine.yaml").read_text()
    assert "eval_set: ../eval_sets/tiny\n" in text  # from the config's folder, as the loader reads it
    cfg, raw = load_config(project / "configs/mine.yaml")
    assert cfg.name == "mine" and "llm" not in raw  # offline: no endpoint unless --llm
    r, _ = _invoke("run", "configs/mine.yaml", "--no-metrics", "-q", "--run-id", "m")
    assert r.exit_code == 0, r.output
    man = read_manifest(project / "runs/m")
    assert man.eval_set.name == "tiny" and [a["label"] for a in man.arms] == ["original", "concat", "rewrite"]


def test_init_explains_its_keys_and_lists_the_registered_arms(project, monkeypatch):
    """The arms in its comment come from the registry: an arm registered now is listed too."""
    from harness.arms.catalog import REGISTRY

    monkeypatch.setitem(REGISTRY, "zz_probe", type("Probe", (REGISTRY["original"],), {"__doc__": "A probe arm."}))
    r, _ = _invoke("init", "--eval-set", "eval_sets/tiny", "-o", "configs/mine.yaml")
    assert r.exit_code == 0, r.output
    text = (project / "configs/mine.yaml").read_text()
    comments = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    for name in REGISTRY:
        assert f"#   {name} (" in comments
    assert "#   zz_probe (no LLM role): A probe arm." in comments
    for key in ("name", "eval_set", "index", "arms", "metrics", "repeats", "llm"):
        assert f"# {key}: " in comments
    assert all(len(line) <= 110 for line in text.splitlines())


def test_init_refuses_to_replace_a_file_unless_forced(project):
    out = project / "configs/mine.yaml"
    out.write_text("mine\n")
    r, said = _invoke("init", "--eval-set", "eval_sets/tiny", "-o", out)
    assert r.exit_code == 2 and "exists" in said and "--force" in said and "Traceback" not in r.output
    assert out.read_text() == "mine\n"
    r, _ = _invoke("init", "--eval-set", "eval_sets/tiny", "-o", out, "--force")
    assert r.exit_code == 0, r.output
    load_config(out)


@pytest.mark.parametrize("where, said", [
    ("nowhere", "--eval-set nowhere: not a folder"),
    ("configs", "--eval-set configs: not an eval-set folder (it holds neither eval_set.yaml nor corpus.jsonl)"),
])
def test_init_refuses_a_path_that_is_no_eval_set(project, where, said):
    r, out = _invoke("init", "--eval-set", where, "-o", "configs/mine.yaml")
    assert r.exit_code == 2 and said in out and "Traceback" not in r.output
    assert not (project / "configs/mine.yaml").exists()


def test_init_refuses_a_broken_eval_set_with_its_problems(project):
    (project / "eval_sets/tiny/corpus.jsonl").write_text('{"doc_id": "d1"}\n')
    r, said = _invoke("init", "--eval-set", "eval_sets/tiny", "-o", "configs/mine.yaml")
    assert r.exit_code == 2 and "problem(s) in eval set" in said and "corpus.jsonl:1" in said
    assert not (project / "configs/mine.yaml").exists()


def test_init_with_an_endpoint_gives_it_to_the_rewrite_role(project):
    r, _ = _invoke("init", "--eval-set", "eval_sets/tiny", "-o", "configs/llm.yaml", "--llm", "http://127.0.0.1:9/v1",
                   "--model", "tiny-model")
    assert r.exit_code == 0, r.output
    cfg, _ = load_config(project / "configs/llm.yaml")
    assert cfg.llm.roles["rewrite"].base_url == "http://127.0.0.1:9/v1" and cfg.llm.roles["rewrite"].model == "tiny-model"
    r, said = _invoke("init", "--eval-set", "eval_sets/tiny", "-o", "configs/x.yaml", "--llm", "http://127.0.0.1:9/v1")
    assert r.exit_code == 2 and "--llm URL and --model NAME go together" in said


def _grid_config(project):
    cfg = project / "configs/g.yaml"
    cfg.write_text("name: g\neval_set: ../eval_sets/tiny\narms:\n  - original\n  - concat\n")
    return cfg


def test_sweep_of_two_values_is_one_run_folder_that_compare_reads(project):
    """The grid --grid builds is the one a list in the config builds (configure_arms), in one run."""
    r, _ = _invoke("sweep", _grid_config(project), "--grid", "arms.original.depth=5,50", "--run-id", "s", "-q")
    assert r.exit_code == 0, r.output
    man = read_manifest(project / "runs/s")
    assert man.config["arms"] == [{"name": "original", "depth": [5, 50]}, "concat"]  # the config form of the grid
    grid = [a for a in man.arms if a["arm"] == "original"]
    assert sorted(a["params"]["depth"] for a in grid) == [5, 50] and len(man.arms) == 3
    written = parse_config({**man.config, "eval_set": str(project / "eval_sets/tiny")})
    assert [p.spec for p in written.configured_arms()] == [{"name": "original", "depth": 5},
                                                           {"name": "original", "depth": 50}, {"name": "concat"}]
    labels = sorted(a["label"] for a in grid)
    r, said = _invoke("compare", "runs/s", "--reference", labels[0], "-o", project / "cmp")
    assert r.exit_code == 0, r.output
    assert labels[1] in said and (project / "cmp/compare.csv").is_file()


def test_two_grids_on_one_arm_are_every_combination(project):
    cfg = _grid_config(project)
    raw = command_line_sets(load_config(cfg)[1], ["arms.original.depth=5,50", "arms.original.lane=bm25,dense"],
                            grid=True)
    points = parse_config(raw, cfg, cfg.read_text()).configured_arms()
    assert sorted((p.spec["depth"], p.spec["lane"]) for p in points if p.spec["name"] == "original") == \
        [(5, "bm25"), (5, "dense"), (50, "bm25"), (50, "dense")]


@pytest.mark.parametrize("item, said", [
    ("arms.orignal.depth=5,50", "'orignal' names no arm of the config; did you mean 'original'?"),
    ("arms.original.dpth=5,50", "arms.0.dpth: Extra inputs are not permitted; did you mean 'depth'?"),
    ("arms.original.lane=bm25,lexical", "arms.0.lane: Input should be 'hybrid', 'dense' or 'bm25'"),
    ("arms.original.depth=0,50", "arms.0.depth: Input should be greater than or equal to 1"),
    ("arms.original.depth=5", "expected arms.ARM.PARAMETER=V1,V2,…"),
    ("arms.original.depth=5,5", "two or more different values"),
    ("repeats=1,2", "other keys: harness run --set KEY=VALUE"),
    ("arms.original.name=original,concat", "expected arms.ARM.PARAMETER=V1,V2,…"),
    ("depth", "--grid 'depth': expected KEY=VALUE"),
])
def test_a_wrong_grid_exits_2_with_what_is_wrong(project, item, said):
    r, out = _invoke("sweep", _grid_config(project), "--grid", item, "-q")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert said in out
    assert not (project / "runs").exists()  # refused before anything ran


def test_set_on_the_shipped_b2b_config_reaches_the_rewrite_arm(monkeypatch):
    """`harness run configs/b2b.yaml --set arms.rewrite.last_n=2`: the arm named rewrite (not the one labelled
    `rewrite rules`) gets it, and the config validates as the file's keys are."""
    monkeypatch.chdir(ROOT)
    path = ROOT / "configs/b2b.yaml"
    raw = command_line_sets(load_config(path)[1], ["arms.rewrite.last_n=2"])
    plans = parse_config(raw, path, path.read_text()).configured_arms()
    assert [p.spec.get("last_n") for p in plans if p.spec["name"] == "rewrite"] == [2, None]
    assert yaml.safe_load(path.read_text())["arms"][2] == "rewrite"  # the file itself is unchanged


def test_init_without_an_eval_set_writes_the_bundled_demo_sets(tmp_path, monkeypatch):
    from harness.evalset.load import load_eval_set

    monkeypatch.chdir(ROOT)
    out = tmp_path / "configs/demo.yaml"
    r, _ = _invoke("init", "-o", out)
    assert r.exit_code == 0, r.output
    cfg, _ = load_config(out)
    assert load_eval_set(cfg.eval_set).name == "b2b-shop" and cfg.name == "demo"
    r, said = _invoke("init", "-o", tmp_path)
    assert r.exit_code == 2 and "a folder; give the config file to write" in said
