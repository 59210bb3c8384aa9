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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from parasol.solver.sweep.backends import open_pool, run_jobs
from parasol.solver.sweep.jobs import (
    EFFICIENCY_FLOOR,
    GRACE_S,
    MappingSummary,
    SizeJob,
    SizeResult,
    check_backend,
    count_cell,
    run_size,
    short_label,
    weak_batch,
)

if TYPE_CHECKING:

    from parasol.problems.loader import Problem

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
            f"{short_label(mine.mapping)} (m {count_cell(mine.num_microbatches)}, bubble {mine.bubble_fraction:.1%}): "
            f"{mine.step_time_s:.3f} s/step as modelled, {fits}; best is {_gain(best, mine)}")
    if ref.nearest is not None and ref.nearest.step_time_s:
        text += (f"; its nearest feasible repair ({ref.repair}): {ref.nearest.step_time_s:.3f} s/step; best is "
                 f"{_gain(best, ref.nearest)}")
    elif not mine.feasible:
        text += f"; {ref.repair}"
    return text + "."


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


def run_sweep(problem_path: str | Path, sizes: Sequence[int], *, weak: bool = False, backend: str = "local",
              workers: int | None = None, top: int = 1, time_limit_s: float = 60.0,
              deadline_s: float | None = None, ray_address: str | None = None,
              progress: Callable[[SizeResult], None] | None = None,
              task: Callable[[SizeJob], SizeResult] = run_size) -> SweepResult:
    """Solve `problem_path` at every size on `backend` (local process pool, Ray, or serial in this
    process) with `workers` sizes at a time (default: all cores, at most one per size). A size is
    stopped `deadline_s` after it starts (default: its time limit plus GRACE_S) and reported as
    `timeout`; `progress` is called with each size's result as it arrives."""
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
