"""Exact Pareto search over two objectives (default step time × peak memory) by the epsilon-constraint
method on the master program.

Each point: minimise the first objective under a cap on the second, then minimise the second at
that value with the smallest row index as a tie-break (lexicographic; one objective S·R + row); the
next cap is one unit below. Further fronts exclude the rows already ranked, so `--top K` lists
distinct degree configurations. Solves run on one worker with a fixed seed: the same input gives the
same answer.

Each question is asked of CP-SAT in windows. Python knows every staircase step's objective values (a
per-row objective: the row's value on each of its steps), and a rule's verdict is the same for every
step of a row (rules are posted on the row's degrees), so among the steps a question allows (within
its caps, rows not excluded) only those in rows not proved refused can be chosen. CP-SAT is asked with
the objective at most the window's top (the least 1, 2, 4, ... distinct candidate values) on the
master model with only the window's steps open, every other step's boolean fixed to 0: each of those
breaks a cap, an exclusion or the top, or lies in a row an earlier solve proved refused. A feasible
window holds the optimum, as every step below its top that can be chosen is in it, and its presolve
is a fraction of the whole model's: DeepSeek-V4-Flash on 32,768 GPUs, 144 solves in 0.45 s CPU, was
119 in 5.1 s. An infeasible window proves each of its rows refused, and the next one doubles; the
last spans every candidate, so when it is infeasible the question is. An optimum proves every row
with a candidate below it refused. Python only picks the windows and keeps CP-SAT's refusals; CP-SAT
proves every answer. A point reads optimal values and the lexicographic optimum's row, unique (the
row index breaks ties), so the fronts are the whole-model walk's (tests/test_pareto_windows.py). Under a time-out a window's proved bound stays a
lower bound over the whole space: it is at most the window's optimum, which is the question's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parasol.cp_sat import cp_model
from parasol.problems.schema import Objective
from parasol.solver.search.cpsat import deterministic_solver
from parasol.solver.search.cuts import CutPoint
from parasol.solver.search.objectives import DEFAULT_OBJECTIVES
from parasol.solver.search.program import Program


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
    """Best lower bound CP-SAT proved for the first objective at this point (= its value when optimal;
    proved on a window, it bounds the whole space: module docstring)."""
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


@dataclass(frozen=True)
class _Ask:
    """One master question: the rows left out, caps on the two objectives, and whether to minimise the
    first or, lexicographically, the second with the row index as tie-break (second·R + row)."""

    excluded: frozenset[int]
    first_cap: int | None
    second_cap: int | None
    lexicographic: bool = False


class Search:
    """The master solves of one search: a shared deadline, every step's objective values, the rows
    CP-SAT proved break a rule, and the master model with every step closed (windows open theirs)."""

    def __init__(self, program: Program, time_limit_s: float,
                 objectives: tuple[Objective, Objective] = DEFAULT_OBJECTIVES) -> None:
        self.p = program
        self.first, self.second = (program.objectives[o] for o in objectives)
        self.names = objectives
        self.deadline = time.perf_counter() + time_limit_s
        self.solves = 0
        self.complete = True
        self.step_row = np.array([i for i, st in enumerate(program.staircases) for _ in st.points], dtype=np.int64)
        self.step_first, self.step_second = (_step_values(program, o, self.step_row) for o in objectives)
        # rows CP-SAT proved break a rule: an infeasible window held them, or an optimum lay above them
        self.refused = np.zeros(len(program.rows), dtype=bool)
        self.proto_index = [y.Index() for y in program.steps]
        self.closed = program.model.Clone()
        variables = self.closed.Proto().variables
        for k in self.proto_index:
            variables[k].domain[1] = 0

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def solve(self, ask: _Ask) -> _Answer | None:
        """The optimum of `ask`, asked in windows of its least candidate values (module docstring); None
        when infeasible or out of time."""
        values, steps = self._candidates(ask)
        window = 1
        while True:
            if self.remaining() <= 0:
                self.complete = False
                return None
            distinct = np.unique(values)
            top = int(distinct[min(window, len(distinct)) - 1]) if len(distinct) else None
            opened = steps if top is None else steps[values <= top]
            status, solver = self._run(ask, opened, top)
            if status != cp_model.INFEASIBLE or window >= len(distinct):
                return self._answer(status, solver, ask, values, steps)
            self.refused[self.step_row[opened]] = True
            steps, values = steps[values > top], values[values > top]
            window *= 2

    def _candidates(self, ask: _Ask) -> tuple[np.ndarray, np.ndarray]:
        """The objective values and positions of the steps `ask` allows in rows not refused, least value
        (then row) first."""
        keep = ~self.refused[self.step_row]
        if ask.excluded:
            keep &= ~np.isin(self.step_row, sorted(ask.excluded))
        if ask.first_cap is not None:
            keep &= self.step_first <= ask.first_cap
        if ask.second_cap is not None:
            keep &= self.step_second <= ask.second_cap
        steps = np.flatnonzero(keep)
        values = self._values(ask)[steps]
        order = np.lexsort((self.step_row[steps], values))
        return values[order], steps[order]

    def _values(self, ask: _Ask) -> np.ndarray:
        """Every step's value of the objective `ask` minimises."""
        return self.step_second * len(self.p.rows) + self.step_row if ask.lexicographic else self.step_first

    def _objective(self, ask: _Ask) -> cp_model.LinearExprT:
        """The objective `ask` minimises, as a CP-SAT expression (_values' counterpart)."""
        return self.second * len(self.p.rows) + self.p.row_index if ask.lexicographic else self.first

    def _run(self, ask: _Ask, window: np.ndarray, top: int | None) -> tuple[int, cp_model.CpSolver]:
        """One CP-SAT solve of `ask` with the objective at most `top` (unless None), on the master model
        with only the `window` steps open (every other step breaks the ask, the top or a refused row)."""
        model = self.closed.Clone()
        variables = model.Proto().variables
        for k in window:
            variables[self.proto_index[k]].domain[1] = 1
        for i in sorted(ask.excluded):
            model.Add(self.p.row_index != i)
        if ask.first_cap is not None:
            model.Add(self.first <= ask.first_cap)
        if ask.second_cap is not None:
            model.Add(self.second <= ask.second_cap)
        objective = self._objective(ask)
        if top is not None:
            model.Add(objective <= top)
        model.Minimize(objective)
        if len(window):
            model.AddHint(self.p.row_index, int(self.step_row[window[0]]))
        solver = deterministic_solver(self.remaining(), probing=False)
        status = solver.Solve(model)
        self.solves += 1
        return status, solver

    def _answer(self, status: int, solver: cp_model.CpSolver, ask: _Ask, values: np.ndarray,
                steps: np.ndarray) -> _Answer | None:
        """The solve's answer; an optimum also proves every row with a candidate value below it refused."""
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.complete = self.complete and status == cp_model.INFEASIBLE
            return None
        row = solver.Value(self.p.row_index)
        found = (solver.Value(self.first), solver.Value(self.second))
        if status == cp_model.OPTIMAL:
            least = found[1] * len(self.p.rows) + row if ask.lexicographic else found[0]
            self.refused[self.step_row[steps[values < least]]] = True
        return _Answer(row, found, status == cp_model.OPTIMAL, _integral(solver.BestObjectiveBound()))


def _integral(bound: float) -> int:
    """CP-SAT's bound on an integer objective as the integer it stands for: the float it reports may fall
    a hair below (30303.999999999996 for 30304 on a bubble objective), which int() would cut; rounding
    never passes the bound's ceiling, so it stays a lower bound of the integer optimum."""
    return round(bound)


def _step_values(program: Program, objective: Objective, step_row: np.ndarray) -> np.ndarray:
    """Every staircase step's value of `objective`, in program units (steps in program order)."""
    if objective == Objective.step_time:
        return np.array([q.time_units for st in program.staircases for q in st.points], dtype=np.int64)
    if objective == Objective.peak_memory:
        return np.array([q.memory_units for st in program.staircases for q in st.points], dtype=np.int64)
    return np.asarray(program.row_values[objective], dtype=np.int64)[step_row]


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
    left_out = frozenset(excluded)
    while True:
        best = search.solve(_Ask(left_out, None, cap))
        if best is None:
            return points
        first = best.values[0]
        leanest = search.solve(_Ask(left_out, first, cap, lexicographic=True))
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
