"""The framework options a row chooses besides its degrees: the MoE token dispatcher (rows with EP > 1)
and the CP communication type (rows with CP > 1).

Neither changes the memory ledger, so the variants of one row differ only in time; a variant whose
every stage time table is no slower than every other variant's (after the rules on these options,
judged per variant) gives every cut a point no other variant beats, so the row keeps that one variant
and the front is the one over all variants (checked against the brute force, tests/test_solve_reference.py).
Where no variant is fastest on every table the row keeps the fastest in sum and says so (not proved).
"""

from __future__ import annotations

from parasol.constraints.evaluate import evaluate
from parasol.problems.derived import default_layout
from parasol.problems.loader import Problem
from parasol.solver.search.costs import RowCosts, StageTimeModel, row_costs
from parasol.solver.search.program import choice_rules
from parasol.solver.search.space import Row, choice_variants, row_problem

MEMORY_TABLES = ("kind_static", "kind_activation", "kind_peak", "kind_moe", "edge_static", "edge_activation",
                 "edge_peak", "edge_moe", "inflight", "dispatch_mb", "workspace_mb")
TIME_TABLES = ("kind_time_us", "edge_time_us")


def choice_rules_hold(problem: Problem, row: Row) -> bool:
    """Whether the row's options meet every rule that reads them (Python verdicts under its options)."""
    chosen = row_problem(problem, row)
    rules = choice_rules(chosen)
    if not rules:
        return True
    mapping = row.mapping(chosen, default_layout(chosen.model.num_layers, row.pp * row.vpp))
    return evaluate(chosen, mapping, rules).feasible


def no_slower(a: RowCosts, b: RowCosts) -> bool:
    """Whether `a` is at most `b` on every time table and equal on every memory table."""
    if any(getattr(a, name) != getattr(b, name) for name in MEMORY_TABLES):
        return False
    if a.constant_time_us > b.constant_time_us:
        return False
    return all(x <= y for name in TIME_TABLES for x, y in zip(getattr(a, name), getattr(b, name), strict=True))


def settled(problem: Problem, row: Row, time_model: StageTimeModel) -> tuple[Row, RowCosts, bool]:
    """(the row with its options chosen, its cost tables, whether the choice is proved best for every cut)."""
    variants = choice_variants(problem, row)
    if len(variants) > 1:
        variants = tuple(v for v in variants if choice_rules_hold(problem, v)) or variants[:1]
    priced = [(v, row_costs(problem, v, time_model)) for v in variants]
    for v, c in priced:
        if all(no_slower(c, other) for _, other in priced):
            return v, c, True
    v, c = min(priced, key=lambda vc: sum(vc[1].kind_time_us) + sum(vc[1].edge_time_us) + vc[1].constant_time_us)
    return v, c, False
