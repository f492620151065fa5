"""Metric families: one file each, a kernel registered with `harness.metrics.registry.family`
beside the metrics it computes. Every module here is imported, so a new family is one file."""
import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
