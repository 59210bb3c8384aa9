"""Figures for reports: the Pareto front, per-stage memory and stage times, drawn from the plain
`solve --json` / `explain --json` dicts with matplotlib's Agg canvas.

Every figure uses one fixed style (matplotlib's defaults plus the overrides below, whatever the
user's matplotlibrc says), a fixed size and no timestamps or software tag in the PNG, so the same
input gives the same bytes. matplotlib is imported inside the functions: `parasol --help` stays fast.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parasol.files import writing
from parasol.problems.mapping import DEGREES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FIGURE_SIZE_IN = (9.6, 5.4)
"""Width and height of every figure in inches; at DPI this is 960 × 540 pixels."""
DPI = 100
STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 8.5,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
FRONT_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
TERM_COLOURS = ("#4c72b0", "#8172b3", "#dd8452", "#55a868", "#ccb974", "#937860", "#da8bc3", "#8c8c8c",
                "#64b5cd", "#a1c9f4")
OVER_COLOUR = "#d62728"
HBM_COLOUR = "#333333"
OFF_SCALE = 1.6
"""The user's point is drawn at the plot's edge (and labelled with its value) when it lies more than
this factor beyond the range the front and the HBM line span."""


@contextmanager
def _figure(nrows: int = 1, ncols: int = 1, **subplot_kw: Any) -> Iterator[tuple[Figure, Any]]:
    """A fixed-style, constrained-layout figure on the Agg canvas (no pyplot global state)."""
    import matplotlib.style
    from matplotlib.figure import Figure

    with matplotlib.style.context(["default", STYLE]):
        fig = Figure(figsize=FIGURE_SIZE_IN, dpi=DPI, layout="constrained")
        axes = fig.subplots(nrows, ncols, **subplot_kw)
        yield fig, axes


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes without the Software tag, so equal figures give equal bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def degrees_label(mapping: dict) -> str:
    """Short name of a mapping for titles and legends: 'TP1 PP16 CP2 EP32 ETP1 VPP1 MBS1 full', plus
    the rank order when it is not Megatron's default."""
    from parasol.problems.mapping import RankOrder

    keys = DEGREES
    label = " ".join(f"{k.upper()}{mapping[k]}" for k in keys if k in mapping) + f" {mapping.get('recompute', '')}"
    order = mapping.get("rank_order", RankOrder.pp_last.value)
    return label if order == RankOrder.pp_last.value else f"{label} order {order}"


def _point(entry: dict) -> tuple[float, float] | None:
    """(step time s, peak memory GB) of one mapping dict, or None when either is missing."""
    metrics = entry.get("metrics", {})
    if "step_time_s" not in metrics or "peak_memory_gb" not in metrics:
        return None
    return float(metrics["step_time_s"]), float(metrics["peak_memory_gb"])


def _usable_hbm(entries: list[dict]) -> float | None:
    """Usable HBM per GPU from the first mapping dict that states it."""
    for e in entries:
        if "usable_hbm_gb" in e.get("metrics", {}):
            return float(e["metrics"]["usable_hbm_gb"])
    return None


def user_verdict(user: dict) -> str:
    """One line for the user's mapping: feasible, or infeasible with the rules it breaks."""
    if user.get("feasible"):
        return "feasible"
    rules = sorted({v["rule"] for v in user.get("violations", [])})
    return "infeasible: " + ", ".join(rules) if rules else "infeasible"


def _limits(values: list[float], pad: float = 0.08) -> tuple[float, float]:
    """Axis limits around values with a relative margin."""
    lo, hi = min(values), max(values)
    span = hi - lo or max(abs(hi), 1.0) * 0.1
    return lo - pad * span, hi + pad * span


def _near(values: list[float], v: float) -> bool:
    """Whether v lies within OFF_SCALE spans of the values' range, so the axis may stretch to it."""
    lo, hi = min(values), max(values)
    span = (hi - lo) or abs(hi) or 1.0
    return lo - OFF_SCALE * span <= v <= hi + OFF_SCALE * span


def _fronts(mappings: list[dict]) -> dict[int, list[tuple[int, float, float]]]:
    """(index in the answer, step time, peak memory) of every mapping, grouped by Pareto rank."""
    fronts: dict[int, list[tuple[int, float, float]]] = {}
    for i, m in enumerate(mappings):
        p = _point(m)
        if p is not None:
            fronts.setdefault(int(m.get("pareto_rank", 1)), []).append((i + 1, *p))
    return fronts


