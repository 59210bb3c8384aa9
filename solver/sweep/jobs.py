"""One size of a sweep: the sizes a user asks for, the job each size is (plain data, so any backend can
run it), its frozen result, and the task that solves it."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from parasol.bounds import MAX_GPUS, MAX_SWEEP_SIZES
from parasol.errors import InputError, ParasolError, short
from parasol.problems.mapping import DEGREES

if TYPE_CHECKING:

    from parasol.problems.loader import Problem
    from parasol.solver.diagnose.explain import Explanation
    from parasol.solver.search.solve import SolveResult

MAX_SIZES = MAX_SWEEP_SIZES
"""Most sizes one sweep runs (a range with a small step could otherwise ask for thousands)."""

GRACE_S = 30.0
"""Seconds a size may run past its --time-limit (explaining the mappings found, starting the worker)
before the backend stops it and reports it as `timeout`."""

EFFICIENCY_FLOOR = 0.5
"""Scaling efficiency below which the notes say scaling has stopped paying."""

BACKENDS = ("local", "ray", "serial")

_NUMBER = r"\d(?:_?\d){0,9}"
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
    if hi > MAX_GPUS:
        raise _size_error(item, f"The range {item!r} ends above the largest job parasol plans ({MAX_GPUS:,} GPUs).",
                          f"end the range at or below {MAX_GPUS:,}.")
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
    return list(range(lo, hi + 1, by)[:MAX_SIZES + 1])


def parse_sizes(text: str) -> tuple[int, ...]:
    """GPU counts from `--gpus`: `256,512,1024`, `1024..65536x2` or `1024..4096+1024`, mixed with
    commas; repeats dropped, ascending. Bad items, zero, more than MAX_SIZES sizes or more than
    MAX_GPUS GPUs are input errors (a size that is not a whole number of nodes runs on partial nodes)."""
    sizes: set[int] = set()
    for raw in text.split(","):
        item = raw.strip().replace(" ", "")
        match = _ITEM.match(item)
        if not match:
            raise _size_error(raw.strip(), f"Cannot read the --gpus item {short(raw.strip())}; numbers have at most 10 digits.",
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
    """Load, resize and solve one size (on one core: a sweep's sizes share the cores), then price the problem's
    own mapping there."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem_text
    from parasol.solver.search.solve import solve

    problem = load_problem_text(job.problem_text, source=job.source, base_dir=Path(job.base_dir))
    problem = problem.resized(job.gpus, job.global_batch)
    result = solve(problem, CalibratedStageTimes(problem), top=job.top, time_limit_s=job.time_limit_s,
                   two_cores=False)
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


def check_backend(backend: str) -> None:
    """Refuse an unknown backend before any work starts."""
    if backend not in BACKENDS:
        raise InputError(f"Unknown backend {backend!r}.", field="--backend", value=backend,
                         expected=f"one of {', '.join(BACKENDS)}", fix="use --backend local.")


def count_cell(x: int | float | None) -> str:
    """A count as a table cell: whole numbers with separators, fractions to three digits."""
    if x is None:
        return "-"
    return f"{x:,}" if isinstance(x, int) else f"{x:,.3g}"


def short_label(m: dict) -> str:
    """A mapping for a narrow column: the degrees other than 1 and the recompute choice
    (`PP8 CP4 EP64 VPP2 full`; TP1 when every degree is 1)."""
    keys = DEGREES
    degrees = " ".join(f"{k.upper()}{m[k]}" for k in keys if m[k] != 1) or "TP1"
    return f"{degrees} {m['recompute']}"
