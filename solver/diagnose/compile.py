"""Compile a problem's rules into one CP-SAT model: degree variables over given domains, one
enforcement literal per rule, and the memory rule wired to the Python ledger.

The same Constraint objects judge a mapping in Python (constraints/evaluate.py) and post themselves
here; the literal of a rule switched off leaves every variable it touches free. The conflict finder
passes the literals as assumptions; the repair search forces them all true.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from parasol.constraints.core.base import Constraint, Facts, post_rules
from parasol.constraints.core.consts import mapping_consts, model_consts
from parasol.constraints.core.decision_vars import DecisionVars
from parasol.constraints.evaluate import facts_for
from parasol.constraints.rules.capacity import MemoryFitsHBM
from parasol.cp_sat import cp_model
from parasol.problems.derived import MAX_PIPELINE_SLOTS, derive
from parasol.problems.loader import Problem
from parasol.problems.mapping import DEGREES, Mapping, Recompute
from parasol.problems.options import MegatronOptions

RECOMPUTE_CHOICES = tuple(r.value for r in Recompute)
Screen = Callable[[dict[str, int], str], bool]
Reach = Callable[[list[list[int]], str], list[tuple[int, ...]]]
"""The degree tuples (DEGREES order) worth a table row under a recompute choice, from the domains (DEGREES
order, ascending), ascending; DecisionVars.table_tuples asks it."""


@dataclass
class MemoryOracle:
    """The memory rule's Python verdict per (degrees, recompute), cached: builds the Mapping with the
    problem's run sizes and the fixed layout (or the default split) and reads the same ledger and slack
    as `evaluate`. A `screen` may reject a tuple first without a ledger, and a `reach` name the only tuples a
    table asks about; both must leave out only tuples that other constraints of the same model forbid anyway
    (the repair search enforces every rule)."""

    problem: Problem
    options: MegatronOptions
    gpus: int
    gbs: int
    seq_len: int
    layout: tuple[int, ...] | None = None
    screen: Screen | None = None
    reach: Reach | None = None
    cache: dict[tuple, bool] = field(default_factory=dict)

    def mapping(self, degrees: dict[str, int], recompute: str) -> Mapping:
        """The fully specified mapping the tuple stands for."""
        return Mapping(gpus=self.gpus, gbs=self.gbs, seq_len=self.seq_len, recompute=recompute,
                       layout=self.layout, **{name: degrees[name] for name in DEGREES})

    def __call__(self, degrees: dict[str, int], recompute: str) -> bool:
        """Whether the heaviest rank of every stage fits (False when no ledger can be built)."""
        key = (*(degrees[name] for name in DEGREES), recompute)
        if key in self.cache:
            return self.cache[key]
        if self.layout is None and degrees["pp"] * degrees["vpp"] > self.problem.model.num_layers + MAX_PIPELINE_SLOTS:
            return False  # no default cut, so no ledger (problems/derived.py resolve_layout)
        if self.screen is not None and not self.screen(degrees, recompute):
            return False
        facts = facts_for(self.problem, self.mapping(degrees, recompute), self.options)
        fits = facts.ledger is not None and MemoryFitsHBM().slack(facts) >= 0
        self.cache[key] = fits
        return fits


@dataclass
class CompiledRules:
    """One CP-SAT model holding the rules behind their literals (rule id -> BoolVar)."""

    model: cp_model.CpModel
    vars: DecisionVars
    literals: dict[str, cp_model.IntVar]
    rules: tuple[Constraint, ...]
    memory: MemoryOracle

    def enforce_all(self, rule_ids: Iterable[str] | None = None) -> None:
        """Force the literals of `rule_ids` (default: every rule) true."""
        for rule_id in self.literals if rule_ids is None else rule_ids:
            self.model.Add(self.literals[rule_id] == 1)


def fixed_domains(mapping: Mapping) -> dict[str, list[int]]:
    """Single-value domains pinning every degree to `mapping` (ETP resolved to its effective value)."""
    values = {name: getattr(mapping, name) for name in DEGREES}
    values["etp"] = mapping.expert_tp
    return {name: [value] for name, value in values.items()}


def compile_rules(problem: Problem, rules: Sequence[Constraint], domains: dict[str, list[int]],
                  options: MegatronOptions | None = None, fixed: Mapping | None = None, *,
                  gbs: int | None = None, recompute: Sequence[str] | None = None,
                  screen: Screen | None = None, reach: Reach | None = None) -> CompiledRules:
    """Build the model: `domains` per degree (missing degrees pinned to `fixed`), GBS and the recompute
    choices from the arguments or `fixed`, then every rule posted behind its own literal. `fixed` also
    gives the run sizes, the layout and the mapping constants; `screen` and `reach` are MemoryOracle's."""
    opts = options if options is not None else problem.spec.framework.options
    pinned = fixed_domains(fixed) if fixed is not None else {}
    doms = {name: list(domains.get(name) or pinned.get(name) or [1]) for name in DEGREES}
    run_gbs = gbs if gbs is not None else (fixed.gbs if fixed is not None else problem.training.global_batch)
    choices = tuple(recompute) if recompute is not None else (
        (fixed.recompute.value,) if fixed is not None else RECOMPUTE_CHOICES)
    gpus = fixed.gpus if fixed is not None else problem.gpus
    seq_len = fixed.seq_len if fixed is not None else problem.training.seq_len
    layout = fixed.layout if fixed is not None else None
    consts = dict(model_consts(problem))
    if fixed is not None:
        consts.update(mapping_consts(Facts(problem=problem, mapping=fixed, derived=derive(problem.model, fixed),
                                           options=opts)))
    model = cp_model.CpModel()
    v = DecisionVars.create(model, gpus, run_gbs, seq_len, doms, choices, consts)
    v.options = opts
    memory = MemoryOracle(problem, opts, gpus, run_gbs, seq_len, layout, screen, reach)
    v.memory_fits = memory
    return CompiledRules(model=model, vars=v, literals=post_rules(v, rules), rules=tuple(rules), memory=memory)
