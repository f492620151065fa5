"""Whether values carry anything a plot could show (the sections ask before they have a plot
drawn, harness.report.plots draws only the finite ones). Plain Python: no plotting library."""
from __future__ import annotations

import math


def finite(v) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def flat(values) -> bool:
    """True when a plot of these values would carry no information: no finite value, or every
    finite value equal (the report then says so in one sentence instead of drawing it)."""
    vals = [float(v) for v in values if finite(v)]
    return not vals or max(vals) - min(vals) <= 1e-12 * max(1.0, abs(max(vals)))
