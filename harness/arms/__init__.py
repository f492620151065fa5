"""Arms register themselves with @register on import; every module of this package is imported
here, so a new arm is one new file and no edit elsewhere."""
import importlib
import pkgutil

from harness.arms.base import REGISTRY, BaseArm, expand_grid, make_arm  # noqa: F401

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
