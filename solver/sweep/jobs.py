"""`parasol sweep`: solve one problem at several cluster sizes and show how the best mapping and its
efficiency change with the GPU count (issue 6; seed 000 §扩容: 1,024 → 8,192 GPUs at a fixed global
batch drops m from 32 to 4 and raises the 1F1B bubble from 17.9% to 63.6%).

Each size is one job of plain data (the problem's YAML text, the size, its global batch), run by
`run_size`, a top-level function, so a process pool or a Ray cluster can run it; the job solves the
problem resized in memory and, when the problem names a `mapping:`, prices that mapping at the same
size (and its nearest feasible repair when it does not run). A size that is not valid input, finds
nothing, times out or loses its worker comes back with its status and the reason; the others finish.
Results are ordered by GPU count and do not depend on the backend or on which size finished first.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from parasol.errors import InputError, ParasolError
from parasol.problems.schema import MAX_GPUS

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.table import Table

    from parasol.problems.loader import Problem
    from parasol.solver.diagnose.explain import Explanation
    from parasol.solver.search.solve import SolveResult

MAX_SIZES = 64
"""Most sizes one sweep runs (a range with a small step could otherwise ask for thousands)."""

GRACE_S = 30.0
"""Seconds a size may run past its --time-limit (explaining the mappings found, starting the worker)
before the backend stops it and reports it as `timeout`."""

EFFICIENCY_FLOOR = 0.5
"""Scaling efficiency below which the notes say scaling has stopped paying."""

BACKENDS = ("local", "ray", "serial")

_NUMBER = r"\d[\d_]*"
_ITEM = re.compile(rf"^(?P<lo>{_NUMBER})(?:\.\.(?P<hi>{_NUMBER})(?:(?P<op>[x*+])(?P<by>{_NUMBER}))?)?$")
_SIZES_EXPECTED = "whole numbers separated by commas, or ranges A..BxF (A, A·F, A·F², … up to B) and A..B+S"


# --- sizes ------------------------------------------------------------------------------------------


def _size_error(item: str, detail: str, fix: str) -> InputError:
    """One bad --gpus item, named with the grammar the option accepts."""
    return InputError(detail, field="--gpus", value=item, expected=_SIZES_EXPECTED, fix=fix)


def _range(item: str, lo: int, hi: int, op: str | None, by: int | None) -> list[int]:
    """The sizes of one range item: geometric with `x`/`*` (default ×2), arithmetic with `+`."""
    if hi < lo:
        raise _size_error(item, f"The range {item!r} ends below its start.", f"write {hi}..{lo}.")
    if op in (None, "x", "*"):
        factor = 2 if by is None else by
        if factor < 2:
            raise _size_error(item, f"The factor of {item!r} must be at least 2.", f"write {lo}..{hi}x2.")
        out, n = [], lo
        while n <= hi and len(out) <= MAX_SIZES:
            out.append(n)
            n *= factor
        return out
    if not by:
        raise _size_error(item, f"The step of {item!r} must be at least 1.", f"write {lo}..{hi}+{lo}.")
    return list(range(lo, hi + 1, by))[:MAX_SIZES + 1]


def parse_sizes(text: str) -> tuple[int, ...]:
    """GPU counts from `--gpus`: `256,512,1024`, `1024..65536x2` or `1024..4096+1024`, mixed with
    commas; repeats dropped, ascending. Bad items, zero, more than MAX_SIZES sizes or more than
    MAX_GPUS GPUs are input errors (a size that is not a whole number of nodes is reported per size)."""
    sizes: set[int] = set()
    for raw in text.split(","):
        item = raw.strip().replace(" ", "")
        match = _ITEM.match(item)
        if not match:
            raise _size_error(raw.strip(), f"Cannot read the --gpus item {raw.strip()!r}.",
                              "write e.g. --gpus 1024,2048,4096 or --gpus 1024..8192x2.")
        lo = int(match["lo"])
        hi = int(match["hi"]) if match["hi"] else None
        by = int(match["by"]) if match["by"] else None
        values = [lo] if hi is None else _range(item, lo, hi, match["op"], by)
        if min(values) < 1:
            raise _size_error(item, "A cluster size must be at least 1 GPU.", "start the sizes at one node or more.")
        sizes.update(values)
        if len(sizes) > MAX_SIZES:
            raise _size_error(text, f"--gpus asks for more than {MAX_SIZES} sizes.",
                              "use a geometric range (A..BxF) or fewer sizes.")
    if max(sizes) > MAX_GPUS:
        raise _size_error(str(max(sizes)), f"{max(sizes):,} GPUs is above the largest job parasol plans "
                          f"({MAX_GPUS:,}).", f"keep the sizes at or below {MAX_GPUS:,}.")
    return tuple(sorted(sizes))


def weak_batch(base_batch: int, base_gpus: int, gpus: int) -> Fraction:
    """Weak scaling keeps the problem file's sequences per GPU: GBS(N) = GBS_file · N / N_file."""
    return Fraction(base_batch * gpus, base_gpus)


