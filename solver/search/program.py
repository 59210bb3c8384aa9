"""The master CP-SAT program of `solve`: which row of degrees to run, under every rule of the active
rule packs posted on the row's degree variables, and what (step time, peak memory) the row's stage
cuts can reach.

Each row offers a staircase of non-dominated cuts (solver/search/cuts.py): choosing the row means landing
on or above one of its steps; a row with no step that fits cannot be chosen.

Measured on DeepSeek-V4-Pro (1,024 GPUs, 198 rows): one CP-SAT program holding every row's cut
variables spent 7-9 s in presolve per solve; cut per row (0.27 s for all rows) and joined here, a
master solve takes about 50 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from parasol.constraints.core.base import Constraint, post_rules
from parasol.constraints.core.consts import model_consts
from parasol.constraints.core.decision_vars import DecisionVars
from parasol.constraints.evaluate import holds
from parasol.constraints.rules.registry import active_constraints
from parasol.cp_sat import cp_model
from parasol.problems.loader import Problem
from parasol.problems.mapping import DEGREES, RankOrder, Recompute
from parasol.problems.memo import memoised
from parasol.problems.schema import Objective
from parasol.solver.search.costs import RowCosts
from parasol.solver.search.cuts import Staircase
from parasol.solver.search.space import Row, with_choices

CUT_RULES = ("memory-fits-hbm", "layout-covers-blocks")
"""Rules the program states through the cut staircases (per-stage memory within usable HBM, every
block placed) instead of their generic posting."""


@dataclass
class Program:
    """The master model and the handles the Pareto search reads."""

    model: cp_model.CpModel
    rows: tuple[Row, ...]
    costs: tuple[RowCosts, ...]
    staircases: tuple[Staircase, ...]
    row_index: cp_model.IntVar
    time_units: cp_model.IntVar
    memory_units: cp_model.IntVar
    rules: tuple[Constraint, ...]
    literals: dict[str, cp_model.IntVar]
    objectives: dict[Objective, cp_model.IntVar]
    """Every objective the program can minimise, in the integer units of solver/search/objectives.py."""
    steps: tuple[cp_model.IntVar, ...]
    """One boolean per staircase step, rows in order and each row's steps in staircase order."""
    row_values: dict[Objective, tuple[int, ...]]
    """The per-row objectives' values, one per row (the Pareto search reads every step's values)."""


def program_rules(problem: Problem) -> tuple[Constraint, ...]:
    """Every active rule except those the program states through its cut staircases and those the
    solver judges in Python row by row or cut by cut (judged_rules)."""
    return tuple(c for c in active_constraints(problem)
                 if c.id not in CUT_RULES and c.solver_judges is None and not c.reads_choices)


def choice_rules(problem: Problem) -> tuple[Constraint, ...]:
    """Active rules reading an option a row chooses (dispatcher, CP communication type): the solver
    judges them per row in Python under the row's options (pass the row's problem, space.with_choices).
    Picked once per problem: settling and admitting a row ask for them per variant."""
    return memoised(problem, "choice rules", lambda: tuple(
        c for c in active_constraints(problem) if c.reads_choices and c.id not in CUT_RULES and c.solver_judges is None))


def judged_rules(problem: Problem, level: str) -> tuple[Constraint, ...]:
    """Active rules the solver applies in Python at `level` ("row" or "cut") instead of posting them:
    their CP-SAT side enumerates mappings, which the rows and their staircases already are."""
    return tuple(c for c in active_constraints(problem) if c.solver_judges == level)


def admissible(problem: Problem, row: Row, staircase: Staircase, row_rules: tuple[Constraint, ...],
               cut_rules: tuple[Constraint, ...]) -> Staircase:
    """The row's staircase with the steps the judged rules allow: none when a row rule (or a rule on the
    options the row chooses) fails on the row, else the steps whose own mapping passes every cut rule
    (the same Python verdicts explain gives, under the row's options)."""
    if not staircase.points:
        return staircase
    if not row_admitted(problem, row, row_rules):
        return Staircase((), staircase.proved)
    return cut_admitted(problem, row, staircase, cut_rules)


def row_admitted(problem: Problem, row: Row, row_rules: tuple[Constraint, ...]) -> bool:
    """Whether the row meets every row rule and every rule on the options it chooses (admissible's verdict on the
    row, the same for each of its steps)."""
    problem = with_choices(problem, row)
    rules = row_rules + choice_rules(problem)
    return not rules or holds(problem, row.mapping(problem), rules)


