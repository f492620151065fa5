"""The one base of every model read from a user-written file (configs, policies, eval sets,
scripts): an unknown key is an error, never ignored, and a number must be finite (.inf and .nan
are bad input)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