# --- one size: plain data in, a frozen result out ----------------------------------------------------


@dataclass(frozen=True)
class SizeJob:
    """One size of a sweep as plain, picklable data: the problem text, where it came from, the size."""

    problem_text: str
    source: str
    base_dir: str
    gpus: int
    global_batch: int
    top: int
    time_limit_s: float


@dataclass(frozen=True)
class MappingSummary:
    """The scaling-table fields of one priced mapping (from its explain/solve JSON)."""

    label: str
    mapping: dict
    feasible: bool
    violations: tuple[str, ...]
    step_time_s: float | None
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    mfu: float | None
    num_microbatches: int | float | None
    bubble_fraction: float
    dp_attn: int | float | None
    dp_expert: int | float | None
    peak_memory_gb: float | None
    usable_hbm_gb: float | None

    @classmethod
    def from_dict(cls, data: dict) -> MappingSummary:
        """Read the fields from an `explain --json` / solve mapping object."""
        metrics, derived = data["metrics"], data["derived"]
        return cls(label=mapping_label(data["mapping"]), mapping=data["mapping"], feasible=data["feasible"],
                   violations=tuple(v["rule"] for v in data["violations"]),
                   step_time_s=metrics.get("step_time_s"), tokens_per_s=metrics.get("tokens_per_s"),
                   tokens_per_s_per_gpu=metrics.get("tokens_per_s_per_gpu"), mfu=metrics.get("mfu"),
                   num_microbatches=derived["num_microbatches"], bubble_fraction=derived["bubble_fraction"],
                   dp_attn=derived["dp_attn"], dp_expert=derived["dp_expert"],
                   peak_memory_gb=metrics.get("peak_memory_gb"), usable_hbm_gb=metrics.get("usable_hbm_gb"))

    def as_dict(self) -> dict:
        """JSON-ready, field by field."""
        data = dataclasses.asdict(self)
        data["violations"] = list(self.violations)
        return data


@dataclass(frozen=True)
class ReferenceResult:
    """The problem's own `mapping:` priced at one size, and its nearest feasible repair when it does
    not run there (what the seed calls A at 1,024 GPUs and B at 8,192)."""

    mapping: MappingSummary | None
    error: str = ""
    repair: str = ""
    nearest: MappingSummary | None = None

    def as_dict(self) -> dict:
        """JSON-ready: the priced mapping, why it could not be built, the repair and its price."""
        return {"mapping": self.mapping.as_dict() if self.mapping else None, "error": self.error,
                "repair": self.repair, "nearest_feasible": self.nearest.as_dict() if self.nearest else None}


