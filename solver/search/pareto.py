"""Exact Pareto search over two objectives (default step time × peak memory) by the epsilon-constraint
method on the master program.

Each point: minimise the first objective under a cap on the second, then minimise the second at
that value with the smallest row index as a tie-break (lexicographic; one objective S·R + row); the
next cap is one unit below. Further fronts exclude the rows already ranked, so `--top K` lists
distinct degree configurations. Solves run on one worker with a fixed seed and are warm-started:
the same input gives the same answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from parasol.problems.schema import Objective
from parasol.solver.search.cpsat import deterministic_solver
from parasol.solver.search.cuts import CutPoint
from parasol.solver.search.objectives import DEFAULT_OBJECTIVES
from parasol.solver.search.program import Program

Extra = Callable[[cp_model.CpModel], object]


@dataclass(frozen=True)
class Point:
    """One mapping of a front: its row, stage sizes, objective values and how sure the solver is."""

    row_index: int
    layout: tuple[int, ...]
    time_units: int
    memory_units: int
    pareto_rank: int
    optimal: bool
    bound: int
    """Best lower bound CP-SAT proved for the first objective at this point (= its value when optimal)."""
    values: tuple[int, int]
    """The two front objectives' values, in the program's units."""


@dataclass(frozen=True)
class SearchOutcome:
    """All points found, whether every solve proved optimality, and the effort spent."""

    points: tuple[Point, ...]
    complete: bool
    master_solves: int
    seconds: float


@dataclass(frozen=True)
class _Answer:
    row: int
    values: tuple[int, int]
    optimal: bool
    bound: int


class Search:
    """The master solves of one search: a shared deadline and warm starts."""

    def __init__(self, program: Program, time_limit_s: float,
                 objectives: tuple[Objective, Objective] = DEFAULT_OBJECTIVES) -> None:
        self.p = program
        self.first, self.second = (program.objectives[o] for o in objectives)
        self.names = objectives
        self.deadline = time.perf_counter() + time_limit_s
        self.solves = 0
        self.complete = True
        self.hint: int | None = None

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def solve(self, extra: list[Extra], objective: cp_model.IntVar) -> _Answer | None:
        """Minimise `objective` under `extra`; None when infeasible or out of time."""
        if self.remaining() <= 0:
            self.complete = False
            return None
        model = self.p.model.Clone()
        for add in extra:
            add(model)
        model.Minimize(objective)
        if self.hint is not None:
            model.AddHint(self.p.row_index, self.hint)
        solver = deterministic_solver(self.remaining(), probing=False)
        status = solver.Solve(model)
        self.solves += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.complete = self.complete and status == cp_model.INFEASIBLE
            return None
        self.hint = solver.Value(self.p.row_index)
        return _Answer(self.hint, (solver.Value(self.first), solver.Value(self.second)),
                       status == cp_model.OPTIMAL, int(solver.BestObjectiveBound()))


def _le(var: cp_model.IntVar, value: int) -> Extra:
    return lambda model: model.Add(var <= value)


def _exclude(row_index: cp_model.IntVar, rows: set[int]) -> Extra:
    return lambda model: [model.Add(row_index != i) for i in sorted(rows)]


def _step(points: tuple[CutPoint, ...], caps: dict[Objective, int]) -> CutPoint:
    """The staircase step that realises the front point: within the caps on the per-cut objectives
    among the two (none for per-row objectives), the fastest, then the leanest."""
    time_cap = caps.get(Objective.step_time, max(q.time_units for q in points))
    memory_cap = caps.get(Objective.peak_memory, max(q.memory_units for q in points))
    return min((q for q in points if q.time_units <= time_cap and q.memory_units <= memory_cap),
               key=lambda q: (q.time_units, q.memory_units, q.layout))


def one_front(search: Search, rank: int, excluded: set[int]) -> list[Point]:
    """The non-dominated points among rows not in `excluded`, best step time first."""
    p = search.p
    points: list[Point] = []
    cap: int | None = None
    base = [_exclude(p.row_index, excluded)] if excluded else []
    while True:
        capped = base + ([_le(search.second, cap)] if cap is not None else [])
        best = search.solve(capped, search.first)
        if best is None:
            return points
        first = best.values[0]
        leanest = search.solve(capped + [_le(search.first, first)], search.second * len(p.rows) + p.row_index)
        if leanest is None:
            return points
        second = leanest.values[1]
        step = _step(p.staircases[leanest.row].points, dict(zip(search.names, (first, second), strict=True)))
        points.append(Point(leanest.row, step.layout, step.time_units, step.memory_units, rank,
                            best.optimal and leanest.optimal, best.bound, (first, second)))
        cap = second - 1


def pareto_search(program: Program, top: int, time_limit_s: float,
                  objectives: tuple[Objective, Objective] = DEFAULT_OBJECTIVES,
                  on_front: Callable[[int, int], None] | None = None) -> SearchOutcome:
    """Fronts of rank 1, 2, ... over `objectives` until `top` points are found or no row is left;
    `on_front(fronts, points)` hears of each front as it is found (a progress display)."""
    start = time.perf_counter()
    search = Search(program, time_limit_s, objectives)
    points: list[Point] = []
    excluded: set[int] = set()
    rank = 1
    while True:
        front = one_front(search, rank, excluded)
        if not front:
            break
        points.extend(front)
        excluded |= {pt.row_index for pt in front}
        if on_front is not None:
            on_front(rank, len(points))
        if len(points) >= top or len(excluded) == sum(bool(st.points) for st in program.staircases):
            break
        rank += 1
    return SearchOutcome(tuple(points), search.complete, search.solves, time.perf_counter() - start)