def cut_admitted(problem: Problem, row: Row, staircase: Staircase, cut_rules: tuple[Constraint, ...]) -> Staircase:
    """The staircase's steps whose own mapping passes every cut rule (admissible's verdict step by step)."""
    if not cut_rules or not staircase.points:
        return staircase
    problem = with_choices(problem, row)
    return Staircase(tuple(q for q in staircase.points if cut_passes(problem, row, q.layout, cut_rules)),
                     staircase.proved)


def cut_passes(problem: Problem, row: Row, layout: tuple[int, ...], cut_rules: tuple[Constraint, ...]) -> bool:
    """Whether the row's mapping with stage cut `layout` passes every rule judged cut by cut (`problem`: the row's,
    with its options, space.with_choices)."""
    return not cut_rules or holds(problem, row.mapping(problem, layout), cut_rules)


def _post_rules(model: cp_model.CpModel, problem: Problem, rows: tuple[Row, ...],
                steps: list[tuple[int, cp_model.IntVar]], rules: tuple[Constraint, ...]) -> dict[str, cp_model.IntVar]:
    """Degree variables read off the chosen step's row, and every rule posted on them behind its
    literal (forced true: a solution satisfies every rule). The solver always emits its own stage cut
    (layout_explicit), as every returned mapping carries its layout."""
    domains = {name: sorted({getattr(rows[i], name) for i, _ in steps}) for name in DEGREES}
    options = sorted({rows[i].recompute for i, _ in steps}, key=[x.value for x in Recompute].index)
    consts = model_consts(problem) | {"layout_explicit": 1}
    v = DecisionVars.create(model, problem.gpus, problem.training.global_batch, problem.training.seq_len,
                            domains, options, consts)
    v.options = problem.spec.framework.options
    v.flags["rank_order_dp_last"] = model.NewBoolVar("rank_order_dp_last")
    model.Add(v.flags["rank_order_dp_last"] == sum(y for i, y in steps if rows[i].rank_order == RankOrder.dp_last))
    for name in DEGREES:
        model.Add(v.degree[name] == sum(getattr(rows[i], name) * y for i, y in steps))
    for opt, flag in v.recompute.items():
        model.Add(flag == sum(y for i, y in steps if rows[i].recompute == opt))
    literals = post_rules(v, rules)
    for literal in literals.values():
        model.Add(literal == 1)
    return literals


def compile_program(problem: Problem, rows: tuple[Row, ...], costs: tuple[RowCosts, ...],
                    staircases: tuple[Staircase, ...], rules: tuple[Constraint, ...] | None = None,
                    row_values: dict[Objective, tuple[int, ...]] | None = None) -> Program:
    """The master model over `rows` and their staircases (rules default to program_rules(problem));
    `row_values` gives per-row objectives (bubble, network bytes, GPUs) in integer units, one per row.

    One boolean per (row, staircase step), exactly one chosen; the row index, the degrees and every
    objective are linear sums over them (a tight relaxation: measured 7× faster than a table of
    (row, time, memory) with element constraints at 9,000 steps). Rows with no fitting cut have no
    step. Callers make sure some row has one."""
    rules = program_rules(problem) if rules is None else rules
    model = cp_model.CpModel()
    points = [(i, q) for i, st in enumerate(staircases) for q in st.points]
    steps = [(i, model.NewBoolVar(f"step_{i}_{k}")) for k, (i, _) in enumerate(points)]
    model.AddExactlyOne(y for _, y in steps)
    row_index = model.NewIntVar(0, len(rows) - 1, "row_index")
    model.Add(row_index == sum(i * y for i, y in steps))
    literals = _post_rules(model, problem, rows, steps, rules)
    time_units = model.NewIntVar(0, max(q.time_units for _, q in points), "step_time_units")
    memory_units = model.NewIntVar(0, max(q.memory_units for _, q in points), "peak_memory_units")
    model.Add(time_units == sum(q.time_units * y for (_, q), (_, y) in zip(points, steps, strict=True)))
    model.Add(memory_units == sum(q.memory_units * y for (_, q), (_, y) in zip(points, steps, strict=True)))
    objectives = {Objective.step_time: time_units, Objective.peak_memory: memory_units}
    for name, values in (row_values or {}).items():
        var = model.NewIntVar(min(values), max(values), f"{name.value}_units")
        model.Add(var == sum(values[i] * y for i, y in steps))
        objectives[name] = var
    return Program(model, rows, costs, staircases, row_index, time_units, memory_units, rules, literals, objectives,
                   tuple(y for _, y in steps), dict(row_values or {}))