@dataclass(frozen=True)
class SizeResult:
    """What one size came back with: status and reason, the solve contract's mappings (the Pareto
    front first), the best of them summarised, the problem's mapping priced, and the search cost.
    Status: optimal; feasible (cut off by the time limit, best found); infeasible (no mapping at this
    size); timeout (nothing found in time, or stopped past its deadline); error (the size is not valid
    input); failed (the worker died or raised)."""

    gpus: int
    global_batch: int | float
    status: str
    reason: str = ""
    mappings: tuple[dict, ...] = ()
    best: MappingSummary | None = None
    reference: ReferenceResult | None = None
    search: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        """The BRIEF's per-size object {"gpus", "status", "mappings"} plus the summaries."""
        return {"gpus": self.gpus, "global_batch": self.global_batch, "status": self.status, "reason": self.reason,
                "mappings": list(self.mappings), "best": self.best.as_dict() if self.best else None,
                "reference": self.reference.as_dict() if self.reference else None,
                "search": {**self.search, "seconds": round(self.seconds, 3)}}


def mapping_label(m: dict) -> str:
    """A mapping in one line: degrees, MBS and recompute (`TP1 PP8 CP4 EP64 ETP1 VPP2 MBS1 full`)."""
    return (f"TP{m['tp']} PP{m['pp']} CP{m['cp']} EP{m['ep']} ETP{m['etp']} VPP{m['vpp']} MBS{m['mbs']} "
            f"{m['recompute']}")


def failed_size(job: SizeJob, status: str, reason: str, seconds: float = 0.0) -> SizeResult:
    """A size that produced no answer, with the reason (never dropped from the sweep)."""
    return SizeResult(gpus=job.gpus, global_batch=job.global_batch, status=status, reason=reason, seconds=seconds)


def best_index(mappings: Sequence[dict]) -> int | None:
    """The fastest mapping of the first Pareto front (first listed on ties)."""
    first = [i for i, m in enumerate(mappings) if m["pareto_rank"] == 1 and m["metrics"].get("step_time_s")]
    return min(first, key=lambda i: mappings[i]["metrics"]["step_time_s"]) if first else None


def size_status(result: SolveResult, problem: Problem, time_limit_s: float) -> tuple[str, str]:
    """The sweep's status for one solve (a search that found nothing in time is a timeout) and why."""
    from parasol.solver.search.solve import why_not_optimal

    status = "timeout" if result.status == "unknown" else result.status
    return status, why_not_optimal(result, problem, time_limit_s)


def _summary(explanation: Explanation) -> MappingSummary:
    """The table fields of one explained mapping."""
    return MappingSummary.from_dict(explanation.as_dict())


def reference_at(problem: Problem) -> ReferenceResult:
    """Price the problem's `mapping:` at this size; when it does not run, also price its nearest
    feasible repair (fewest fields changed), so the best mapping has an honest runnable rival."""
    from parasol.problems.mapping_input import build_mapping
    from parasol.solver.diagnose.explain import explain
    from parasol.solver.diagnose.repairs import nearest_repairs

    try:
        mapping = build_mapping(problem, {})
    except InputError as exc:
        return ReferenceResult(mapping=None, error=exc.detail)
    priced = explain(problem, mapping, repairs=0)
    if priced.feasible:
        return ReferenceResult(mapping=_summary(priced))
    repairs = nearest_repairs(problem, mapping, k=1)
    if not repairs:
        return ReferenceResult(mapping=_summary(priced), repair="no feasible mapping within three changes")
    nearest = explain(problem, repairs[0].mapping, repairs=0)
    return ReferenceResult(mapping=_summary(priced), repair=repairs[0].text, nearest=_summary(nearest))


