"""The degree values some mapping can take under the rules, found before any row is listed.

A default-space problem lists tens of thousands of degree rows, and a rule that reads one or two
degrees (DeepSeek-V4's attention runs at TP 1 only; its compressed-attention blocks refuse selective
recompute) can rule out most of them. Pricing those rows and then letting the master reject them wastes
the time limit. So before listing, every rule the master posts (program.program_rules) is posted once on
free degree variables over the search domains, exactly as the master posts them, and each value of each
degree (and each recompute option) is asked in turn whether any assignment of the other degrees meets
every rule with it. A value with none is dropped: no row holding it can be chosen by the master, so the
answer is the same. A value whose question is left open (its time share spent) is kept. Each solution
found also answers for every value it holds, so most values need no question of their own. The
questions are pure feasibility over a few small domains: they run without presolve and probing, which
cost most of each answer there (measured 5-8x faster on the default-space problems, the same values
dropped), and a proof of infeasibility stays a proof.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from parasol.constraints.core.base import Constraint, post_rules
from parasol.constraints.core.consts import model_consts
from parasol.constraints.core.decision_vars import DecisionVars
from parasol.cp_sat import cp_model
from parasol.problems.loader import Problem
from parasol.problems.mapping import DEGREES
from parasol.solver.search.cpsat import deterministic_solver
from parasol.solver.search.program import program_rules
from parasol.solver.search.space import Row, recompute_choices

degrees_of = attrgetter(*DEGREES)
"""A row's degrees, in DEGREES' order, as a tuple."""

PROBE_LIMIT_S = 1.0
"""Wall seconds one value's question may take; past it the value is kept."""


@dataclass(frozen=True)
class RuleDomains:
    """The values of each degree and the recompute options some rule-abiding mapping takes."""

    degrees: dict[str, tuple[int, ...]]
    recompute: tuple[str, ...]
    dropped: tuple[tuple[str, str], ...]
    """(degree or 'recompute', value) pairs no mapping meeting every posted rule takes, while some does."""
    refuse_all: bool = False
    """No combination of the search's values meets every posted rule (every domain is then empty)."""

    def holds(self, row: Row) -> bool:
        """Whether every value of the row is one some rule-abiding mapping takes."""
        return row.recompute in self.recompute and self._degrees_hold(degrees_of(row))

    def kept(self, rows: tuple[Row, ...]) -> tuple[Row, ...]:
        """The rows that hold (holds), in their order, their degrees judged once per distinct degrees (by_degrees)."""
        return tuple(row for row in by_degrees(rows, self._degrees_hold) if row.recompute in self.recompute)

    def _degrees_hold(self, degrees: tuple[int, ...]) -> bool:
        """Whether each degree (DEGREES' order) is a value some rule-abiding mapping takes."""
        return all(value in self.degrees[n] for n, value in zip(DEGREES, degrees, strict=True))


def _probe_model(problem: Problem, domains: dict[str, tuple[int, ...]], options: tuple[str, ...]
                 ) -> tuple[cp_model.CpModel, DecisionVars]:
    """The program rules posted on free degree variables, as compile_program posts them (every rule's
    literal forced true; the rank order left free, the solver's own cut assumed)."""
    model = cp_model.CpModel()
    v = DecisionVars.create(model, problem.gpus, problem.training.global_batch, problem.training.seq_len,
                            domains, options, model_consts(problem) | {"layout_explicit": 1})
    v.options = problem.spec.framework.options
    v.flags["rank_order_dp_last"] = model.NewBoolVar("rank_order_dp_last")
    for literal in post_rules(v, program_rules(problem)).values():
        model.Add(literal == 1)
    return model, v


def _prober(time_limit_s: float) -> cp_model.CpSolver:
    """The solver one question runs on: deterministic, with neither presolve nor probing."""
    return deterministic_solver(time_limit_s, presolve=False, probing=False)


def rule_domains(problem: Problem, domains: dict[str, tuple[int, ...]], deadline: float) -> RuleDomains:
    """`domains` and the problem's recompute options less the values no mapping meeting every posted rule
    takes; questions stop at `deadline` (time.perf_counter()), keeping the values not yet asked."""
    options = tuple(r.value for r in recompute_choices(problem))
    if not program_rules(problem) or not all(domains[n] for n in DEGREES):
        return RuleDomains(dict(domains), options, ())
    model, v = _probe_model(problem, domains, options)
    whole = _prober(min(PROBE_LIMIT_S, deadline - time.perf_counter())).Solve(model)
    if whole == cp_model.INFEASIBLE:
        return RuleDomains({n: () for n in DEGREES}, (), (), refuse_all=True)
    questions: dict[tuple[str, int | str], cp_model.IntVar] = {}
    for name in DEGREES:
        for value in domains[name]:
            is_value = model.NewBoolVar(f"{name}_is_{value}")
            model.Add(v.degree[name] == value).OnlyEnforceIf(is_value)
            questions[(name, value)] = is_value
    for option, flag in v.recompute.items():
        questions[("recompute", option)] = flag
    seen: set[tuple[str, int | str]] = set()
    dropped: list[tuple[str, int | str]] = []
    for key, literal in questions.items():
        if key in seen:
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        model.ClearAssumptions()
        model.AddAssumption(literal)
        solver = _prober(min(PROBE_LIMIT_S, left))
        status = solver.Solve(model)
        if status == cp_model.INFEASIBLE:
            dropped.append(key)
        elif status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            seen.update((n, solver.Value(v.degree[n])) for n in DEGREES)
            seen.update(("recompute", o) for o, flag in v.recompute.items() if solver.Value(flag))
    gone = set(dropped)
    return RuleDomains({n: tuple(x for x in domains[n] if (n, x) not in gone) for n in DEGREES},
                       tuple(o for o in options if ("recompute", o) not in gone),
                       tuple((n, str(x)) for n, x in dropped))


def degree_rules(problem: Problem) -> tuple[Constraint, ...]:
    """The rules the master posts whose verdict reads only a mapping's degrees (Constraint.degree_verdict):
    Megatron's interleaved-schedule rules, which read PP, VPP and the microbatch count together, a
    combination the per-value questions above cannot drop."""
    return tuple(c for c in program_rules(problem) if type(c).degree_verdict is not Constraint.degree_verdict)


def meeting_degree_rules(problem: Problem, rows: tuple[Row, ...]) -> tuple[Row, ...]:
    """The rows every degree rule accepts, in their order (the master refuses the others whatever their cut
    and options; the verdicts are asked once per distinct degrees). All of them when the rules would refuse
    every row: the master then refuses them and `solve` reports the rules that block the space."""
    rules = degree_rules(problem)
    if not rules:
        return rows

    def verdict(key: tuple[int, ...]) -> bool:
        """Whether every degree rule accepts these degrees."""
        degrees = dict(zip(DEGREES, key, strict=True))
        return all(c.degree_verdict(problem, degrees) for c in rules)

    kept = by_degrees(rows, verdict)
    return tuple(kept) if kept else rows


def by_degrees(rows: tuple[Row, ...], verdict: Callable[[tuple[int, ...]], bool]) -> list[Row]:
    """The rows whose degrees (DEGREES' order) `verdict` accepts, in their order, each distinct degrees asked
    once: a default space lists tens of thousands of rows over a few thousand degree combinations."""
    verdicts: dict[tuple[int, ...], bool] = {}
    kept = []
    for row in rows:
        degrees = degrees_of(row)
        accepted = verdicts.get(degrees)
        if accepted is None:
            accepted = verdicts[degrees] = verdict(degrees)
        if accepted:
            kept.append(row)
    return kept