def _draw_fronts(ax: Axes, fronts: dict[int, list[tuple[int, float, float]]]) -> None:
    """Each front as coloured points joined by its staircase; a point that repeats an earlier front's
    (mappings equal in both objectives) is a ring around it; each position labelled once with every
    mapping number it holds."""
    labels: dict[tuple[float, float], list[tuple[int, str]]] = {}
    for rank in sorted(fronts):
        pts = sorted(fronts[rank], key=lambda t: (t[1], t[2]))
        colour = FRONT_COLOURS[(rank - 1) % len(FRONT_COLOURS)]
        xs, ys = [p[1] for p in pts], [p[2] for p in pts]
        ax.step(xs, ys, where="post", color=colour, alpha=0.45, linewidth=1.2, zorder=2)
        fresh = [p for p in pts if (p[1], p[2]) not in labels]
        repeat = [p for p in pts if (p[1], p[2]) in labels]
        if fresh:
            ax.scatter([p[1] for p in fresh], [p[2] for p in fresh], s=46, color=colour, edgecolor="white",
                       linewidth=0.8, zorder=3, label=f"front {rank} ({len(pts)})")
        if repeat:
            ax.scatter([p[1] for p in repeat], [p[2] for p in repeat], s=130, facecolor="none", edgecolor=colour,
                       linewidth=1.5, zorder=3, label=None if fresh else f"front {rank} ({len(pts)})")
        for idx, x, y in pts:
            labels.setdefault((x, y), []).append((idx, colour))
    for k, ((x, y), marks) in enumerate(sorted(labels.items())):
        ax.annotate(" ".join(f"#{i}" for i, _ in marks), (x, y), xytext=(6, 6 if k % 2 == 0 else -12),
                    textcoords="offset points", fontsize=7.5, color=marks[0][1], zorder=4)


def _draw_user(ax: Axes, user: dict, xlim: tuple[float, float], ylim: tuple[float, float]) -> None:
    """The user's mapping as a black star, clamped to the plot's edge (with its value) when off scale."""
    p = _point(user)
    if p is None:
        return
    x, y = p
    cx, cy = min(max(x, xlim[0]), xlim[1]), min(max(y, ylim[0]), ylim[1])
    clamped = (cx, cy) != (x, y)
    label = f"your mapping ({user_verdict(user)})"
    ax.scatter([cx], [cy], s=150, marker="^" if clamped else "*", color="black", zorder=5, label=label,
               clip_on=False)
    text = f"yours: {x:.2f} s, {y:.1f} GB" + (" (off scale)" if clamped else "")
    left = cx < (xlim[0] + xlim[1]) / 2
    ax.annotate(text, (cx, cy), xytext=(10 if left else -10, -6 if cy >= ylim[1] else 6),
                textcoords="offset points", fontsize=8, zorder=5, ha="left" if left else "right",
                va="center", bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none",
                                   "alpha": 0.8})