def _solve_size(job: SizeJob, start: float) -> SizeResult:
    """Load, resize and solve one size, then price the problem's own mapping there."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem_text
    from parasol.solver.search.solve import solve

    problem = load_problem_text(job.problem_text, source=job.source, base_dir=Path(job.base_dir))
    problem = problem.resized(job.gpus, job.global_batch)
    result = solve(problem, CalibratedStageTimes(problem), top=job.top, time_limit_s=job.time_limit_s)
    data = result.as_dict()
    mappings = tuple(data["mappings"])
    best = best_index(mappings)
    status, reason = size_status(result, problem, job.time_limit_s)
    reference = reference_at(problem) if problem.spec.mapping is not None else None
    search = {k: v for k, v in data["search"].items() if k != "seconds"}
    return SizeResult(gpus=job.gpus, global_batch=job.global_batch, status=status, reason=reason, mappings=mappings,
                      best=None if best is None else MappingSummary.from_dict(mappings[best]), reference=reference,
                      search=search, seconds=time.perf_counter() - start)


def run_size(job: SizeJob) -> SizeResult:
    """One size of a sweep (the task every backend runs). Bad input at this size comes back as status
    `error`, an unexpected exception as `failed` with its type: one size never takes the sweep down."""
    start = time.perf_counter()
    try:
        return _solve_size(job, start)
    except ParasolError as exc:
        return failed_size(job, "error", " ".join(str(exc).split()), time.perf_counter() - start)
    except Exception as exc:  # reported as this size's failure (a bug to fix); the other sizes go on
        return failed_size(job, "failed", f"{type(exc).__name__}: {exc}", time.perf_counter() - start)


# --- the whole sweep -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    """Every size's result in GPU order, what the sweep ran on, and the scaling table built from them."""

    problem: str
    model: str
    gpu: str
    weak: bool
    sizes: tuple[SizeResult, ...]
    backend: str
    workers: int
    seconds: float
    time_limit_s: float

    def base(self) -> SizeResult | None:
        """The smallest size with a mapping: scaling efficiency is measured against it."""
        return next((s for s in self.sizes if s.best is not None), None)

    def rows(self) -> list[dict]:
        """The scaling table: per size its best mapping, step time, throughput, MFU, scaling efficiency
        against the smallest size with a mapping and against the previous one (marginal), m, bubble,
        D_a, D_e and peak memory."""
        base, previous, out = self.base(), None, []
        for s in self.sizes:
            row: dict = {"gpus": s.gpus, "global_batch": s.global_batch, "status": s.status}
            b = s.best
            if b is not None and base is not None:
                row.update({
                    "mapping": b.label, "step_time_s": b.step_time_s, "tokens_per_s": b.tokens_per_s,
                    "tokens_per_s_per_gpu": b.tokens_per_s_per_gpu, "mfu": b.mfu,
                    "scaling_efficiency": round(b.tokens_per_s_per_gpu / base.best.tokens_per_s_per_gpu, 6),
                    "marginal_efficiency": None if previous is None or previous.best is None else
                    round(b.tokens_per_s_per_gpu / previous.best.tokens_per_s_per_gpu, 6),
                    "num_microbatches": b.num_microbatches, "bubble_fraction": b.bubble_fraction,
                    "dp_attn": b.dp_attn, "dp_expert": b.dp_expert, "peak_memory_gb": b.peak_memory_gb,
                })
                previous = s
            out.append(row)
        return out

    def notes(self) -> list[str]:
        """Plain sentences: the base size, where scaling efficiency falls below the floor, every size
        without an answer and why, and the best mapping against the problem's own at each size."""
        rows = self.rows()
        base = self.base()
        out = []
        if base is None:
            out.append("No size has a feasible mapping.")
        else:
            out.append(f"Scaling efficiency is tokens/s/GPU against {base.gpus:,} GPUs, the smallest size "
                       f"with a mapping ({'weak' if self.weak else 'strong'} scaling).")
            below = next((r for r in rows if r.get("scaling_efficiency") is not None
                          and r["scaling_efficiency"] < EFFICIENCY_FLOOR), None)
            if below is not None:
                out.append(f"Scaling stops paying at {below['gpus']:,} GPUs: {below['scaling_efficiency']:.0%} "
                           f"efficiency, below {EFFICIENCY_FLOOR:.0%}.")
        out.extend(f"{s.gpus:,} GPUs: {s.status}: {s.reason}" for s in self.sizes if s.status not in ("optimal",))
        out.extend(comparison_note(s) for s in self.sizes if s.best is not None and s.reference is not None
                   and s.reference.mapping is not None and s.reference.mapping.step_time_s)
        return out

    def as_dict(self) -> dict:
        """The BRIEF's `sweep --json`: {"sizes": [...]} plus the scaling table, the notes and the run."""
        return {"problem": self.problem, "model": self.model, "gpu": self.gpu,
                "scaling": "weak" if self.weak else "strong",
                "sizes": [s.as_dict() for s in self.sizes], "table": self.rows(), "notes": self.notes(),
                "run": {"backend": self.backend, "workers": self.workers, "seconds": round(self.seconds, 3),
                        "time_limit_s": self.time_limit_s}}


