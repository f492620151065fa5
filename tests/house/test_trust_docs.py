"""docs/gate.md's "What the gate refuses" quotes messages the code gives (issue 42): every run of
plain words in each quoted message (four words or more, between the parts that vary: paths, counts,
names) is a string of the harness, or of scripts/, or spans the end of one string and the start
of the next. A message reworded in the code and not in the docs fails here."""
import ast
import re

from tests.conftest import ROOT

# messages the gate passes on from a library (pydantic's), not written in this repository
LIBRARY = ("Input should be a finite number",)
# words of a quoted message that name what varies (runs, arms, statuses, Unicode names), not its text
VARIES = re.compile(r"[\d/@_`'…()\[\]{}<>=≥−]|\w\.\w|^[A-Z]{2,}$|^(cand|base|rewrite|concat|oracle|original|X|ext|main|"
                    r"test|b2b|runs|running|rеwrite|string|integers)$")


def literals() -> list[str]:
    """Every string constant of the harness and scripts/ (f-strings' constant parts), whitespace
    normalised; shell scripts whole."""
    out = set()
    for p in sorted((ROOT / "harness").rglob("*.py")) + sorted(x for x in (ROOT / "scripts").iterdir() if x.is_file()):
        text = p.read_text(encoding="utf-8", errors="replace")
        if p.suffix != ".py":
            out.add(" ".join(text.split()))
            continue
        out |= {" ".join(n.value.split()) for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return [x for x in out if x]


def table() -> list[tuple[str, str]]:
    """(what, message cell) of every row of the refusals table."""
    text = (ROOT / "docs/gate.md").read_text(encoding="utf-8")
    section = text.split("## What the gate refuses", 1)[1].split("\n| what |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in section.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows.append((cells[0], cells[1]))
    return rows


def quoted(cell: str) -> list[str]:
    """The code spans of a Markdown cell (``double`` where a message holds a backtick)."""
    return [m.group(2) for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", cell)]


def runs_of_words(message: str) -> list[str]:
    out = []
    for sentence in re.split(r"(?<=[.;])\s+(?=[A-Za-z])", message):
        words = []
        for w in sentence.split() + ["`"]:
            if VARIES.search(w.strip(",;:.?!\"")) or not w.strip(",;:.?!\""):
                if len(words) >= 3:
                    out.append(" ".join(words).strip(",;:. "))
                words = []
            else:
                words.append(w)
    return out


def in_code(words: str, strings: list[str]) -> bool:
    """In one string, or the end of one and the start of another (a message built of two parts, a
    part of under three words beside a placeholder counting as the other's)."""
    if any(words in s for s in strings) or any(words in s for s in LIBRARY):
        return True
    parts = words.split()
    for i in range(1, len(parts)):
        left, right = " ".join(parts[:i]), " ".join(parts[i:])
        ends = i < 3 or any(s.endswith(left) or s.endswith(left.rstrip(":;,")) for s in strings)
        starts = len(parts) - i < 3 or any(s.startswith(right) for s in strings)
        if ends and starts:
            return True
    return False


def test_every_refusal_the_docs_quote_is_a_message_of_the_code():
    strings = literals()
    rows = table()
    assert len(rows) >= 20, rows
    missing, unchecked = [], []
    for what, cell in rows:
        runs = [w for q in quoted(cell) for w in runs_of_words(q)]
        if not runs:
            unchecked.append(what)
        missing += [f"{what[:50]}: {w!r}" for w in runs if not in_code(w, strings)]
    assert not missing, "quoted in docs/gate.md, said nowhere in the code:\n" + "\n".join(missing)
    assert not unchecked, f"rows quoting no message: {unchecked}"


def test_a_reworded_message_is_caught():
    """The check itself: a message the code does not give fails it."""
    assert not in_code("the gate refuses every candidate on Tuesdays", literals())
    assert in_code("A verdict needs every planned turn; nothing was compared", literals())
