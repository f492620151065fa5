"""How much the HTML report shows inline, read by the report and by `harness report`'s options (a
module of constants: the command line imports it without loading the report)."""

# sessions per run the drill-down shows turn by turn, the most disagreement first (and every session
# where a candidate regressed); the others are listed by id. 150 keeps the demo's report under 3 MB.
DRILL_SESSIONS = 150