def answers(sweep: dict) -> dict:
    """A `sweep --json` object without what depends on the run (backend, workers, seconds): equal for
    every backend when the answers are."""
    out = {k: v for k, v in sweep.items() if k != "run"}
    out["sizes"] = [{**s, "search": {k: v for k, v in s["search"].items() if k != "seconds"}} for s in sweep["sizes"]]
    return out


def _gain(best: MappingSummary, other: MappingSummary) -> str:
    """How much faster `best` is than `other`: step time saved and the throughput ratio."""
    saved = 1 - best.step_time_s / other.step_time_s
    ratio = best.tokens_per_s / other.tokens_per_s
    return f"{abs(saved):.1%} {'less' if saved >= 0 else 'more'} step time ({ratio:.2f}× the tokens/s)"


def comparison_note(s: SizeResult) -> str:
    """The best mapping against the problem's own at one size, under the step-time model, and against
    that mapping's nearest feasible repair when it does not run."""
    best, ref = s.best, s.reference
    mine = ref.mapping
    if mine.feasible:
        fits = "it fits"
    elif "memory-fits-hbm" in mine.violations:
        fits = f"it does not fit ({mine.peak_memory_gb:.1f} GB > {mine.usable_hbm_gb:.1f} GB usable)"
    else:
        fits = f"it breaks {', '.join(mine.violations)}"
    text = (f"{s.gpus:,} GPUs: best {short_label(best.mapping)}, {best.step_time_s:.3f} s/step; the problem's mapping "
            f"{short_label(mine.mapping)} (m {_num(mine.num_microbatches)}, bubble {mine.bubble_fraction:.1%}): "
            f"{mine.step_time_s:.3f} s/step as modelled, {fits}; best is {_gain(best, mine)}")
    if ref.nearest is not None and ref.nearest.step_time_s:
        text += (f"; its nearest feasible repair ({ref.repair}): {ref.nearest.step_time_s:.3f} s/step; best is "
                 f"{_gain(best, ref.nearest)}")
    elif not mine.feasible:
        text += f"; {ref.repair}"
    return text + "."


def _num(x: int | float | None) -> str:
    """A count as a table cell: whole numbers with separators, fractions to three digits."""
    if x is None:
        return "-"
    return f"{x:,}" if isinstance(x, int) else f"{x:,.3g}"


def sweep_jobs(problem_path: str | Path, sizes: Sequence[int], weak: bool, top: int,
               time_limit_s: float) -> tuple[Problem, tuple[SizeJob, ...], list[SizeResult]]:
    """The problem (validated once, here: bad input stops the sweep before any work) and one job per
    size; a weak-scaling size whose global batch is not a whole number of sequences is an `error`."""
    from parasol.problems.loader import load_problem

    problem = load_problem(problem_path)
    path = Path(problem_path)
    text = path.read_bytes().decode("utf-8-sig")
    jobs, rejected = [], []
    for n in sizes:
        gbs = weak_batch(problem.training.global_batch, problem.gpus, n) if weak else Fraction(problem.training.global_batch)
        if gbs.denominator != 1:
            rejected.append(SizeResult(gpus=n, global_batch=float(gbs), status="error", reason=(
                f"weak scaling keeps {problem.training.global_batch} sequences per {problem.gpus:,} GPUs, which "
                f"gives a global batch of {float(gbs):g} at {n:,} GPUs, not a whole number of sequences")))
            continue
        jobs.append(SizeJob(problem_text=text, source=str(path), base_dir=str(path.resolve().parent), gpus=n,
                            global_batch=int(gbs), top=top, time_limit_s=time_limit_s))
    return problem, tuple(jobs), rejected


