"""The deliberate refresh of the shipped embedding caches (`make refresh-embeddings`). Runs never
write `<eval set>/embeddings` (harness.corpus.embed.eval_set_cache); this replays each run
config with its new vectors going to a temporary folder, then adds those vectors to the eval
set's shipped folder as one new shard per model and kind (existing shards are left as they are).

    python -m harness.run.refresh CONFIG [CONFIG ...]
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from harness.errors import Exit
from harness.evalset.folder import EMBEDDINGS


def refresh(config: str | Path) -> tuple[Path, dict[str, int]]:
    """Replay `config` (run folder and new embeddings in a temporary folder) and add what it
    embedded beyond the shipped cache to that cache. Returns the shipped folder and the number
    of vectors added per `model/kind`."""
    from harness.config import load_config, parse_config, with_overrides
    from harness.corpus.embed import add_missing
    from harness.run.replay import Replay

    _, raw = load_config(config)
    with tempfile.TemporaryDirectory(prefix="harness-refresh-") as tmp:
        new = Path(tmp) / EMBEDDINGS
        raw = with_overrides(raw, {"runs_dir": str(Path(tmp) / "runs"), "index.embedding_cache": str(new)})
        rp = Replay(parse_config(raw, config), raw, progress=False)
        rp.run()
        shipped = Path(rp.es.path) / EMBEDDINGS
        return shipped, add_missing(new, shipped)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return Exit.BAD_INPUT
    for config in argv:
        shipped, added = refresh(config)
        what = ", ".join(f"{k}: {n}" for k, n in added.items()) or "nothing embedded"
        print(f"{config}: {sum(added.values())} vector(s) added to {shipped} ({what})")
    return Exit.PASS


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
