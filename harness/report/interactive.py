"""What makes the report's page one people can work in, inlined so that it opens offline: DataTables
(itables' offline bundle, MIT, gzip-compressed and base64-encoded: a quarter of its size as text)
for tables that sort on a click and filter on typing, and templates/report.js, which unpacks it,
gives the drill-down its search box and opens the <details> around a `#anchor`. The page's
Content-Security-Policy lets that one script run (by its hash) and the module it makes (a blob:
URL only a running script can make); no other script, nothing fetched."""
from __future__ import annotations

import base64
import gzip
import hashlib
import re
from functools import lru_cache
from importlib.metadata import distribution
from pathlib import Path

from markupsafe import Markup, escape

SCRIPT = Path(__file__).with_name("templates") / "report.js"
# the bundle itables ships for its offline mode (its option `dt_bundle` by default), found by the
# package's metadata: importing itables would import pandas and read an itables.toml found about
BUNDLE = "itables/html/dt_bundle.js"
ANCHOR_SAFE = re.compile(r"[A-Za-z0-9.-]")


def _packed(path: Path) -> str:
    """A file gzip-compressed (no timestamp: the same bytes every time) and base64-encoded."""
    return base64.b64encode(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)).decode("ascii")


@lru_cache(maxsize=1)
def assets() -> dict:
    """The inlined parts of the page: the DataTables bundle's script and style (packed), the
    report's own script and the Content-Security-Policy that lets only it run."""
    bundle = Path(str(distribution("itables").locate_file(BUNDLE)))
    script = SCRIPT.read_text(encoding="utf-8")
    if "</script" in script.lower():
        raise ValueError(f"{SCRIPT}: '</script' would end the inline script early")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
           f"script-src 'sha256-{digest}' blob:")
    return {"dt_js": _packed(bundle), "dt_css": _packed(bundle.with_suffix(".css")), "script": script, "csp": csp}


def breakable(name) -> Markup:
    """A metric's or arm's name, escaped, that may wrap after each underscore (`entitlement_`
    `violations`) in a narrow column rather than push its table past the page's edge."""
    return escape(str(name)).replace("_", Markup("_<wbr>"))


def anchor(value) -> str:
    """An HTML id part for any text, one-to-one and stable: letters, digits, '.' and '-' as they
    are, every other character as _hex_ (so `b2b-m01` stays `b2b-m01`)."""
    return "".join(c if ANCHOR_SAFE.fullmatch(c) else f"_{ord(c):x}_" for c in str(value))
