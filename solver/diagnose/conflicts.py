"""The minimal conflicting set of rules of one infeasible mapping.

Every degree is pinned to the mapping; each error rule sits behind its literal, passed to CP-SAT as an
assumption. CP-SAT names a sufficient subset of assumptions (an unsatisfiable core); a deletion pass
then drops members while the rest stays infeasible, so the answer is minimal: removing any member
makes the model feasible. Members are tried latest-first, so the rule Megatron would raise first
(the registry lists rules in Megatron's stage order) is the one kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from parasol.constraints.core.base import Constraint, Severity
from parasol.constraints.evaluate import facts_for
from parasol.constraints.rules.registry import active_constraints
from parasol.cp_sat import cp_model
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.problems.options import MegatronOptions
from parasol.solver.diagnose.compile import CompiledRules, compile_rules, fixed_domains
from parasol.solver.search.cpsat import DIAGNOSIS_LIMIT_S, deterministic_solver


def judged_error_rules(problem: Problem, mapping: Mapping,
                       options: MegatronOptions | None = None) -> tuple[Constraint, ...]:
    """Active error rules Python can judge for `mapping` (ledger rules need a layout that covers)."""
    has_ledger = facts_for(problem, mapping, options).ledger_builder is not None
    return tuple(rule for rule in active_constraints(problem)
                 if rule.severity is Severity.error and (has_ledger or not rule.needs_ledger()))


def infeasible_under(compiled: CompiledRules, rule_ids: Sequence[str]) -> bool:
    """Whether the model cannot hold with the literals of `rule_ids` assumed true."""
    compiled.model.ClearAssumptions()
    compiled.model.AddAssumptions([compiled.literals[r] for r in rule_ids])
    return deterministic_solver(DIAGNOSIS_LIMIT_S, presolve=False).Solve(compiled.model) == cp_model.INFEASIBLE


def shrink(compiled: CompiledRules, core: list[str]) -> list[str]:
    """Deletion-based minimisation: drop each member (latest first) while the rest stays infeasible."""
    kept = list(core)
    for rule_id in reversed(core):
        trial = [r for r in kept if r != rule_id]
        if trial and infeasible_under(compiled, trial):
            kept = trial
    return kept


def minimal_conflict(problem: Problem, mapping: Mapping, options: MegatronOptions | None = None) -> tuple[str, ...]:
    """Rule ids of a minimal set of rules that `mapping` cannot satisfy together, in reporting order;
    empty when the mapping satisfies every rule."""
    rules = judged_error_rules(problem, mapping, options)
    compiled = compile_rules(problem, rules, fixed_domains(mapping), options, fixed=mapping)
    order = [rule.id for rule in rules]
    compiled.model.AddAssumptions([compiled.literals[r] for r in order])
    cp = deterministic_solver(DIAGNOSIS_LIMIT_S, presolve=False)
    if cp.Solve(compiled.model) != cp_model.INFEASIBLE:
        return ()
    literal_index = {compiled.literals[r].Index(): r for r in order}
    found = {literal_index[i] for i in cp.SufficientAssumptionsForInfeasibility() if i in literal_index}
    core = [r for r in order if r in found] or order
    return tuple(shrink(compiled, core))


def conflict_note(conflict: Sequence[str], broken: Sequence[str]) -> str:
    """What the minimal set says about this mapping, checked against its broken rules: 'dropping any one
    makes the mapping pass' only when that holds for every member (no other rule is broken)."""
    if not conflict:
        return ""
    others = [r for r in broken if r not in conflict]
    passes_without = all(set(broken) <= {member} for member in conflict)
    if passes_without:
        return "the only broken rule: mending it makes the mapping pass"
    if not others:
        return ("every member is broken and needed for the conflict; the mapping passes only when all "
                "of them are mended")
    return (f"these rules alone already rule the mapping out; {len(others)} more broken rule(s) must be "
            f"mended too: {', '.join(others)}")
