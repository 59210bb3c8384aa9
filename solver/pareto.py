"""Exact Pareto search over (step time, peak memory) by the epsilon-constraint method on the master
program.

Each point: minimise step time under a memory cap, then minimise memory at that time with the
smallest row index as a tie-break (lexicographic; one objective M·R + row); the next cap is one unit
below.
Further fronts exclude the rows
already ranked, so `--top K` lists distinct degree configurations. Solves run on one worker with a
fixed seed and are warm-started: the same input gives the same answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from parasol.solver.cuts import CutPoint
from parasol.solver.program import Program

SEED = 20261129
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
    time_bound: int
    """Best lower bound CP-SAT proved for the step time of this point (= time_units when optimal)."""


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
    time_units: int
    memory_units: int
    optimal: bool
    bound: int


class Search:
    """The master solves of one search: a shared deadline and warm starts."""

    def __init__(self, program: Program, time_limit_s: float) -> None:
        self.p = program
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
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = SEED
        solver.parameters.cp_model_probing_level = 0
        solver.parameters.max_time_in_seconds = max(self.remaining(), 0.01)
        status = solver.Solve(model)
        self.solves += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.complete = self.complete and status == cp_model.INFEASIBLE
            return None
        self.hint = solver.Value(self.p.row_index)
        return _Answer(self.hint, solver.Value(self.p.time_units), solver.Value(self.p.memory_units),
                       status == cp_model.OPTIMAL, int(solver.BestObjectiveBound()))


def _le(var: cp_model.IntVar, value: int) -> Extra:
    return lambda model: model.Add(var <= value)


def _exclude(row_index: cp_model.IntVar, rows: set[int]) -> Extra:
    return lambda model: [model.Add(row_index != i) for i in sorted(rows)]


def _step(points: tuple[CutPoint, ...], time_units: int, memory_units: int) -> CutPoint:
    """The staircase step that realises (time, memory): within both, the fastest."""
    return min((q for q in points if q.time_units <= time_units and q.memory_units <= memory_units),
               key=lambda q: (q.time_units, q.memory_units, q.layout))


def one_front(search: Search, rank: int, excluded: set[int]) -> list[Point]:
    """The non-dominated points among rows not in `excluded`, best step time first."""
    p = search.p
    points: list[Point] = []
    cap: int | None = None
    base = [_exclude(p.row_index, excluded)] if excluded else []
    while True:
        capped = base + ([_le(p.memory_units, cap)] if cap is not None else [])
        fastest = search.solve(capped, p.time_units)
        if fastest is None:
            return points
        leanest = search.solve(capped + [_le(p.time_units, fastest.time_units)],
                               p.memory_units * len(p.rows) + p.row_index)
        if leanest is None:
            return points
        step = _step(p.staircases[leanest.row].points, fastest.time_units, leanest.memory_units)
        optimal = fastest.optimal and leanest.optimal
        points.append(Point(leanest.row, step.layout, fastest.time_units, leanest.memory_units, rank, optimal,
                            fastest.bound))
        cap = leanest.memory_units - 1


def pareto_search(program: Program, top: int, time_limit_s: float) -> SearchOutcome:
    """Fronts of rank 1, 2, ... until `top` points are found or no row is left."""
    start = time.perf_counter()
    search = Search(program, time_limit_s)
    points: list[Point] = []
    excluded: set[int] = set()
    rank = 1
    while True:
        front = one_front(search, rank, excluded)
        if not front:
            break
        points.extend(front)
        excluded |= {pt.row_index for pt in front}
        if len(points) >= top or len(excluded) == sum(bool(st.points) for st in program.staircases):
            break
        rank += 1
    return SearchOutcome(tuple(points), search.complete, search.solves, time.perf_counter() - start)
