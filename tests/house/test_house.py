"""Checks that keep the house in order: module and function sizes, one owner for the run folder's
file names, the trace row declared once."""
import ast
import re
import dataclasses
from pathlib import Path

import pyarrow as pa

from harness.store import folder
from harness.arms.result import ArmResult, LLMStats, Timings, col
from harness.store.traces import COLUMNS, SCHEMA, TurnKey, _columns, row, rows_to_table
from tests.conftest import ROOT

PACKAGE = ROOT / "harness"
MAX_MODULE, MAX_FUNCTION = 400, 60


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def test_modules_and_functions_stay_small():
    too_long = []
    for p in modules():
        src = p.read_text(encoding="utf-8")
        if src.count("\n") > MAX_MODULE:
            too_long.append(f"{p.relative_to(ROOT)}: {src.count(chr(10))} lines")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION:
                    too_long.append(f"{p.relative_to(ROOT)}:{node.lineno}: {node.name} is {n} lines")
    assert not too_long, "\n".join(too_long)


def folder_names() -> list[str]:
    return [folder.MANIFEST, folder.LABELS, folder.JUDGMENTS, folder.HUMAN_JUDGMENTS, folder.METRICS,
            *folder.TABLES.values(), folder.PART_GLOB, "part-"]


def test_only_the_run_folder_owner_spells_its_file_names():
    names = folder_names()
    assert all(len(n) > 4 for n in names)
    found = []
    for p in modules() + sorted(PACKAGE.rglob("*.j2")):
        if p == Path(folder.__file__):
            continue
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".py":  # string literals only: comments may talk about files
            text = "\n".join(n.value for n in ast.walk(ast.parse(text))
                             if isinstance(n, ast.Constant) and isinstance(n.value, str))
        for name in names:
            if name in text:
                found.append(f"{p.relative_to(ROOT)}: {name}")
    assert not found, "\n".join(found)


def test_only_the_eval_set_folder_owner_spells_its_file_names():
    from harness.evalset import folder as es_folder

    names = list(es_folder.FILES)
    assert names == ["eval_set.yaml", "corpus.jsonl", "sessions.jsonl", "sessions.test.jsonl"]
    found = []
    for p in modules() + sorted(PACKAGE.rglob("*.j2")):
        if p == Path(es_folder.__file__):
            continue
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".py":
            text = "\n".join(n.value for n in ast.walk(ast.parse(text))
                             if isinstance(n, ast.Constant) and isinstance(n.value, str))
        found += [f"{p.relative_to(ROOT)}: {name}" for name in names if re.search(rf"(?<![\w]){re.escape(name)}", text)]
    assert not found, "\n".join(found)


