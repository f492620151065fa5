"""Plots of the HTML report as base64 PNG strings (matplotlib's Agg canvas, no pyplot state).
Input is prepared data from harness.report.sections (plain lists and dicts); plots never read files.
The sections ask for them through harness.report.plotting (here, or in a process of its own)."""
from __future__ import annotations

import base64
import io
import math

from harness import env as _env  # noqa: F401  (MPLCONFIGDIR before matplotlib loads)
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.report.colors import COLORS
from harness.report.values import finite

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p"]
DPI = 96


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def plain(text: str) -> str:
    """Text for matplotlib without mathtext: `$` would start a formula."""
    return str(text).replace("\\", "\\\\").replace("$", r"\$")


def palette(im) -> bytes:
    """The RGBA image (PIL) as a PNG in at most 256 colours (8-bit palette, median cut, no
    dithering): a plot's lines, markers and bands look the same and take about a third of the bytes
    of matplotlib's RGBA."""
    from PIL import Image

    flat = Image.new("RGBA", im.size, "white")
    flat.alpha_composite(im)
    q = flat.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    q.save(out, format="PNG", optimize=True)  # no text chunk: no Software/URL
    return out.getvalue()


class _Canvas(FigureCanvasAgg):
    """The Agg canvas with one more savefig format, `pixels`: the drawn RGBA buffer (bbox_inches and
    all, as savefig's PNG holds it) kept as a PIL image in `image`, where a PNG was encoded only for
    palette to decode it again."""

    image = None

    def print_pixels(self, filename_or_obj, **kwargs):
        from PIL import Image

        FigureCanvasAgg.draw(self)
        buf = self.buffer_rgba()
        self.image = Image.frombuffer("RGBA", (buf.shape[1], buf.shape[0]), buf, "raw", "RGBA", 0, 1).copy()


def to_base64(fig: Figure) -> str:
    canvas = _Canvas(fig)
    fig.savefig(io.BytesIO(), format="pixels", dpi=DPI, bbox_inches="tight")
    return base64.b64encode(palette(canvas.image)).decode("ascii")


OVERLAID = 4  # arms drawn on one axis by turn index; more are split into small multiples (bands would smear)


def _arm_line(ax, s: dict, xs: dict, off: float, faint: bool = False) -> None:
    """One arm's mean per turn bucket with its 95% CI (band and bars); `faint`: grey context only."""
    pts = [p for p in s["points"] if finite(p["mean"])]
    if not pts:
        return
    x = [xs[p["bucket"]] + off for p in pts]
    y = [p["mean"] for p in pts]
    if faint:
        ax.plot(x, y, color="#bbbbbb", lw=0.9, zorder=1)
        return
    lo = [p["lo"] if finite(p["lo"]) else p["mean"] for p in pts]
    hi = [p["hi"] if finite(p["hi"]) else p["mean"] for p in pts]
    c = color(s["color_index"])
    ax.plot(x, y, marker=MARKERS[s["color_index"] % len(MARKERS)], color=c, lw=1.6, ms=5, label=plain(s["label"]), zorder=3)
    if len(x) > 1:
        ax.fill_between(x, lo, hi, color=c, alpha=0.12, lw=0)
    ax.errorbar(x, y, yerr=[[m - a for m, a in zip(y, lo)], [b - m for m, b in zip(y, hi)]], fmt="none",
                ecolor=c, elinewidth=0.9, capsize=2, alpha=0.7)


def _turn_axis(ax, buckets: list[str], unit: bool, short: bool = False) -> None:
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels(buckets if short else [f"turn {b}" for b in buckets])
    ax.tick_params(labelbottom=True)  # every panel's turns, also above a hidden panel
    ax.set_xlim(-0.5, len(buckets) - 0.5)
    if unit:
        ax.set_ylim(-0.02, 1.04)
    ax.grid(True, alpha=0.3)


