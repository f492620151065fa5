"""The eval set CI takes from the base commit (scripts/eval_gate.sh; docs/gate.md, "In CI"): which
folder a config's `eval_set:` names, as a repository path, and what a pull request changes in it.
Both runs of the CI gate replay the base commit's folder, so a change of the eval set (qrels deleted
where the new arm loses) is never what judges the change; the job summary says what it changes.

    python -m harness.analysis.base_evalset folder CONFIG ROOT    # the eval set CONFIG names, from ROOT
    python -m harness.analysis.base_evalset change BASE HEAD NAME # the summary note: what HEAD changes
"""
from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput, Exit, HarnessError
from harness.evalset.folder import find_eval_set
from harness.evalset.load import iter_labelled, load_eval_set
from harness.yamlpos import read_yaml

COUNTED = ("sessions", "labelled turns", "turns with qrels", "qrels")  # what the note counts, in its order


def config_eval_set(config: str | Path, root: str | Path) -> str:
    """The folder `config`'s `eval_set:` names, read as the harness reads it (from the config's folder,
    else from the working folder `root`), as a path from `root` when it lies inside (else absolute);
    "" when the config names none. A key written twice, or a file that is no YAML: BadInput."""
    raw = read_yaml(config, BadInput)[0]
    given = raw.get("eval_set") if isinstance(raw, dict) else None
    if not given:
        return ""
    found, _ = find_eval_set(str(given), Path(config).parent, Path(root))
    if found is None:  # a folder neither way (yet: a git-ignored download): the path as written, from root
        found = Path(root) / str(given)
    full, top = Path(os.path.abspath(found)), Path(os.path.abspath(root))
    return full.relative_to(top).as_posix() if top in full.parents else str(full)


def _files(folder: Path) -> dict[str, str]:
    """Every file under `folder` (its path from there) -> the sha256 of its bytes."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _keys(folder: Path) -> dict[str, set]:
    """The sessions, labelled turns, turns with qrels and qrels (session, turn, document, grade: a
    changed grade is one removed and one added) of an eval set, by the harness's loader."""
    es = load_eval_set(folder)
    out = {k: set() for k in COUNTED}
    out["sessions"] = {s.session_id for s in es.sessions}
    for s, _, index, t in iter_labelled(es):
        key = (s.session_id, index)
        out["labelled turns"].add(key)
        qrels = {(*key, d, g) for d, g in t.labels.qrels.items()}
        out["turns with qrels"] |= {key} if qrels else set()
        out["qrels"] |= qrels
    return out


@dataclass(frozen=True)
class EvalSetChange:
    """What HEAD's copy of an eval set changes from the base's: files (path -> changed, only in the
    base, only here), counts per COUNTED entry (base, head, added, removed), and why they could not be
    counted (an eval set that does not load), or None."""
    files: dict[str, str]
    counts: dict[str, tuple[int, int, int, int]]
    unloadable: str | None = None


def eval_set_change(base: str | Path, head: str | Path) -> EvalSetChange:
    """Compare two copies of one eval set folder, file by file and label by label."""
    fb, fh = _files(Path(base)), _files(Path(head))
    files = {n: "changed" if n in fb and n in fh else "only in the base" if n in fb else "only here"
             for n in sorted(set(fb) | set(fh)) if fb.get(n) != fh.get(n)}
    keys = {}
    for which, folder in (("the base's", base), ("this change's", head)):
        try:
            keys[which] = _keys(Path(folder))
        except HarnessError as e:  # its first problem: "1 problem(s) in eval set: sessions.jsonl:1: …"
            first = [x.strip() for x in str(e).splitlines()[:2]]
            return EvalSetChange(files, {}, f"{which} eval set does not load: {': '.join(first)}")
    kb, kh = keys.values()
    counts = {k: (len(kb[k]), len(kh[k]), len(kh[k] - kb[k]), len(kb[k] - kh[k])) for k in COUNTED}
    return EvalSetChange(files, counts)


def change_note(change: EvalSetChange, name: str) -> str:
    """The job summary's note (Markdown) on a pull request that edits the eval set `name`."""
    listed = ", ".join(f"`{name}/{f}` ({how})" for f, how in list(change.files.items())[:12])
    more = f", and {len(change.files) - 12} more" if len(change.files) > 12 else ""
    lines = [f"Note: this change edits the eval set `{name}`: {listed or 'no file'}{more}. It is gated on the "
             f"base commit's eval set (corpus, sessions, labels): the edit is not evaluated here, and applies "
             f"once merged.", "", "```"]
    if change.unloadable:
        lines.append(f"the labels could not be counted: {change.unloadable}")
    for what, (b, h, added, removed) in change.counts.items():
        lines.append(f"{what}: {b} in the base, {h} here: {added} added, {removed} removed")
    return "\n".join([*lines, "```"])


def main(argv: list[str]) -> int:
    """The two questions scripts/eval_gate.sh asks; bad input is one line on stderr, exit 2."""
    try:
        if len(argv) == 3 and argv[0] == "folder":
            print(config_eval_set(argv[1], argv[2]))
        elif len(argv) == 4 and argv[0] == "change":
            print(change_note(eval_set_change(argv[1], argv[2]), argv[3]))
        else:
            print("\n".join(__doc__.strip().splitlines()[-2:]), file=sys.stderr)
            return Exit.BAD_INPUT
    except HarnessError as e:
        print(e, file=sys.stderr)
        return e.exit_code
    return Exit.PASS


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
