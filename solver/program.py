"""The master CP-SAT program of `solve`: which row of degrees to run, under every rule of the active
rule packs posted on the row's degree variables, and what (step time, peak memory) the row's stage
cuts can reach.

Each row offers a staircase of non-dominated cuts (solver/cuts.py): choosing the row means landing
on or above one of its steps; a row with no step that fits cannot be chosen.

Measured on DeepSeek-V4-Pro (1,024 GPUs, 198 rows): one CP-SAT program holding every row's cut
variables spent 7-9 s in presolve per solve; cut per row (0.27 s for all rows) and joined here, a
master solve takes about 50 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from parasol.constraints.base import Constraint
from parasol.constraints.decision_vars import DecisionVars, model_consts
from parasol.constraints.registry import active_constraints
from parasol.problems.loader import Problem
from parasol.problems.mapping import Recompute
from parasol.solver.costs import RowCosts
from parasol.solver.cuts import Staircase
from parasol.solver.space import DEGREE_NAMES, Row

CUT_RULES = ("memory-fits-hbm", "layout-covers-blocks")
"""Rules the program states through the cut staircases (per-stage memory within usable HBM, every
block placed) instead of their generic posting."""


@dataclass
class Program:
    """The master model and the handles the Pareto search reads and extends."""

    model: cp_model.CpModel
    rows: tuple[Row, ...]
    costs: tuple[RowCosts, ...]
    staircases: tuple[Staircase, ...]
    select: list[cp_model.IntVar]
    row_index: cp_model.IntVar
    time_units: cp_model.IntVar
    memory_units: cp_model.IntVar
    rules: tuple[Constraint, ...]
    literals: dict[str, cp_model.IntVar]


def _post_staircase(model: cp_model.CpModel, chosen: cp_model.IntVar, stairs: Staircase,
                    time_units: cp_model.IntVar, memory_units: cp_model.IntVar, index: int) -> None:
    """The row may only be chosen on or above one of its steps (none: it cannot be chosen)."""
    if not stairs.points:
        model.Add(chosen == 0)
        return
    steps = [model.NewBoolVar(f"step_{index}_{k}") for k in range(len(stairs.points))]
    model.Add(sum(steps) == chosen)
    for step, point in zip(steps, stairs.points, strict=True):
        model.Add(time_units >= point.time_units).OnlyEnforceIf(step)
        model.Add(memory_units >= point.memory_units).OnlyEnforceIf(step)


def program_rules(problem: Problem) -> tuple[Constraint, ...]:
    """Every active rule except those the program states through its cut staircases."""
    return tuple(c for c in active_constraints(problem) if c.id not in CUT_RULES)


def _post_rules(model: cp_model.CpModel, problem: Problem, rows: tuple[Row, ...], select: list[cp_model.IntVar],
                rules: tuple[Constraint, ...]) -> dict[str, cp_model.IntVar]:
    """Degree variables tied to the row choice, and every rule posted on them behind its literal
    (forced true: a solution satisfies every rule)."""
    domains = {name: sorted({getattr(r, name) for r in rows}) for name in DEGREE_NAMES}
    options = sorted({r.recompute for r in rows}, key=[x.value for x in Recompute].index)
    v = DecisionVars.create(model, problem.gpus, problem.training.global_batch, problem.training.seq_len,
                            domains, options, model_consts(problem))
    v.options = problem.spec.framework.options
    for name in DEGREE_NAMES:
        model.Add(v.degree[name] == sum(getattr(r, name) * x for r, x in zip(rows, select, strict=True)))
    for opt, flag in v.recompute.items():
        model.Add(flag == sum(x for r, x in zip(rows, select, strict=True) if r.recompute == opt))
    literals = {}
    for rule in rules:
        lit = model.NewBoolVar(f"rule_{rule.id}")
        rule.post(model, v, lit)
        model.Add(lit == 1)
        literals[rule.id] = lit
    return literals


def compile_program(problem: Problem, rows: tuple[Row, ...], costs: tuple[RowCosts, ...],
                    staircases: tuple[Staircase, ...], rules: tuple[Constraint, ...] | None = None) -> Program:
    """The master model over `rows` and their staircases (rules default to program_rules(problem))."""
    rules = program_rules(problem) if rules is None else rules
    model = cp_model.CpModel()
    select = [model.NewBoolVar(f"row_{i}") for i in range(len(rows))]
    model.AddExactlyOne(select)
    row_index = model.NewIntVar(0, len(rows) - 1, "row_index")
    model.Add(row_index == sum(i * x for i, x in enumerate(select)))
    literals = _post_rules(model, problem, rows, select, rules)
    points = [q for st in staircases for q in st.points]
    time_units = model.NewIntVar(0, max((q.time_units for q in points), default=0), "step_time_units")
    memory_units = model.NewIntVar(0, max((q.memory_units for q in points), default=0), "peak_memory_units")
    for i, (chosen, stairs) in enumerate(zip(select, staircases, strict=True)):
        _post_staircase(model, chosen, stairs, time_units, memory_units, i)
    return Program(model, rows, costs, staircases, select, row_index, time_units, memory_units, rules, literals)