def turn_figure(series: list[dict], buckets: list[str], metric: str, title: str, unit: bool = False) -> Figure:
    """Up to OVERLAID arms: a line each on one axis, dodged a little so identical lines stay
    visible. More: one small panel per arm (its line and band in its colour, the others grey
    behind it), sharing the y axis, so that overlapping bands stay readable."""
    xs = {b: i for i, b in enumerate(buckets)}
    if len(series) <= OVERLAID:
        fig = Figure(figsize=(8.6, 3.9))
        ax = fig.add_subplot(1, 1, 1)
        k = max(len(series), 1)
        for j, s in enumerate(series):
            _arm_line(ax, s, xs, (j - (k - 1) / 2) * (0.28 / max(k - 1, 1)) if k > 1 else 0.0)
        _turn_axis(ax, buckets, unit)
        ax.set_ylabel(plain(metric))
        ax.set_title(plain(title), fontsize=10)
        if series:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        return fig
    cols = 4
    rows = math.ceil(len(series) / cols)
    fig = Figure(figsize=(8.6, 0.6 + 2.1 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    for ax, s in zip(axes, series):
        for other in series:
            if other is not s:
                _arm_line(ax, other, xs, 0.0, faint=True)
        _arm_line(ax, s, xs, 0.0)
        _turn_axis(ax, buckets, unit, short=True)
        ax.set_title(plain(s["label"]), fontsize=8, color=color(s["color_index"]))
    for ax in axes[len(series):]:
        ax.set_visible(False)
    axes[0].set_ylabel(plain(metric))
    fig.supxlabel("turn index", fontsize=9)
    fig.suptitle(plain(title), fontsize=10)
    return fig


def metric_by_turn(series: list[dict], buckets: list[str], metric: str, title: str, unit: bool = False) -> str:
    """The plot by turn index (turn_figure) as base64 PNG; `unit`: the metric is in 0..1 (the y axis
    then shows the whole range). series: [{label, color_index, points: [{bucket, mean, lo, hi, n}]}]."""
    return to_base64(turn_figure(series, buckets, metric, title, unit))


def _frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Pareto frontier: lowest x for each gain in y (x lower is better, y higher is better)."""
    best, out = -math.inf, []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best:
            out.append((x, y))
            best = y
    return out


def _groups(pts: list[tuple[float, float, int]], xr: float, yr: float, tol: float = 0.025) -> list[list[int]]:
    """Indices of points that lie within `tol` of the axes' ranges of each other (one label each)."""
    groups: list[list[tuple[float, float, int]]] = []
    for x, y, i in pts:
        for g in groups:
            if abs(g[0][0] - x) <= tol * xr and abs(g[0][1] - y) <= tol * yr:
                g.append((x, y, i))
                break
        else:
            groups.append([(x, y, i)])
    return [[p[2] for p in g] for g in groups]


AXES = {"cost": "cost per turn (USD)", "p95_ms": "p95 latency_total_ms"}


def tradeoff(points: list[dict], title: str, y_name: str = "recall@10", panels: tuple = tuple(AXES)) -> str:
    """A scatter per panel: y against cost per turn (USD) and against p95 total latency (ms), with
    the frontier. Arms are numbered in the legend; points that (nearly) coincide share one label.
    points: [{label, color_index, y, cost, p95_ms}] (cost/p95 None when unmeasured); `panels`: the x
    axes to draw (the section leaves out one whose values are all equal)."""
    fig = Figure(figsize=(12 if len(panels) > 1 else 7.6, 4.4))
    num = {id(p): n for n, p in enumerate(points, start=1)}
    handles = {}
    for pos, key in enumerate(panels, start=1):
        xlabel = AXES[key]
        ax = fig.add_subplot(1, len(panels), pos)
        pts = [p for p in points if finite(p.get(key)) and finite(p.get("y"))]
        for p in pts:
            c = color(p["color_index"])
            h = ax.scatter([p[key]], [p["y"]], color=c, marker=MARKERS[p["color_index"] % len(MARKERS)], s=42, zorder=3)
            handles.setdefault(num[id(p)], (h, f"{num[id(p)]} {plain(p['label'])}"))
        front = _frontier([(p[key], p["y"]) for p in pts])
        if len(front) > 1:
            ax.step([f[0] for f in front], [f[1] for f in front], where="post", color="#444", lw=1, ls="--", alpha=0.7)
        if not pts:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color="#888")
        elif all(p[key] == 0 for p in pts):
            ax.set_xlim(-0.001 if key == "cost" else -1, 0.01 if key == "cost" else 1)
        if pts:
            xs, ys = [p[key] for p in pts], [p["y"] for p in pts]
            xr, yr = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
            by_num = {num[id(p)]: p for p in pts}
            for g in _groups([(p[key], p["y"], num[id(p)]) for p in pts], xr, yr):
                p = by_num[g[0]]
                ax.annotate(",".join(map(str, g)), (p[key], p["y"]), textcoords="offset points", xytext=(5, 4),
                            fontsize=7, color="#333")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(plain(y_name))
        ax.grid(True, alpha=0.3)
    if handles:
        items = [handles[k] for k in sorted(handles)]
        right = 0.9 if len(panels) > 1 else 0.8
        fig.legend([h for h, _ in items], [lab for _, lab in items], loc="center left",
                   bbox_to_anchor=(right + 0.01, 0.5), fontsize=8, frameon=False)
        fig.subplots_adjust(right=right)
    fig.suptitle(plain(title) + "  (dashed: frontier)", fontsize=10)
    return to_base64(fig)


def rounds_bars(arms: list[dict], title: str) -> str:
    """Stacked horizontal bars: share of turns that used 1, 2, ... rounds, per arm.
    arms: [{label, counts: {rounds: n_turns}}]."""
    rounds = sorted({r for a in arms for r in a["counts"]})
    fig = Figure(figsize=(8.6, 0.45 * max(len(arms), 2) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(arms)))
    left = [0.0] * len(arms)
    for i, r in enumerate(rounds):
        shares = []
        for a in arms:
            total = sum(a["counts"].values()) or 1
            shares.append(a["counts"].get(r, 0) / total)
        ax.barh(ys, shares, left=left, color=color(i), label=f"{r} round{'s' if r != 1 else ''}")
        left = [lft + s for lft, s in zip(left, shares)]
    ax.set_yticks(ys)
    ax.set_yticklabels([plain(a["label"]) for a in arms], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of turns")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(plain(title), fontsize=10)
    return to_base64(fig)
