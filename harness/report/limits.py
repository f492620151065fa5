"""How much the HTML report shows inline, read by the report and by `harness report`'s options (a
module of constants: the command line imports it without loading the report)."""

# sessions per run the drill-down shows turn by turn, the most disagreement first (and every session
# where a candidate regressed); the others are listed by id (a bound on the report's size).
DRILL_SESSIONS = 150
TOP_HITS = 5  # documents of an arm's ranking the drill-down shows (and compares arms by)
SAMPLE_RANDOM = 20  # sessions the drill-down shows drawn by a hash of their ids besides the most disagreement
SAMPLE_FAILED = 20  # sessions with a turn that ended in an error it shows at most
LISTED = 1000  # sessions past those it lists by id at most; the rest it counts (`harness show` reaches every turn)
