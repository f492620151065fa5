"""No private API of Python or of a library in harness/ (issue 43 item 5): no `_`-name reached
through an imported module or class that is not the harness's own, no import of a library's
`_`-module, no override calling a library's `_`-method through super(), no exec/eval-built code,
no import hooks on sys.meta_path."""
import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "harness"

# Documented in the standard library's reference despite the underscore: os._exit ("should
# normally only be used in the child process after a fork") and the _thread module.
DOCUMENTED = {"os._exit", "_thread"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign(module: str | None) -> bool:
    return module is not None and module.split(".")[0] not in ("harness", "__future__")


def _chain(node: ast.AST) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"], None when the chain does not start at a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def findings(src: str) -> list[tuple[int, str]]:
    """(line, what) for every private API use in one module's source."""
    tree = ast.parse(src)
    imported: dict[str, str] = {}  # local name -> the foreign module or object it was imported as
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _foreign(a.name):
                    imported[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    if any(_private(p) for p in a.name.split(".")):
                        out.append((node.lineno, a.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _foreign(node.module):
            if any(_private(p) for p in node.module.split(".")):
                out.append((node.lineno, node.module))
            for a in node.names:
                imported[a.asname or a.name] = f"{node.module}.{a.name}"
                if _private(a.name):
                    out.append((node.lineno, f"{node.module}.{a.name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain and chain[0] in imported and _private(chain[-1]):
                out.append((node.lineno, ".".join([imported[chain[0]], *chain[1:]])))
            if chain and chain[0] in imported and chain[-1] == "meta_path":
                out.append((node.lineno, "sys.meta_path"))
            if (isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                    and node.value.func.id == "super" and _private(node.attr)):
                out.append((node.lineno, f"super().{node.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("exec", "eval", "compile"):
                out.append((node.lineno, f"{node.func.id}()"))
            elif node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2:
                target, name = _chain(node.args[0]), node.args[1]
                if (target and target[0] in imported and isinstance(name, ast.Constant)
                        and isinstance(name.value, str) and _private(name.value)):
                    out.append((node.lineno, ".".join([imported[target[0]], *target[1:], name.value])))
    # super()._x inside a class built on the harness's own classes is the harness's own method
    own = {getattr(n, "lineno", None) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and not _has_foreign_base(c, imported)
           for n in ast.walk(c)}
    return sorted({(line, what) for line, what in out
                   if what not in DOCUMENTED and not (what.startswith("super()") and line in own)})


def _has_foreign_base(cls: ast.ClassDef, imported: dict[str, str]) -> bool:
    return any((chain := _chain(b)) and chain[0] in imported for b in cls.bases)


def test_the_harness_uses_no_private_api():
    found = [f"{p.relative_to(ROOT).as_posix()}:{line}: {what}" for p in sorted(PACKAGE.rglob("*.py"))
             for line, what in findings(p.read_text(encoding="utf-8"))]
    assert not found, "private APIs (use the public way and accept the cost):\n" + "\n".join(found)


# What harness/run/shard_worker.py and harness/store/traces.py did before issue 43 item 5.
OLD_WORKER = '''
import atexit
import sys
import weakref
import pyarrow as pa

def leave_the_parent():
    atexit._clear()
    weakref.finalize._registry.clear()
    weakref.finalize._registered_with_atexit = False

def pyarrow_without_pandas():
    shim = getattr(pa.lib, "_pandas_api", None)
    sys.meta_path.insert(0, object)
    atexit._run_exitfuncs()

exec("def _row(key, result): return {}", {})
'''

OWN = '''
import os
from harness.arms.base import BaseArm

class Arm(BaseArm):
    def run(self):
        self._arms = None
        return super()._fmt()

def orphaned():
    os._exit(75)
'''


def test_the_check_finds_what_the_workers_and_trace_rows_did_before():
    what = [w for _, w in findings(OLD_WORKER)]
    assert what == ["atexit._clear", "weakref.finalize._registry", "weakref.finalize._registered_with_atexit",
                    "pyarrow.lib._pandas_api", "sys.meta_path", "atexit._run_exitfuncs", "exec()"]
    assert findings(OWN) == []  # the harness's own `_`-names, and documented os._exit, are fine
