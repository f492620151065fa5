"""Issue 43, item 1: the gate's verdict travels as typed, versioned values. gate.json carries a
schema_version and validates against docs/gate.schema.json (generated from the models); a
gate.json of another version is refused (exit 2); each check's status and reason are enums; the
reasons a value is unmeasured are kinds (harness.unmeasured), never text matched by prefix."""
import json

import jsonschema
import pytest
import typer

from harness.analysis.verdict_types import (SCHEMA_PATH, SCHEMA_VERSION, CheckResult, CheckStatus, GateVerdict, Reason,
                                            json_schema, read_verdict)
from harness.errors import BadInput, Exit
from harness.unmeasured import Unmeasured
from tests.conftest import ROOT
from tests.analysis.test_compare_gate import ARM, POLICY, gate, make_run

SCHEMA = ROOT / SCHEMA_PATH


@pytest.fixture
def failing_gate(tmp_path):
    """A gate of a candidate worse by 0.1 on every turn: failed rules with moved turns, passed floors."""
    policy = tmp_path / "gate.yaml"
    policy.write_text(POLICY)
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, shift=-0.1, seed=1)
    r = gate(tmp_path, b, c, policy)
    assert isinstance(r.exception, SystemExit) and r.exit_code == Exit.REGRESSION, r.output  # not a crash
    return tmp_path / "out/gate.json"


def test_the_committed_schema_is_the_models():
    """docs/gate.schema.json is generated from the models (`python -m harness.analysis.verdict_types`)."""
    assert json.loads(SCHEMA.read_text(encoding="utf-8")) == json_schema()


def test_gate_json_of_a_real_gate_validates_against_its_schema(failing_gate):
    data = json.loads(failing_gate.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(data)
    assert data["schema_version"] == SCHEMA_VERSION and data["status"] == 1 and data["verdict"] == "regression"
    failed = [r for r in data["results"] if not r["ok"]]
    assert failed and all(r["status"] == "fail" and r["moved"] for r in failed)
    assert {r["reason"] for r in failed} == {"not_shown_noninferior", "significant_drop"}
    assert {r["reason"] for r in data["results"] if r["status"] == "pass"} == {"within"}
    assert {r["reason"] for r in data["results"] if r["status"] == "n/a"} == {"not_applicable"}
    for r in data["results"]:  # every field CI scripts read is still there
        assert {"kind", "name", "status", "ok", "label", "metric", "segment", "direction", "detail"} <= set(r)


def test_a_schema_violation_is_caught_by_the_schema(failing_gate):
    """The schema checks something: a status outside the enum, a missing field, an unknown key."""
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    data = json.loads(failing_gate.read_text(encoding="utf-8"))
    for broken in ({**data, "verdict": "fine"}, {k: v for k, v in data.items() if k != "results"},
                   {**data, "results": [{**data["results"][0], "status": "passed"}]}, {**data, "extra": 1}):
        assert not validator.is_valid(broken)


def test_gate_json_reads_back_as_the_verdict_it_was(failing_gate):
    v = read_verdict(failing_gate)
    assert isinstance(v, GateVerdict) and v.status is Exit.REGRESSION
    assert all(isinstance(r, CheckResult) and isinstance(r.status, CheckStatus) for r in v.results)
    assert v.failed[0].metric.name == "recall@10" and v.failed[0].metric.direction == "higher"  # the Metric
    assert v.to_json() == failing_gate.read_text(encoding="utf-8")


def test_an_infinite_turn_value_is_kept_spelled_and_valid_json(failing_gate):
    """A moved turn whose candidate value is infinite (an infinite latency) is a value, not a crash
    and not null: gate.json spells it "Infinity" (strict JSON, valid against the schema) and reads
    back as inf; NaN is no value and refused."""
    data = json.loads(failing_gate.read_text(encoding="utf-8"))
    failed = next(r for r in data["results"] if r["moved"])
    failed["moved"][0]["candidate"] = float("inf")
    v = GateVerdict.model_validate(data)
    text = v.to_json()
    assert '"candidate": "Infinity"' in text and "NaN" not in text
    written = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(written)
    again = GateVerdict.model_validate_json(text)
    assert next(r for r in again.results if r.moved).moved[0].candidate == float("inf")
    failed["moved"][0]["candidate"] = float("nan")
    with pytest.raises(ValueError, match="not NaN"):
        GateVerdict.model_validate(data)


@pytest.mark.parametrize("version", [None, 0, SCHEMA_VERSION + 1])
def test_a_gate_json_of_another_schema_version_is_refused(failing_gate, version, capsys):
    data = json.loads(failing_gate.read_text(encoding="utf-8"))
    if version is None:
        del data["schema_version"]
    else:
        data["schema_version"] = version
    failing_gate.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BadInput) as e:
        read_verdict(failing_gate)
    said = str(e.value)
    assert e.value.exit_code == Exit.BAD_INPUT == 2
    assert said.startswith(f"{failing_gate}: schema_version: {version!r}") and \
        f"schema_version {SCHEMA_VERSION} only" in said and "run `harness gate` again" in said
    from harness.cli import handled  # the CLI's one handler: the message, exit 2, no traceback

    with pytest.raises(typer.Exit) as ex:
        handled(lambda: read_verdict(failing_gate))()
    assert ex.value.exit_code == 2 and "schema_version" in capsys.readouterr().err


def test_a_check_whose_ok_disagrees_with_its_status_is_refused(failing_gate):
    v = read_verdict(failing_gate)
    with pytest.raises(ValueError, match="ok is True but status is fail"):
        CheckResult.model_validate({**v.failed[0].model_dump(), "ok": True})
    assert v.failed[0].but(status=CheckStatus.PASS, reason=Reason.WITHIN).ok  # ok follows the status


def test_unmeasured_reasons_are_kinds():
    """Every reason the harness writes has its kind; only errors and failed calls are infrastructure.
    The old rule (`startswith("error") or "failed" in reason`) called an n/a whose words say
    `failed` infrastructure."""
    from harness.analysis.gate_inputs import infra_reason
    from harness.roles.base import NOT_MEASURED
    from harness.steps.judge import NO_CONTEXT, SKIPPED

    kinds = {"error": Unmeasured.ERROR, "error: judge: timeout": Unmeasured.ERROR,
             "answer failed": Unmeasured.ANSWER_FAILED, NOT_MEASURED: Unmeasured.NOT_MEASURED,
             SKIPPED: Unmeasured.SKIPPED, NO_CONTEXT: Unmeasured.SKIPPED, "not asked: spend cap": Unmeasured.NOT_ASKED,
             "n/a: the reference rewrite failed to import": Unmeasured.NOT_APPLICABLE,
             "no relevant document": Unmeasured.OTHER, "empty ranking": Unmeasured.OTHER}
    assert {text: Unmeasured.of(text) for text in kinds} == kinds
    assert [Unmeasured.of(x) for x in (None, float("nan"), "", "ok")] == [None] * 4
    assert {text for text in kinds if infra_reason(text)} == {"error", "error: judge: timeout", "answer failed"}
