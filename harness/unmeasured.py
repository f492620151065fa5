"""Why a value is unmeasured, as a kind: the one reader of the reasons written beside a missing value
(the metrics table's `unmeasured`, the judgments' and relevance labels' `status`). A reason is
written `KIND: detail` (`error: judge: timeout`, `skipped: abstained/no answer`) by `Unmeasured.said`,
or is a kind's value alone (`error`, `answer failed`) or a text of its own (`no relevant document`);
writers spell kinds through this enum, `Unmeasured.of` gives a reason's kind, and callers compare
kinds, never the text (tests/house/test_constants.py holds that)."""
from __future__ import annotations

import math
from enum import Enum

MEASURED = "ok"  # the status of a judgment or relevance label that holds a value


class Unmeasured(str, Enum):
    ERROR = "error"  # an error of the arm, an LLM call or the judge (infrastructure)
    ANSWER_FAILED = "answer failed"  # the answer role's call failed (infrastructure)
    NOT_MEASURED = "not measured"  # nothing was configured to measure it (no judge endpoint)
    NOT_ASKED = "not asked"  # a step stopped before asking (a spend cap)
    SKIPPED = "skipped"  # nothing to measure: no answer, no context, no question
    NOT_APPLICABLE = "n/a"  # the arm does not do what the metric measures
    OTHER = "other"  # the labels or the arm explain it: no relevance labels, no relevant document, an empty
    # ranking, a price unknown

    @property
    def infrastructure(self) -> bool:
        """Infrastructure caused it (an error, a failed call), not the labels or the arm."""
        return self in (Unmeasured.ERROR, Unmeasured.ANSWER_FAILED)

    def said(self, detail: str) -> str:
        """The reason as written: `KIND: detail`."""
        return f"{self.value}: {detail}"

    @staticmethod
    def detail(reason: str) -> str:
        """What a reason says past its last kind or step (`error: judge: timeout` -> `timeout`)."""
        return str(reason).split(":", 2)[-1].strip()

    @classmethod
    def each(cls, reasons):
        """`of` of every reason in a pandas Series, worked out once per distinct reason (a run
        repeats a few reasons over many turns); a missing one (None, NaN) has none."""
        kinds = {r: cls.of(r) for r in reasons.dropna().unique()}
        return reasons.map(kinds)

    @classmethod
    def of(cls, reason) -> Unmeasured | None:
        """The kind of a written reason; None when there is none (None, NaN, empty, `ok`: the value is measured)."""
        if reason is None or (isinstance(reason, float) and math.isnan(reason)) or str(reason) in ("", MEASURED):
            return None
        text = str(reason)
        if text == cls.ANSWER_FAILED.value:
            return cls.ANSWER_FAILED
        head = text.split(":", 1)[0].strip()
        for kind in cls:
            if kind.value == head:
                return kind
        return cls.OTHER
