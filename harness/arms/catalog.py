"""Every arm, registered: importing this module imports each arm module of the package (they
register themselves with @register), so a new arm is one new file and no edit elsewhere. What
builds or lists arms imports from here; what only needs the arm result (harness.arms.result)
does not pay for importing every arm and the LLM layer they use."""
import importlib
import pkgutil

import harness.arms as _package
from harness.arms.base import REGISTRY, BaseArm, expand_grid  # noqa: F401  (what builders use)
from harness.arms.build import ArmPlan, build_arms, configure_arms, make_arm  # noqa: F401

for _m in pkgutil.iter_modules(_package.__path__):
    if _m.name != "catalog":
        importlib.import_module(f"{_package.__name__}.{_m.name}")