def test_the_metrics_tables_columns_are_declared_once():
    """TURN_COLUMNS, AGG_COLUMNS and the file's columns live in harness/store/folder.py alone: no other
    module assigns a list that spells them."""
    found = []
    for p in modules():
        if p == Path(folder.__file__):
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
                values = {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
                if set(folder.AGG_COLUMNS) <= values or set(folder.TURN_COLUMNS) <= values:
                    found.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
    assert folder.METRICS_COLUMNS[0] == "kind" and set(folder.TURN_COLUMNS) | set(folder.AGG_COLUMNS) < set(
        folder.METRICS_COLUMNS)


def test_the_trace_schema_is_derived_from_the_row_type():
    nested = {"llm": LLMStats, "ms": Timings}
    expected = []
    for cls in (TurnKey, ArmResult):
        for f in dataclasses.fields(cls):
            for g in dataclasses.fields(nested[f.name]) if f.name in nested else [f]:
                expected.append(g.metadata["column"] or (("ms_" if f.name == "ms" else "") + g.name))
    assert SCHEMA.names == expected == [c[0] for c in COLUMNS]
    assert {"ms_decide", "ms_rerank", "llm_calls", "llm_failed"} <= set(SCHEMA.names)
    # one edit: a new field of the round is a new column, in the schema and in every row
    Extended = dataclasses.make_dataclass("Extended", [("novelty", str | None, col(pa.string()))], bases=(ArmResult,))
    assert [c[0] for c in _columns(Extended)][-1] == "novelty"
    r = row(TurnKey(run_id="r", arm_id="a", arm="a", session_id="s", turn_index=1), ArmResult(ranking=["d1"]))
    assert list(r) == SCHEMA.names and r["ms_total"] == 0.0 and r["llm_calls"] == 0
    assert rows_to_table([r]).schema.equals(SCHEMA)


def test_no_module_builds_a_trace_row_by_hand():
    """Beyond traces.py, no module that writes traces (or reads them for scoring) spells the
    row's columns as the keys of a dict literal (the replay once built a 44-key row dict beside
    the schema). The report's display dicts may share names: it only renders."""
    columns = set(SCHEMA.names) - {"arm_id", "repeat", "session_id", "turn_index", "round", "metric", "value"}
    found = []
    for p in modules():
        if p.name == "traces.py" or "report" in p.parts:
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                if len(keys & columns) > 4:
                    found.append(f"{p.relative_to(ROOT)}:{node.lineno}: {sorted(keys & columns)}")
    assert not found, "\n".join(found)


def test_the_report_computes_no_statistics():
    """Confidence intervals, tests and resampling belong to the scoring step (harness.metrics);
    the report package only loads and renders what it wrote."""
    report = ROOT / "harness" / "report"
    # the statistics' counts and how a p is written (STATS, p_said, holm_said, p_cells) it may import
    computing = r"\b(compare_arms|session_bootstrap_ci|bootstrap_of_sums|session_randomization_test|" \
                r"randomization_of_sums|sign_flip|holm|holm_over|min_detectable_drop|paired_table|spread_table|" \
                r"paired_frame|paired_of)\b|random\.default_rng"
    bad = [str(p.relative_to(ROOT)) for p in report.rglob("*.py")
           if re.search(r"harness\.metrics\.(stats|paired|spread|signflip)\b.*import\s+(?!spread_metrics\b)"
                        r"(?!STATS\b|p_said\b|holm_said\b|p_cells\b)|" + computing, p.read_text(encoding="utf-8"))]
    assert not bad, bad


def test_scored_tables_do_not_hang_on_hash_order(tmp_path):
    """The filter-field table's rows followed set iteration, so `harness metrics` rewrote the committed
    baseline's filter_fields.parquet in another order on every scoring (string hashes differ by process)."""
    import os
    import subprocess
    import sys

    code = ("import sys, pyarrow.parquet as pq; from harness.metrics.families.guards import filter_fields_table; "
            "from harness.store.folder import RunFolder; from harness.store.traces import read_traces; "
            "f = RunFolder(sys.argv[1]); t = read_traces(f.path).to_pandas(); "
            "print(filter_fields_table(t, f.labels(), f.read_manifest().filter_schema).to_json())")
    outs = {subprocess.run([sys.executable, "-c", code, str(ROOT / "runs/baselines/b2b")], capture_output=True,
                           text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2", "3")}
    assert len(outs) == 1 and len(next(iter(outs))) > 100


def test_imports_point_down_the_layers_and_no_package_has_a_cycle():
    """The contracts of pyproject.toml ([tool.importlinter]): the layers of docs/architecture.md, an
    import never pointing up, and no cycle among the modules of a package (import-linter)."""
    import subprocess
    import sys

    lint = Path(sys.executable).with_name("lint-imports")
    p = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in p.stdout
    layered = {name.strip() for c in contracts if c["type"] == "layers" for layer in c["layers"] for name in layer.split("|")}
    packages = {f"harness.{d.name}" for d in (ROOT / "harness").iterdir()  # with code (harness/prompts holds text)
                if (d / "__init__.py").is_file() and any(p.name != "__init__.py" for p in d.glob("*.py"))}
    assert packages <= layered, f"packages in no layer: {sorted(packages - layered)}"
    assert {"harness.store", "harness.run", "harness.steps", "harness.metrics", "harness.analysis", "harness.report",
            "harness.cli"} <= layered


def test_the_committed_baseline_is_scored_by_this_code():
    """runs/baselines/b2b's metrics carry the stamp of the scoring code that computed them; a
    change to that code (harness/metrics/provenance.py SOURCES) must rescore and commit them, or
    every command reading the baseline rescores it in place."""
    from harness.metrics.provenance import freshness
    from harness.store.folder import RunFolder

    fresh = freshness(RunFolder(ROOT / "runs" / "baselines" / "b2b"))
    assert fresh.scored and not fresh.reasons, (
        f"the committed baseline's metrics are stale ({'; '.join(fresh.reasons)}): run "
        "`.venv/bin/harness metrics runs/baselines/b2b` and commit runs/baselines/b2b/*.parquet")
