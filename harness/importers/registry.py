"""Eval-set importers: each is one file under harness/importers/ with one function registered by
`@importer(NAME)`. The function is the `harness import NAME` command (its parameters are the
command's arguments and options, its docstring the help) and returns the eval-set folder it wrote;
the CLI validates that folder after it. `catalog()` imports every importer file, so a new importer
is one file and its decorator."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

IMPORTERS: dict[str, Callable] = {}


def importer(name: str) -> Callable[[Callable], Callable]:
    def register(fn: Callable) -> Callable:
        if name in IMPORTERS:
            raise ValueError(f"importer {name!r} registered twice")
        IMPORTERS[name] = fn
        return fn
    return register


def catalog() -> dict[str, Callable]:
    """Every registered importer, by name (importing each module of the package)."""
    import harness.importers as package

    for m in pkgutil.iter_modules(package.__path__):
        if m.name not in ("registry", "common"):
            importlib.import_module(f"{package.__name__}.{m.name}")
    return dict(IMPORTERS)