def front_scatter(mappings: list[dict], user: dict | None = None, title: str = "") -> bytes:
    """Step time vs peak memory of every returned mapping, fronts coloured, the usable HBM as a line,
    and the user's own mapping marked (even when infeasible, labelled with why); PNG bytes."""
    fronts = _fronts(mappings)
    hbm = _usable_hbm([*mappings, *([user] if user else [])])
    xs = [p[1] for pts in fronts.values() for p in pts]
    ys = [p[2] for pts in fronts.values() for p in pts] + ([hbm] if hbm is not None else [])
    user_point = _point(user) if user else None
    if user_point is not None:
        for values, v in ((xs, user_point[0]), (ys, user_point[1])):
            if not values or _near(values, v):
                values.append(v)
    with _figure() as (fig, ax):
        if not xs or not ys:
            ax.text(0.5, 0.5, "no mapping to plot", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            return png_bytes(fig)
        xlim, ylim = _limits(xs), _limits(ys)
        _draw_fronts(ax, fronts)
        if hbm is not None:
            ax.axhline(hbm, color=HBM_COLOUR, linestyle="--", linewidth=1, label=f"usable HBM {hbm:.1f} GB")
        if user is not None:
            _draw_user(ax, user, xlim, ylim)
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ax.set_xlabel("predicted step time (s)")
        ax.set_ylabel("peak memory of the heaviest rank (GB)")
        ax.set_title(title or "Pareto fronts: step time × peak memory")
        fig.legend(loc="outside lower center", ncols=3)
        return png_bytes(fig)


def memory_terms(stages: list[dict]) -> list[str]:
    """Memory terms in the order they first appear over the stages (the ledger's order)."""
    names: list[str] = []
    for s in stages:
        names.extend(t for t in s.get("memory_terms_gb", {}) if t not in names)
    return names


def _stage_ticks(ax: Axes, stages: list[dict]) -> None:
    """Stage numbers with their block counts; thinned so that at most about 24 labels show."""
    positions = list(range(len(stages)))
    step = max(1, -(-len(stages) // 24))
    shown = positions[::step]
    ax.set_xticks(shown)
    ax.set_xticklabels([f"{stages[i]['stage']}\n{stages[i].get('layers', '')}" for i in shown])
    ax.set_xlabel("pipeline stage (top) and blocks it holds (bottom)")
    ax.set_xlim(-0.6, len(stages) - 0.4)


def stage_memory_bars(mapping: dict, title: str = "") -> bytes:
    """The heaviest rank's memory per stage as stacked ledger terms against the usable HBM line;
    stages over budget get a red outline and their excess written above; PNG bytes."""
    stages = mapping.get("stages", [])
    hbm = mapping.get("metrics", {}).get("usable_hbm_gb")
    terms = memory_terms(stages)
    with _figure() as (fig, ax):
        if not stages:
            ax.text(0.5, 0.5, "no memory ledger for this mapping", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_axis_off()
            return png_bytes(fig)
        xs = list(range(len(stages)))
        bottoms = [0.0] * len(stages)
        for k, term in enumerate(terms):
            heights = [float(s.get("memory_terms_gb", {}).get(term, 0.0)) for s in stages]
            ax.bar(xs, heights, bottom=bottoms, width=0.72, color=TERM_COLOURS[k % len(TERM_COLOURS)],
                   label=term, zorder=2)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        totals = [float(s.get("memory_gb", b)) for s, b in zip(stages, bottoms, strict=True)]
        if hbm is not None:
            ax.axhline(hbm, color=HBM_COLOUR, linestyle="--", linewidth=1.2, zorder=3,
                       label=f"usable HBM {hbm:.1f} GB")
            _mark_over_budget(ax, xs, totals, float(hbm))
        ax.set_ylim(0, max([*totals, hbm or 0.0]) * 1.12)
        ax.set_ylabel("memory of the heaviest rank (GB)")
        _stage_ticks(ax, stages)
        ax.grid(axis="x", visible=False)
        fig.suptitle(title or f"Memory per stage: {degrees_label(mapping.get('mapping', {}))}")
        handles, labels = ax.get_legend_handles_labels()
        order = sorted(range(len(labels)), key=lambda i: (labels[i] not in terms, -i if labels[i] in terms else i))
        ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        return png_bytes(fig)


def _mark_over_budget(ax: Axes, xs: list[int], totals: list[float], hbm: float) -> None:
    """Red outline on every stage above the usable HBM, with its excess in GB above the bar."""
    over = [(x, t) for x, t in zip(xs, totals, strict=True) if t > hbm]
    if not over:
        return
    ax.bar([x for x, _ in over], [t for _, t in over], width=0.72, fill=False, edgecolor=OVER_COLOUR,
           linewidth=2, zorder=4, label="over budget")
    vertical = len(xs) > 12
    for x, t in over:
        ax.annotate(f"+{t - hbm:.1f}" + ("" if vertical else " GB"), (x, t), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=7.5, color=OVER_COLOUR, rotation=90 if vertical else 0)


BREAKDOWN_ORDER = ("compute", "tp", "cp", "ep", "pp", "dp_dense", "dp_expert", "optimizer", "bubble")


def stage_times(mapping: dict, title: str = "") -> bytes:
    """Forward + backward time of one microbatch per stage (the slowest stage highlighted) beside the
    step time's breakdown (compute, exposed communication by kind, optimizer, bubble); PNG bytes."""
    stages = mapping.get("stages", [])
    times = [s.get("time_ms") for s in stages]
    breakdown = (mapping.get("step_time") or {}).get("breakdown_s", {})
    with _figure(1, 2, gridspec_kw={"width_ratios": [3, 2]}) as (fig, (ax, bx)):
        if stages and all(t is not None for t in times):
            _draw_stage_times(ax, stages, [float(t) for t in times])
        else:
            ax.text(0.5, 0.5, "no stage times", ha="center", va="center", transform=ax.transAxes)
            ax.set_title("Time per stage")
        ax.set_ylabel("one microbatch, forward + backward (ms)")
        _draw_breakdown(bx, breakdown)
        fig.suptitle(title or f"Stage times: {degrees_label(mapping.get('mapping', {}))}")
        return png_bytes(fig)


SLOWEST_TOLERANCE = 1e-3
"""Stages within this relative distance of the slowest are drawn as slowest too (they pace the pipeline)."""


def _draw_stage_times(ax: Axes, stages: list[dict], times: list[float]) -> None:
    """Bars of stage times, the stages that pace the pipeline in red, their time in the title."""
    top = max(times)
    slow = [t >= top * (1 - SLOWEST_TOLERANCE) for t in times]
    colours = [OVER_COLOUR if s else FRONT_COLOURS[0] for s in slow]
    ax.bar(range(len(times)), times, width=0.72, color=colours, zorder=2)
    ax.set_ylim(0, top * 1.12)
    _stage_ticks(ax, stages)
    ax.grid(axis="x", visible=False)
    ax.set_title(f"Time per stage (red: slowest, {top:.1f} ms, {sum(slow)} of {len(times)} stages)")


BREAKDOWN_LABELS = {"tp": "TP", "cp": "CP", "ep": "EP", "pp": "PP", "dp_dense": "DP dense",
                    "dp_expert": "DP expert"}


def _draw_breakdown(ax: Axes, breakdown: dict[str, float]) -> None:
    """Horizontal bars of where the step time goes, in seconds, largest share labelled."""
    names = [k for k in BREAKDOWN_ORDER if k in breakdown] + sorted(k for k in breakdown if k not in BREAKDOWN_ORDER)
    if not names:
        ax.text(0.5, 0.5, "no step-time breakdown", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    values = [float(breakdown[k]) for k in names]
    total = sum(values) or 1.0
    ys = list(range(len(names)))
    ax.barh(ys, values, color=FRONT_COLOURS[1], height=0.65, zorder=2)
    for y, v in zip(ys, values, strict=True):
        ax.annotate(f"{v:.2f} s ({v / total:.0%})", (v, y), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=7.5)
    ax.set_yticks(ys)
    ax.set_yticklabels([BREAKDOWN_LABELS.get(n, n.replace("_", " ")) for n in names])
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.45 or 1.0)
    ax.set_xlabel("seconds per step (communication: exposed)")
    ax.set_title(f"Where the step's {sum(values):.2f} s go")
    ax.grid(axis="y", visible=False)


SCALING_COLOURS = {"best": "#1f77b4", "yours": "#7f7f7f", "repair": "#ff7f0e", "efficiency": "#2ca02c"}
"""Colours of the sweep figure: best mapping, the problem's own mapping, its repair, the efficiency floor."""


def _gpu_axis(ax: Axes, sizes: list[int]) -> None:
    """A log2 GPU axis with a tick at every size of the sweep."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{n:,}" for n in sizes], rotation=30 if len(sizes) > 6 else 0)
    ax.minorticks_off()
    ax.set_xlim(min(sizes) / 1.4, max(sizes) * 1.4)
    ax.set_xlabel("GPUs")


def _reference_points(sweep: dict, key: str) -> list[tuple[int, float, bool]]:
    """(GPUs, step time, fits) of the problem's own mapping (key "mapping") or of its nearest
    feasible repair (key "nearest_feasible") wherever the sweep priced one."""
    out = []
    for s in sweep["sizes"]:
        entry = (s.get("reference") or {}).get(key)
        if entry and entry.get("step_time_s"):
            out.append((s["gpus"], float(entry["step_time_s"]), bool(entry["feasible"])))
    return out


def _draw_step_times(ax: Axes, sweep: dict, rows: list[dict]) -> None:
    """Best step time per size, the problem's own mapping as modelled (hollow where it does not fit)
    and its nearest feasible repair; sizes without a mapping marked with their status."""
    ax.plot([r["gpus"] for r in rows], [r["step_time_s"] for r in rows], "o-", color=SCALING_COLOURS["best"],
            label="best mapping", zorder=3)
    yours = _reference_points(sweep, "mapping")
    if yours:
        ax.plot([p[0] for p in yours], [p[1] for p in yours], "--", color=SCALING_COLOURS["yours"], zorder=2,
                label="problem's mapping (modelled; hollow: does not fit)")
        ax.scatter([p[0] for p in yours], [p[1] for p in yours], s=36, zorder=2, edgecolor=SCALING_COLOURS["yours"],
                   facecolor=[SCALING_COLOURS["yours"] if p[2] else "white" for p in yours])
    repair = _reference_points(sweep, "nearest_feasible")
    if repair:
        ax.plot([p[0] for p in repair], [p[1] for p in repair], "s:", color=SCALING_COLOURS["repair"], markersize=4,
                zorder=2, label="its nearest feasible repair")
    for s in sweep["sizes"]:
        if s.get("best") is None:
            ax.annotate(s["status"], (s["gpus"], 0), xycoords=("data", "axes fraction"), xytext=(0, 4),
                        textcoords="offset points", ha="center", fontsize=7.5, color=OVER_COLOUR, rotation=90)
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    values = [r["step_time_s"] for r in rows] + [p[1] for p in yours + repair]
    ax.set_ylim(min(values) / 1.4, max(values) * 3)  # head room for the legend above the curves
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel("step time (s)")
    ax.set_title("Step time")
    ax.legend(loc="upper right")


def _draw_throughput(ax: Axes, rows: list[dict]) -> None:
    """Tokens/s/GPU of the best mapping per size; the right axis reads the same curve as scaling
    efficiency (tokens/s/GPU against the first size with a mapping), with the efficiency floor."""
    from parasol.solver.sweep.jobs import EFFICIENCY_FLOOR

    gpus = [r["gpus"] for r in rows]
    per_gpu = [r["tokens_per_s_per_gpu"] for r in rows]
    base = per_gpu[0] / rows[0]["scaling_efficiency"]
    ax.plot(gpus, per_gpu, "o-", color=SCALING_COLOURS["best"], label="tokens/s/GPU of the best mapping")
    ax.axhline(base * EFFICIENCY_FLOOR, color=SCALING_COLOURS["efficiency"], linestyle=":", linewidth=1.2,
               label=f"{EFFICIENCY_FLOOR:.0%} scaling efficiency")
    ax.set_ylim(0, max(per_gpu) * 1.15)
    ax.set_ylabel("tokens/s per GPU")
    eff = ax.secondary_yaxis("right", functions=(lambda y: 100 * y / base, lambda e: e * base / 100))
    eff.set_ylabel(f"scaling efficiency vs {gpus[0]:,} GPUs (%)", color=SCALING_COLOURS["efficiency"])
    ax.legend(loc="lower left")
    ax.set_title("Throughput per GPU and scaling efficiency")


def scaling_plot(sweep_dict: dict, path: Path) -> Path:
    """The `sweep --json` object as a PNG: step time (best, the problem's own mapping, its repair) and
    tokens/s/GPU with scaling efficiency against GPUs on a log2 axis; returns the path written."""
    from parasol.errors import InputError

    if path.suffix.lower() != ".png":
        raise InputError("The sweep plot is written as PNG.", field="--plot", value=str(path),
                         expected="a file name ending in .png", fix=f"use --plot {path.with_suffix('.png')}.")
    if not path.parent.is_dir():
        raise InputError(f"The folder {str(path.parent)!r} does not exist.", field="--plot", value=str(path),
                         fix="create the folder first, or write the plot elsewhere.")
    rows = [r for r in sweep_dict["table"] if r.get("step_time_s")]
    sizes = [s["gpus"] for s in sweep_dict["sizes"]]
    with _figure(1, 2) as (fig, (ax, bx)):
        for axis in (ax, bx):
            _gpu_axis(axis, sizes)
        if rows:
            _draw_step_times(ax, sweep_dict, rows)
            _draw_throughput(bx, rows)
        else:
            for axis in (ax, bx):
                axis.text(0.5, 0.5, "no size has a mapping", ha="center", va="center", transform=axis.transAxes)
        fig.suptitle(f"{sweep_dict['model']} on {sweep_dict['gpu']}: {sweep_dict['scaling']} scaling")
        png = png_bytes(fig)
    with writing(path, "--plot") as out:
        out.write_bytes(png)
    return path
