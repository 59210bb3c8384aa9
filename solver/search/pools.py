"""The training pool's size as a decision (seed 003 §8: training and rollout on separate pools of one
cluster). `search.gpus` lists the sizes training may take; with `contract.rollout.cluster_devices` the
rest of the cluster is the rollout pool, so a larger training pool steps faster but is fed by fewer
rollout devices (the contract's supply and staleness rules judge each size).

Each size is solved exactly (solver/search/solve.py); the answers are merged by non-dominated sorting on the
problem's two front objectives. Rank 1 of the merge is exact: a point no point of any size dominates.
Further ranks sort the points each size returned, so they list alternatives in a sound order but may
miss a size's points beyond its own `top`.
"""

from __future__ import annotations

import dataclasses
import time

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.errors import InputError
from parasol.problems.loader import Problem
from parasol.problems.schema import Objective
from parasol.solver.search.dominance import nondominated
from parasol.solver.search.objectives import front_objectives, program_objectives, sort_key
from parasol.solver.search.solve import OnProgress, SolvedMapping, SolveResult, solve


def training_sizes(problem: Problem) -> tuple[int, ...]:
    """The training-pool sizes to try: `search.gpus` (any counts, partial nodes included, each leaving a
    rollout device when the cluster is split), else the problem's own GPU count."""
    chosen = problem.spec.search.gpus
    if chosen is None:
        return (problem.gpus,)
    sizes = (chosen,) if isinstance(chosen, int) else tuple(sorted(set(chosen)))
    line = problem.line_of("search", "gpus")
    if not sizes:
        raise InputError("search.gpus lists no training-pool size.", field="search.gpus", value=[],
                         expected="one or more GPU counts", fix="list sizes, or remove search.gpus.",
                         file=problem.source, line=line)
    rollout = problem.spec.contract.rollout
    cluster = rollout.cluster_devices if rollout is not None else None
    for n in sizes:
        if cluster is not None and n >= cluster:
            raise InputError(f"training-pool size {n} leaves no rollout device in a cluster of {cluster}.",
                             field="search.gpus", value=n, expected=f"sizes below contract.rollout.cluster_devices "
                             f"({cluster})", fix="drop that size or grow cluster_devices.", file=problem.source,
                             line=line)
    return sizes


def _keys(objectives: tuple[Objective, Objective], sm: SolvedMapping) -> tuple[float, float]:
    """A mapping's two front values on the 'smaller is better' scale."""
    first, second = objectives
    return sort_key(first, sm.front_values[first.value]), sort_key(second, sm.front_values[second.value])


def ranked(objectives: tuple[Objective, Objective], mappings: list[SolvedMapping], top: int) -> list[SolvedMapping]:
    """Non-dominated sorting of `mappings`: whole fronts until `top` are listed, each front by its first
    objective, then its second, then training-pool size (stable order)."""
    remaining = sorted(mappings, key=lambda sm: (*_keys(objectives, sm), sm.explanation.mapping.gpus))
    out: list[SolvedMapping] = []
    rank = 1
    while remaining and len(out) < top:
        keys = [_keys(objectives, sm) for sm in remaining]
        front = sorted(nondominated(keys, keep_equal=True))
        out.extend(dataclasses.replace(remaining[i], pareto_rank=rank) for i in front)
        chosen = set(front)
        remaining = [sm for i, sm in enumerate(remaining) if i not in chosen]
        rank += 1
    return out


def merged_status(results: list[SolveResult], found: bool) -> str:
    """optimal when every size was solved to optimality; infeasible when every size proved it has no
    mapping; feasible (some found) or unknown (none found) when a time limit cut any size short."""
    if all(r.status in ("optimal", "infeasible") for r in results):
        return "optimal" if found else "infeasible"
    return "feasible" if found else "unknown"


def solve_pools(problem: Problem, top: int = 10, time_limit_s: float = 60.0,
                progress: OnProgress | None = None) -> SolveResult:
    """Solve every training-pool size (the time limit shared evenly) and merge their fronts; one size
    with a plain objective is exactly `solve`. `progress` hears how far each size's search has got."""
    sizes = training_sizes(problem)
    objectives = front_objectives(problem)
    if sizes == (problem.gpus,) and program_objectives(objectives) == objectives:
        return solve(problem, CalibratedStageTimes(problem), top=top, time_limit_s=time_limit_s, progress=progress)
    start = time.perf_counter()
    results = []
    for n in sizes:
        sub = problem.resized(n)
        results.append(solve(sub, CalibratedStageTimes(sub), top=top, time_limit_s=time_limit_s / len(sizes),
                             progress=progress))
    mappings = ranked(objectives, [sm for r in results for sm in r.mappings], top)
    return SolveResult(merged_status(results, bool(mappings)), tuple(mappings), sum(r.rows for r in results),
                       sum(r.rows_fitting for r in results), sum(r.master_solves for r in results),
                       time.perf_counter() - start, sum(r.rows_screened for r in results))
