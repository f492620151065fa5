"""One error type, one handler (issue 27): every command of the CLI, given bad input, exits 2 with
one `error:` line and never a traceback. The cases cover every registered command: a new command
without a case here fails the first test."""
import pytest
import typer
from typer.testing import CliRunner

from harness.cli import app

NOWHERE = "no/such/path"


def commands(group=None, prefix=()) -> set[tuple[str, ...]]:
    """Every command path of the CLI (`("import", "run")`, `("gate",)`, ...)."""
    group = group or typer.main.get_command(app)
    out = set()
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out |= commands(cmd, (*prefix, name))
        else:
            out.add((*prefix, name))
    return out


def garbage_run(tmp_path):
    """A folder that looks like a run folder but whose manifest is not JSON."""
    run = tmp_path / "garbage"
    run.mkdir(exist_ok=True)
    (run / "manifest.json").write_text("{not json", encoding="utf-8")
    return run


def garbage_file(tmp_path, name="bad.yaml", text="a: [unclosed\n"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


CASES = {
    ("eval-set", "validate"): lambda t: [[NOWHERE]],
    ("import", "mtrag"): lambda t: [[NOWHERE, "-o", str(t / "o")]],
    ("import", "trec"): lambda t: [["--docs", NOWHERE, "--topics", NOWHERE, "--qrels", NOWHERE, "-o", str(t / "o"),
                                    "--name", "x"]],
    ("import", "run"): lambda t: [[NOWHERE, "--eval-set", NOWHERE], [str(garbage_file(t, "r.run", "q1 Q0\n")),
                                                                      "--eval-set", NOWHERE]],
    ("import", "ratings"): lambda t: [[NOWHERE, NOWHERE], [str(garbage_run(t)), str(garbage_file(t, "r.csv", "x"))]],
    ("import", "log"): lambda t: [[NOWHERE, "--corpus-from", NOWHERE, "-o", str(t / "o"), "--name", "x"]],
    ("run",): lambda t: [[NOWHERE], [str(garbage_file(t))], ["--resume", NOWHERE], ["--resume", str(garbage_run(t))]],
    ("init",): lambda t: [["--eval-set", NOWHERE, "-o", str(t / "c.yaml")], ["--eval-set", str(t), "-o", str(t / "c.yaml")]],
    ("sweep",): lambda t: [[NOWHERE, "--grid", "arms.x.y=1,2"], [str(garbage_file(t)), "--grid", "arms.x.y=1,2"]],
    ("merge",): lambda t: [[NOWHERE, "-o", str(t / "m")], [str(garbage_run(t)), "-o", str(t / "m")]],
    ("judge",): lambda t: [[NOWHERE], [str(garbage_run(t))]],
    ("metrics",): lambda t: [[NOWHERE], [str(garbage_run(t))]],
    ("serve",): lambda t: [[NOWHERE], [str(garbage_file(t))]],
    ("sample",): lambda t: [[NOWHERE], [str(garbage_run(t))]],
    ("trec-eval",): lambda t: [[NOWHERE, NOWHERE], [str(garbage_file(t, "q", "x")), str(garbage_file(t, "r", "y"))]],
    ("compare",): lambda t: [[NOWHERE, NOWHERE], [str(garbage_run(t)), str(garbage_run(t))]],
    ("gate",): lambda t: [["--baseline", NOWHERE, "--candidate", NOWHERE, "--policy", NOWHERE],
                          ["--baseline", str(garbage_run(t)), "--candidate", str(garbage_run(t)), "--policy",
                           str(garbage_file(t))]],
    ("report",): lambda t: [[NOWHERE], [str(garbage_run(t)), "-o", str(t / "r.html")]],
    ("show",): lambda t: [[NOWHERE, "s1"], [str(garbage_run(t)), "s1"], [NOWHERE, "s1", "x"]],
    ("list", "metrics"): lambda t: [["--bogus"]],
    ("list", "arms"): lambda t: [["--bogus"]],
    ("export", "trec"): lambda t: [[NOWHERE, "--arm", "x", "-o", str(t / "x.run")],
                                   [str(garbage_run(t)), "--arm", "x", "-o", str(t / "x.run")]],
    ("export", "qrels"): lambda t: [[NOWHERE, "-o", str(t / "q")]],
}


def test_every_command_has_a_bad_input_case():
    assert commands() == set(CASES), sorted(commands() ^ set(CASES))


@pytest.mark.parametrize("path", sorted(CASES), ids=" ".join)
def test_bad_input_exits_2_with_one_message_and_no_traceback(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in CASES[path](tmp_path):
        r = CliRunner().invoke(app, [*path, *args])
        assert r.exit_code == 2, (path, args, r.exit_code, r.output, r.exception)
        assert "Traceback" not in r.output and not isinstance(r.exception, Exception) or \
            isinstance(r.exception, SystemExit), (path, args, repr(r.exception), r.output)
        assert "error" in r.output.lower() or "usage" in r.output.lower(), (path, args, r.output)
