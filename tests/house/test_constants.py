"""Issue 43, item 2: one home per constant, each held by a test that fails when a second home
appears. Exit codes are harness.errors.Exit (the CLI, the gate, `main`s and scripts/ use it; the
Makefile's and the README's words for them are the enum's); the statistics' counts and level are
harness/metrics/stats_config.py's; every model of a user-written file is a `Strict`; the metrics a
verdict shows as operational are operational in the registry, and no other module lists them."""
import ast
import re
from pathlib import Path

from harness.errors import BadInput, Exit, Infrastructure
from tests.conftest import ROOT

PACKAGE = ROOT / "harness"
SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_makefile_says_what_each_exit_code_means_as_the_enum_does():
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    case = re.search(r"case \$\$code in (.*?) esac", text).group(1)
    said = {int(c): m.strip('"') for c, m in re.findall(r"(\d)\) m=(\"[^\"]*\"|[^;]*);;", case)}
    assert said == {int(e): e.meaning for e in Exit}


def test_the_readme_documents_the_exit_codes_in_the_enums_words():
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert ", ".join(f"{int(e)} {e.meaning}" for e in Exit) in text and "harness.errors.Exit" in text


def test_the_errors_carry_the_enums_codes():
    assert (BadInput.exit_code, Infrastructure.exit_code) == (Exit.BAD_INPUT, Exit.INFRASTRUCTURE) == (2, 3)
    assert [Exit.said(c) for c in (0, 1, 2, 3, 9)] == ["pass", "regression or insufficient data", "bad input",
                                                        "infrastructure", "exit 9"]


def _is_code(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 3


def _exits_spelled_as_numbers(path: Path, every_call: bool) -> list[str]:
    """`typer.Exit(3)`, `sys.exit(2)`, `fail(..., 3)`, a `main`'s `return 3` and `code == 1`: an exit
    code written as a number (`every_call`: in calls anywhere, else in `main` and comparisons only)."""
    tree, out = ast.parse(path.read_text(encoding="utf-8")), []
    where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    for node in ast.walk(tree):
        if every_call and isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            args = [a for a in node.args if name in ("typer.Exit", "sys.exit", "exit", "SystemExit")] + \
                [a for a in node.args[1:] if name == "fail"] + \
                [k.value for k in node.keywords if k.arg in ("code", "exit_code")]
            out += [f"{where}:{node.lineno}: {ast.unparse(node)}" for a in args if _is_code(a)]
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            out += [f"{where}:{r.lineno}: {ast.unparse(r)}" for r in ast.walk(node)
                    if isinstance(r, ast.Return) and _is_code(r.value)]
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "code" and \
                isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            sides = [e for c in node.comparators for e in (c.elts if isinstance(c, ast.Tuple) else [c])]
            out += [f"{where}:{node.lineno}: {ast.unparse(node)}" for c in sides[:1] if _is_code(c)]
    return out


def test_no_exit_code_is_spelled_as_a_number():
    found = [x for p in sorted((PACKAGE / "cli").glob("*.py")) + SCRIPTS for x in _exits_spelled_as_numbers(p, True)]
    found += [x for p in _modules() for x in _exits_spelled_as_numbers(p, False)]
    assert not found, "\n".join(found)


def test_the_finder_of_exit_codes_written_as_numbers_finds_them(tmp_path):
    p = tmp_path / "probe.py"
    p.write_text("import sys, typer\ndef main():\n    if code == 1:\n        raise typer.Exit(3)\n    return 2\n"
                 "sys.exit(0)\nok = code in (2, 3)\n", encoding="utf-8")
    assert len(_exits_spelled_as_numbers(p, True)) == 5 and len(_exits_spelled_as_numbers(p, False)) == 3


def test_the_gate_has_no_exit_codes_of_its_own():
    from harness.analysis import gate

    assert not {"PASS", "REGRESSION", "USAGE", "INFRA", "MEANING", "VERDICT"} & set(vars(gate))


STATS_NAMES = {"alpha", "n_resamples", "n_permutations", "spread_resamples", "exact_max_sessions", "power",
               "normal_from_sessions"}


def _stats_literals(path: Path) -> list[str]:
    """A statistics count or level given as a number: a parameter's default, a keyword argument,
    an assignment or a pydantic `Field(default=...)` of a name in STATS_NAMES."""
    tree, out = ast.parse(path.read_text(encoding="utf-8")), []
    pairs = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs += list(zip([x.arg for x in pos[len(pos) - len(a.defaults):]], a.defaults))
            pairs += [(x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        elif isinstance(node, ast.Call) and not ast.unparse(node.func).startswith(("ax.", "plt.")):
            pairs += [(k.arg, k.value) for k in node.keywords if k.arg]  # matplotlib's alpha is an opacity
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            pairs.append((node.target.id, node.value))
        elif isinstance(node, ast.Assign):
            pairs += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
    for name, value in pairs:
        if name in STATS_NAMES:
            if isinstance(value, ast.Call) and ast.unparse(value.func) == "Field":
                value = next((k.value for k in value.keywords if k.arg == "default"), value.args[0] if value.args
                             else None)
            if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) and \
                    not isinstance(value.value, bool):
                out.append(f"{path.relative_to(ROOT).as_posix()}:{value.lineno}: {name} = {value.value}")
    return out


def test_the_statistics_counts_and_level_have_one_home():
    found = [x for p in _modules() if p.name != "stats_config.py" for x in _stats_literals(p)]
    assert not found, "\n".join(found)
    home = _stats_literals(PACKAGE / "metrics" / "stats_config.py")
    assert {x.split(": ")[1].split(" =")[0] for x in home} == STATS_NAMES  # the finder sees the home's own


def test_no_module_writes_a_ci_level_as_a_percentage():
    """`95% CI` in a string the harness prints is STATS.ci_label (docstrings may say 95%)."""
    found = []
    for p in _modules():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef,
                ast.ClassDef, ast.AsyncFunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)}
        found += [f"{p.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Constant)
                  and isinstance(n.value, str) and id(n) not in docs and re.search(r"\b9[059]% ", n.value)]
    assert not found, "\n".join(found)


