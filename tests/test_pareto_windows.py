"""The Pareto master asked in windows (solver/search/pareto.py): the fronts equal those of the plain
epsilon-constraint walk, where every solve minimises over the whole model, point for point (rows,
values, ranks, optimal flags, bounds), on generated problems whose rules refuse rows, on per-row
objectives, and when a refused row holds the least step."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model
from test_solve_reference import GENERATED, AdditiveTime

from parasol.problems.loader import load_problem_text
from parasol.problems.schema import Objective
from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
from parasol.solver.search.cpsat import deterministic_solver
from parasol.solver.search.cuts import row_staircase
from parasol.solver.search.objectives import DEFAULT_OBJECTIVES, SCALES, row_units
from parasol.solver.search.pareto import Search, one_front, pareto_search
from parasol.solver.search.program import Program, compile_program
from parasol.solver.search.space import enumerate_rows

Pair = tuple[Objective, Objective]


def _program(index: int, pair: Pair = DEFAULT_OBJECTIVES) -> Program:
    """The master program of generated problem `index` over every row, per-row objectives of `pair` included."""
    problem = load_problem_text(GENERATED[index], source=f"generated-{index}.yaml")
    rows = enumerate_rows(problem)
    costs = tuple(row_costs(problem, r, AdditiveTime(problem)) for r in rows)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    stairs = tuple(row_staircase(c, counts, usable_mb(problem)) for c in costs)
    per_row = {o: tuple(row_units(problem, r, o) for r in rows) for o in pair if not SCALES[o].per_cut}
    return compile_program(problem, rows, costs, stairs, row_values=per_row)


def _plain(program: Program, objective: cp_model.LinearExprT,
           limits: list[cp_model.BoundedLinearExpression]) -> cp_model.CpSolver | None:
    """One solve of the whole model under `limits`: the walk before windows."""
    model = program.model.Clone()
    for limit in limits:
        model.Add(limit)
    model.Minimize(objective)
    solver = deterministic_solver(60, probing=False)
    return solver if solver.Solve(model) == cp_model.OPTIMAL else None


def _plain_walk(program: Program, top: int, pair: Pair = DEFAULT_OBJECTIVES) -> list[tuple]:
    """The fronts by the plain epsilon-constraint walk: (rank, row, values, bound) per point."""
    first, second = (program.objectives[o] for o in pair)
    points: list[tuple] = []
    excluded: set[int] = set()
    for rank in range(1, top + 1):
        front, cap = [], None
        while True:
            base = [program.row_index != i for i in sorted(excluded)] + ([second <= cap] if cap is not None else [])
            best = _plain(program, first, base)
            if best is None:
                break
            value = best.Value(first)
            leanest = _plain(program, second * len(program.rows) + program.row_index, base + [first <= value])
            front.append((rank, leanest.Value(program.row_index), (value, leanest.Value(second)),
                          round(best.BestObjectiveBound())))
            cap = leanest.Value(second) - 1
        if not front:
            break
        points += front
        excluded |= {pt[1] for pt in front}
        if len(points) >= top:
            break
    return points


def _walk(program: Program, top: int, pair: Pair = DEFAULT_OBJECTIVES) -> list[tuple]:
    outcome = pareto_search(program, top, 120, pair)
    assert outcome.complete and all(pt.optimal for pt in outcome.points)
    return [(pt.pareto_rank, pt.row_index, pt.values, pt.bound) for pt in outcome.points]


def _refused_truly(program: Program, search: Search) -> bool:
    """Every row the search learned refused is infeasible in the whole model."""
    return all(_plain(program, program.row_index, [program.row_index == int(i)]) is None
               for i in search.refused.nonzero()[0])


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_windows_match_the_plain_walk(index: int) -> None:
    """Generated problems, rules refusing hundreds of rows (0, 2) or none (3): the same fronts, point
    for point, and every row learned refused is one the whole model refuses."""
    program = _program(index)
    assert _walk(program, 12) == _plain_walk(program, 12)
    search = Search(program, 60)
    one_front(search, 1, set())
    assert _refused_truly(program, search)


@pytest.mark.parametrize(("index", "pair"), [(1, (Objective.step_time, Objective.bubble)),
                                             (2, (Objective.network_bytes, Objective.step_time)),
                                             (4, (Objective.bubble, Objective.peak_memory))])
def test_windows_match_the_plain_walk_on_per_row_objectives(index: int, pair: Pair) -> None:
    """Per-row objectives (bubble, network bytes): every step of a row carries the row's value."""
    program = _program(index, pair)
    assert _walk(program, 8, pair) == _plain_walk(program, 8, pair)


def test_refused_rows_holding_the_least_step_force_the_next_window() -> None:
    """The rows that would be fastest (six tie), refused by the model as a rule refuses a row: the
    first window is infeasible, they are learned refused, and the fronts are still the plain walk's."""
    program = _program(3)
    search = Search(program, 60)
    fastest = sorted({int(i) for i in search.step_row[search.step_first == search.step_first.min()]})
    for i in fastest:
        program.model.Add(program.row_index != i)
    search = Search(program, 60)
    front = one_front(search, 1, set())
    assert all(search.refused[i] for i in fastest) and len(fastest) > 1
    assert all(pt.row_index not in fastest for pt in front)
    assert _walk(program, 6) == _plain_walk(program, 6)


def test_out_of_time_stops_incomplete() -> None:
    """No time left: no point, and the search says it is incomplete (not infeasible)."""
    outcome = pareto_search(_program(0), 4, 0.0)
    assert outcome.points == () and not outcome.complete and outcome.master_solves == 0

