"""The table, slopes and log-log plot of `make bench-scale`'s results (bench/results/scale.json),
written into bench/results/scale.md between its markers and to bench/results/scale.png.

    bench/scale_table.py [RESULTS.json]
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import cpu_model  # noqa: E402

RESULTS = HERE / "results" / "scale.json"
BEGIN, END = "<!-- bench-scale: begin (bench/scale_table.py) -->", "<!-- bench-scale: end -->"
STAGE_ORDER = ("replay", "metrics", "compare", "gate", "report")


def _mb(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.0f}"


def _clock(s: float) -> str:
    return f"{int(s // 60)}:{s % 60:04.1f}" if s >= 60 else f"{s:.1f} s"


def table(rows: list[dict]) -> list[str]:
    out = ["| turns x 5 arms | stage | run read | exit | wall | CPU s | peak PSS, tree (MB) | peak RSS, one process (MB) "
           "| load before / after | notes |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        notes = ", ".join(f"{k} {r[k]:,}" if isinstance(r[k], int) else f"{k} {r[k]}"
                          for k in ("rows", "parts", "folder_mb", "report_mb") if r.get(k) is not None)
        out.append(f"| {r['turns']:,} | {r['stage']} | {r.get('source', 'replay')} | {r['exit']} | {_clock(r['wall_s'])} "
                   f"| {r['cpu_s']:,.0f} | "
                   f"{_mb(r['tree_pss_mb'])} | {_mb(r['max_rss_mb'])} | {r['load_before']:.1f} / "
                   f"{r['load_after']:.1f} | {notes} |")
    return out


def series(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(stage, run read) -> its successful measurements by size, stages in their order (a gate's
    exit 1 is a verdict, regression or insufficient data, as much a measurement as a pass)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in sorted(rows, key=lambda r: (STAGE_ORDER.index(r["stage"]), r.get("source", "replay"), r["turns"])):
        if r["exit"] == 0 or (r["stage"] == "gate" and r["exit"] == 1):
            out.setdefault((r["stage"], r.get("source", "replay")), []).append(r)
    return out


def slopes(rows: list[dict]) -> list[str]:
    """Per stage, from the two largest sizes measured: the log-log slope of CPU time, wall time and
    peak memory, and CPU time against linear (1.00: exactly linear)."""
    out = ["| stage | run read | from -> to turns | CPU time: slope, x linear | wall: slope | peak PSS: slope |",
           "|---|---|---|---|---|---|"]
    for (stage, source), mine in series(rows).items():
        if len(mine) < 2:
            continue
        a, b = mine[-2], mine[-1]
        k = math.log10(b["turns"] / a["turns"])

        def slope(key):
            return math.log10(b[key] / a[key]) / k if a[key] > 0 and b[key] > 0 else float("nan")

        lin = (b["cpu_s"] / a["cpu_s"]) / (b["turns"] / a["turns"])
        out.append(f"| {stage} | {source} | {a['turns']:,} -> {b['turns']:,} | {slope('cpu_s'):.2f}, {lin:.2f}x | "
                   f"{slope('wall_s'):.2f} | {slope('tree_pss_mb'):.2f} |")
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (t_ax, m_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (stage, source), mine in series(rows).items():
        n = [r["turns"] for r in mine]
        line = t_ax.plot(n, [r["cpu_s"] for r in mine], "o-", label=f"{stage} ({source})")[0]
        t_ax.plot(n, [r["wall_s"] for r in mine], "x--", color=line.get_color(), alpha=0.6)
        m_ax.plot(n, [r["tree_pss_mb"] / 1024 for r in mine], "o-", color=line.get_color(), label=f"{stage} ({source})")
    for ax, what in ((t_ax, "seconds (o CPU, x wall)"), (m_ax, "peak memory, GB (PSS of the process tree)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("labelled turns (x 5 arms)")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    t_ax.legend(fontsize=8)
    fig.suptitle(f"make bench-scale: {cpu_model()}, {os.cpu_count()} cores", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(results: Path = RESULTS) -> None:
    rows = json.loads(Path(results).read_text(encoding="utf-8"))
    md = results.with_suffix(".md")
    png = results.with_suffix(".png")
    plot(rows, png)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    block = [BEGIN, "", f"Machine: {cpu_model()}, {os.cpu_count()} cores, {mem:.0f} GB, {platform.platform()}.", "",
             *table(rows), "", "Slopes between the two largest sizes (log-log; 1.00 is linear):", "", *slopes(rows), "",
             f"![time and memory against N]({png.name})", "", END]
    text = md.read_text(encoding="utf-8") if md.is_file() else ""
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + "\n".join(block) + text[text.index(END) + len(END):]
    else:
        text = text.rstrip() + "\n\n" + "\n".join(block) + "\n"
    md.write_text(text, encoding="utf-8")
    print(f"wrote {md} and {png}")


if __name__ == "__main__":
    write_outputs(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS)
