"""A synthetic eval set of N labelled turns from the b2b-shop catalogue, for replays at scale
(`make bench-scale`, docs/scaling.md): the catalogue, its info file and its shipped embeddings as
they are, and sessions drawn with replacement (seeded) from b2b-shop's hand-written ones under new
session ids, each going to the split its original is in. The last session is cut to its first
turns so the set holds exactly N labelled turns. Every text a replay issues is one the catalogue's
own sessions issue, so the shipped query embeddings cover it: a replay of a million turns embeds
nothing, and its cost is the harness's, not the embedder's. Deterministic for a seed.

    bench/synth_evalset.py OUT --turns 100000 [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT  # noqa: E402  (environment)

from harness.evalset.folder import CORPUS, EMBEDDINGS, INFO, SPLIT_FILES  # noqa: E402

SOURCE = ROOT / "eval_sets" / "b2b-shop"


def _originals(source: Path) -> list[tuple[str, dict]]:
    """(split, session) of every session of the source set, in file order."""
    out = []
    for split, name in SPLIT_FILES.items():
        p = source / name
        if p.is_file():
            out += [(split, json.loads(line)) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    return out


def _labelled(session: dict) -> int:
    return sum(1 for t in session["turns"] if t.get("labels"))


def _cut(session: dict, need: int) -> dict:
    """The session up to (and with) its `need`-th labelled turn."""
    turns, n = [], 0
    for t in session["turns"]:
        turns.append(t)
        n += bool(t.get("labels"))
        if n == need:
            break
    return {**session, "turns": turns}


def write_synthetic_evalset(out: Path, turns: int, seed: int = 0, source: Path = SOURCE) -> dict:
    """Writes the eval set folder `out` (replaced if it exists); returns its counts."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    info = (source / INFO).read_text(encoding="utf-8")
    (out / INFO).write_text(info.replace("name: b2b-shop", "name: b2b-synth", 1), encoding="utf-8")
    shutil.copyfile(source / CORPUS, out / CORPUS)
    if (source / EMBEDDINGS).is_dir():
        shutil.copytree(source / EMBEDDINGS, out / EMBEDDINGS)
    originals = _originals(source)
    rng = random.Random(seed)
    files = {split: open(out / name, "w", encoding="utf-8") for split, name in SPLIT_FILES.items()}
    done = sessions = 0
    try:
        while done < turns:
            split, s = originals[rng.randrange(len(originals))]
            s = _cut(s, min(_labelled(s), turns - done))
            s = {**s, "session_id": f"syn{sessions:07d}-{s['session_id']}"}
            files[split].write(json.dumps(s, ensure_ascii=False) + "\n")
            done += _labelled(s)
            sessions += 1
    finally:
        for f in files.values():
            f.close()
    for split, name in SPLIT_FILES.items():
        if (out / name).stat().st_size == 0 and split != "main":
            (out / name).unlink()
    return {"turns": done, "sessions": sessions, "path": str(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--turns", type=int, default=10_000, help="labelled turns")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(write_synthetic_evalset(a.out, a.turns, a.seed))


if __name__ == "__main__":
    main()