def test_every_user_file_model_is_strict_and_only_strict_forbids_extra_keys():
    """The options `extra="forbid"` and `allow_inf_nan=False` are written in harness/strict.py alone."""
    from harness.arms.base import Params
    from harness.defaults import MetricsConfig
    from harness.llm.endpoint import EndpointConfig
    from harness.roles.base import CacheConfig, LLMConfig
    from harness.strict import Strict

    found = [f"{p.relative_to(ROOT)}:{i}" for p in _modules() if p.name != "strict.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"extra\s*=\s*['\"]forbid|allow_inf_nan\s*=\s*False", line)]
    assert not found, "\n".join(found)
    assert all(issubclass(m, Strict) for m in (Params, MetricsConfig, EndpointConfig, CacheConfig, LLMConfig))


def _operational_names() -> set[str]:
    from harness.metrics.registry import TEMPLATES

    return {t.pattern for t in TEMPLATES if t.kind == "operational"}


def test_the_operational_metrics_a_verdict_shows_are_operational_in_the_registry():
    from harness.analysis.verdict import SHOWN_OPERATIONAL
    from harness.metrics.registry import resolve

    assert SHOWN_OPERATIONAL and all(resolve(m).operational for m in SHOWN_OPERATIONAL)


def test_no_module_outside_the_metrics_lists_operational_metrics():
    """Whether a metric is operational is its registry entry's `kind`; a list of operational names
    elsewhere (a second home) would drift from it."""
    ops, found = _operational_names(), []
    for p in _modules():
        if p.is_relative_to(PACKAGE / "metrics"):
            continue
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
                named = {e.value for e in n.elts if isinstance(e, ast.Constant) and e.value in ops}
                if len(named) >= 2:
                    found.append(f"{p.relative_to(ROOT)}:{n.lineno}: {sorted(named)}")
    assert not found, "\n".join(found)


READ_BY_TEXT = re.compile(r"""startswith\(\s*["'](error|skipped|not measured|not asked|n/a|answer failed)[:"']|"""
                          r"""["']failed["']\s+in\s|status["']?\]?\.split\(["']:""")


def test_why_a_value_is_unmeasured_is_read_by_its_kind_only():
    """A reason beside a missing value is read by harness.unmeasured.Unmeasured.of, never matched by
    its text (`startswith("skipped")`, `"failed" in reason`, `status.split(":")[0]`)."""
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in _modules() if p.name != "unmeasured.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if READ_BY_TEXT.search(line)]
    assert not found, "\n".join(found)
    assert READ_BY_TEXT.search('j["status"].astype(str).str.startswith("skipped")')  # the old reader, found
    assert READ_BY_TEXT.search('reason.startswith("error") or "failed" in reason')


def test_capabilities_are_the_enums_members_everywhere():
    """What an arm can do is harness.arms.capability.Capability: every arm's capabilities are its
    members (not strings spelled again), every metric needs only members, and no module but the
    enum's lists a capability's meaning."""
    from harness.arms.capability import Capability
    from harness.arms.catalog import REGISTRY, make_arm
    from harness.metrics.registry import TEMPLATES

    for name in REGISTRY:
        arm = make_arm(name)
        assert arm.capabilities and all(type(c) is Capability for c in arm.capabilities), (name, arm.capabilities)
    assert TEMPLATES and {c for t in TEMPLATES for c in t.needs} <= set(Capability)
    meaning = Capability.ANSWERS.meaning
    homes = [p for p in _modules() if meaning in p.read_text(encoding="utf-8")]
    assert homes == [PACKAGE / "arms" / "capability.py"], homes


def test_an_unknown_capability_in_a_metric_is_refused_at_registration():
    import pytest

    from harness.metrics.registry import Template, family

    t = Template("made_up_metric", "higher", "share", "a metric needing a capability no arm has", needs=("telepathy",))
    with pytest.raises(ValueError, match=r"needs unknown capabilities \['telepathy'\]"):
        family("made_up_family", [t], order=999)(lambda *a: None)
