"""One home per definition (issue 43 item 2, in part): the pydantic base of every user-written
file's model is harness/strict.py's `Strict` (it was defined in four modules, with three different
configs), and the status of a row no judge endpoint measured is harness/roles/base.py's."""
import ast

from harness.strict import Strict
from tests.conftest import ROOT

PACKAGE = ROOT / "harness"


def _definitions(name: str) -> list[str]:
    """Modules defining `name` at their top level: as a class, or assigned."""
    out = []
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(p.read_text(encoding="utf-8")).body:
            targets = [node.name] if isinstance(node, ast.ClassDef) else \
                [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else []
            if name in targets:
                out.append(p.relative_to(ROOT).as_posix())
    return out


def test_strict_is_defined_once_and_every_user_file_model_uses_it():
    from harness.analysis.policy import Check
    from harness.config import IndexConfig
    from harness.evalset.model import FilterField
    from harness.testing.script import RuleSpec

    assert _definitions("Strict") == ["harness/strict.py"]
    assert all(issubclass(m, Strict) for m in (Check, IndexConfig, FilterField, RuleSpec))


def test_a_strict_model_refuses_unknown_keys_and_numbers_that_are_not_finite():
    import pydantic
    import pytest

    class Bound(Strict):
        x: float = 0.0

    for bad in ({"y": 1}, {"x": float("inf")}, {"x": float("nan")}):
        with pytest.raises(pydantic.ValidationError):
            Bound(**bad)
    assert Bound(x=1.5).x == 1.5


def test_not_measured_has_one_home():
    from harness.roles.base import NOT_MEASURED
    from harness.steps import judge, relevance

    assert _definitions("NOT_MEASURED") == ["harness/roles/base.py"]
    assert judge.NOT_MEASURED is relevance.NOT_MEASURED is NOT_MEASURED