def check_backend(backend: str) -> None:
    """Refuse an unknown backend before any work starts."""
    if backend not in BACKENDS:
        raise InputError(f"Unknown backend {backend!r}.", field="--backend", value=backend,
                         expected=f"one of {', '.join(BACKENDS)}", fix="use --backend local.")


def run_sweep(problem_path: str | Path, sizes: Sequence[int], *, weak: bool = False, backend: str = "local",
              workers: int | None = None, top: int = 1, time_limit_s: float = 60.0,
              deadline_s: float | None = None, ray_address: str | None = None,
              progress: Callable[[SizeResult], None] | None = None,
              task: Callable[[SizeJob], SizeResult] = run_size) -> SweepResult:
    """Solve `problem_path` at every size on `backend` (local process pool, Ray, or serial in this
    process) with `workers` sizes at a time (default: all cores, at most one per size). A size is
    stopped `deadline_s` after it starts (default: its time limit plus GRACE_S) and reported as
    `timeout`; `progress` is called with each size's result as it arrives."""
    from parasol.solver.sweep.backends import open_pool, run_jobs

    check_backend(backend)
    start = time.perf_counter()
    problem, jobs, results = sweep_jobs(problem_path, sizes, weak, top, time_limit_s)
    for r in results:
        if progress:
            progress(r)
    width = 1
    if jobs:
        with open_pool(backend, task, workers, len(jobs), ray_address) as pool:
            width = pool.width
            largest_first = sorted(jobs, key=lambda j: -j.gpus)  # the longest solves start first
            results.extend(run_jobs(largest_first, pool, time_limit_s + GRACE_S if deadline_s is None else deadline_s,
                                    progress))
    return SweepResult(problem=str(problem_path), model=problem.model.name, gpu=problem.hardware.gpu.name, weak=weak,
                       sizes=tuple(sorted(results, key=lambda r: r.gpus)), backend=backend, workers=width,
                       seconds=time.perf_counter() - start, time_limit_s=time_limit_s)


# --- the table ---------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    """A share as a table cell."""
    return "-" if x is None else f"{x:.1%}"


def _fixed(x: float | None, fmt: str) -> str:
    """A number as a table cell in `fmt`, '-' when missing."""
    return "-" if x is None else format(x, fmt)


def short_label(m: dict) -> str:
    """A mapping for a narrow column: the degrees other than 1 and the recompute choice
    (`PP8 CP4 EP64 VPP2 full`; TP1 when every degree is 1)."""
    keys = ("tp", "pp", "cp", "ep", "etp", "vpp", "mbs")
    degrees = " ".join(f"{k.upper()}{m[k]}" for k in keys if m[k] != 1) or "TP1"
    return f"{degrees} {m['recompute']}"


def _best_cell(size: dict) -> str:
    """The best mapping of a size, its status when it is not a proven optimum, or the status alone."""
    if size["best"] is None:
        return size["status"]
    label = short_label(size["best"]["mapping"])
    return label if size["status"] == "optimal" else f"{label} ({size['status']})"


def _millions(x: float | None) -> str:
    """Tokens/s as a table cell in millions."""
    return "-" if x is None else f"{x / 1e6:,.2f}M"


