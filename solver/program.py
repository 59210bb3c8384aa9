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


def program_rules(problem: Problem) -> tuple[Constraint, ...]:
    """Every active rule except those the program states through its cut staircases."""
    return tuple(c for c in active_constraints(problem) if c.id not in CUT_RULES)


def _post_rules(model: cp_model.CpModel, problem: Problem, rows: tuple[Row, ...], row_index: cp_model.IntVar,
                rules: tuple[Constraint, ...]) -> dict[str, cp_model.IntVar]:
    """Degree variables read off the chosen row, and every rule posted on them behind its literal
    (forced true: a solution satisfies every rule). The solver always emits its own stage cut
    (layout_explicit), as every returned mapping carries its layout."""
    domains = {name: sorted({getattr(r, name) for r in rows}) for name in DEGREE_NAMES}
    options = sorted({r.recompute for r in rows}, key=[x.value for x in Recompute].index)
    consts = model_consts(problem) | {"layout_explicit": 1}
    v = DecisionVars.create(model, problem.gpus, problem.training.global_batch, problem.training.seq_len,
                            domains, options, consts)
    v.options = problem.spec.framework.options
    for name in DEGREE_NAMES:
        model.AddElement(row_index, [getattr(r, name) for r in rows], v.degree[name])
    for opt, flag in v.recompute.items():
        model.AddElement(row_index, [int(r.recompute == opt) for r in rows], flag)
    literals = {}
    for rule in rules:
        lit = model.NewBoolVar(f"rule_{rule.id}")
        rule.post(model, v, lit)
        model.Add(lit == 1)
        literals[rule.id] = lit
    return literals


def compile_program(problem: Problem, rows: tuple[Row, ...], costs: tuple[RowCosts, ...],
                    staircases: tuple[Staircase, ...], rules: tuple[Constraint, ...] | None = None) -> Program:
    """The master model over `rows` and their staircases (rules default to program_rules(problem)).

    A row with a staircase may be chosen on any of its steps: one table of (row, step time, step
    memory), with the objectives at or above the chosen step. Rows with no fitting cut are left out.
    Returns None-free models only when some row fits; callers check `staircases` first."""
    rules = program_rules(problem) if rules is None else rules
    model = cp_model.CpModel()
    points = [(i, q.time_units, q.memory_units) for i, st in enumerate(staircases) for q in st.points]
    fitting = sorted({i for i, _, _ in points})
    row_index = model.NewIntVarFromDomain(cp_model.Domain.FromValues(fitting), "row_index")
    literals = _post_rules(model, problem, rows, row_index, rules)
    step_time = model.NewIntVar(0, max(p[1] for p in points), "step_time")
    step_memory = model.NewIntVar(0, max(p[2] for p in points), "step_memory")
    model.AddAllowedAssignments([row_index, step_time, step_memory], points)
    time_units = model.NewIntVar(0, max(p[1] for p in points), "step_time_units")
    memory_units = model.NewIntVar(0, max(p[2] for p in points), "peak_memory_units")
    model.Add(time_units >= step_time)
    model.Add(memory_units >= step_memory)
    return Program(model, rows, costs, staircases, row_index, time_units, memory_units, rules, literals)