def scaling_tables(sweep: dict) -> Group:
    """The scaling table (one row per size) and, when the problem names a mapping, that mapping at
    each size against the best; then the notes."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    strong = sweep["scaling"] == "strong"
    run = sweep["run"]
    table = Table(title=f"{sweep['model']} on {sweep['gpu']}: {sweep['scaling']} scaling, best mapping per size "
                        f"({run['backend']} backend, {run['workers']} worker(s), {run['seconds']:.1f} s)",
                  caption="eff: scaling efficiency (tokens/s/GPU against the smallest size with a mapping); "
                          "marg: against the previous size; GB: peak memory; s: seconds to solve the size",
                  box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    columns = ("GPUs", *(() if strong else ("GBS",)), "best mapping", "step s", "tok/s", "tok/s/GPU", "MFU", "eff",
               "marg", "m", "bubble", "D_a", "D_e", "GB", "s")
    for col in columns:
        table.add_column(col, justify="left" if col == "best mapping" else "right", no_wrap=True)
    for row, size in zip(sweep["table"], sweep["sizes"], strict=True):
        table.add_row(f"{row['gpus']:,}", *(() if strong else (_num(row["global_batch"]),)), _best_cell(size),
                      _fixed(row.get("step_time_s"), ".3f"), _millions(row.get("tokens_per_s")),
                      _fixed(row.get("tokens_per_s_per_gpu"), ",.0f"), _pct(row.get("mfu")),
                      _pct(row.get("scaling_efficiency")), _pct(row.get("marginal_efficiency")),
                      _num(row.get("num_microbatches")), _pct(row.get("bubble_fraction")), _num(row.get("dp_attn")),
                      _num(row.get("dp_expert")), _fixed(row.get("peak_memory_gb"), ".1f"),
                      f"{size['search']['seconds']:.1f}")
    parts: list = [table]
    if any(s["reference"] for s in sweep["sizes"]):
        parts.append(reference_table(sweep))
    parts.extend(f"note: {n}" for n in sweep["notes"])
    return Group(*parts)


def _fits(mine: dict) -> str:
    """`yes`, or what the problem's mapping breaks (its peak memory when that is the reason)."""
    if mine["feasible"]:
        return "yes"
    broken = [v for v in mine["violations"] if v != "memory-fits-hbm"]
    memory = [f"{mine['peak_memory_gb']:.0f} GB"] if "memory-fits-hbm" in mine["violations"] else []
    return "no: " + ", ".join(memory + broken)


def reference_table(sweep: dict) -> Table:
    """The problem's own mapping at every size: m and bubble (the seed's story), its modelled step
    time and whether it fits, and its nearest feasible repair, beside the best step time."""
    from rich import box
    from rich.table import Table

    labels = {short_label(s["reference"]["mapping"]["mapping"]) for s in sweep["sizes"]
              if s["reference"] and s["reference"]["mapping"]}
    title = "The problem's own mapping" + (f" ({labels.pop()})" if len(labels) == 1 else "") + \
        " at each size, modelled even where it does not fit"
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    for col in ("GPUs", "m", "bubble", "step s", "fits", "nearest feasible repair", "its step s", "best step s"):
        table.add_column(col, justify="left" if col in ("fits", "nearest feasible repair") else "right",
                         overflow="fold")
    for s in sweep["sizes"]:
        ref, best = s["reference"], s["best"]
        if ref is None:
            continue
        mine, near = ref["mapping"], ref["nearest_feasible"]
        best_step = _fixed(best and best["step_time_s"], ".3f")
        if mine is None:
            table.add_row(f"{s['gpus']:,}", "-", "-", "-", ref["error"], "-", "-", best_step)
            continue
        table.add_row(f"{s['gpus']:,}", _num(mine["num_microbatches"]), _pct(mine["bubble_fraction"]),
                      _fixed(mine["step_time_s"], ".3f"), _fits(mine), "-" if mine["feasible"] else ref["repair"],
                      _fixed(near and near["step_time_s"], ".3f"), best_step)
    return table


def print_sweep(sweep: dict, console: Console) -> None:
    """The tables and notes of a sweep on `console`."""
    console.print(scaling_tables(sweep))


@contextmanager
def progress_bar(total: int, enabled: bool) -> Iterator[Callable[[SizeResult], None]]:
    """A rich progress bar on stderr (never on stdout, where --json goes): one tick per size."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), disable=not enabled)
    with bar:
        task = bar.add_task("", total=total)

        def tick(result: SizeResult) -> None:
            bar.update(task, advance=1, description=f"{result.gpus:,} GPUs: {result.status}")

        yield tick
