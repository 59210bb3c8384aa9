"""The shared Constraint type: a named, cited rule that evaluates a mapping in plain Python and posts
itself into a CP-SAT model behind one enforcement literal.

Slack is signed and in the rule's own unit: >= 0 holds, < 0 says by how much the rule is broken.
Both sides read the same quantities: Python from `Facts` (the mapping and its derived sizes), CP-SAT
from `DecisionVars` (the same quantities as integer variables). A property test holds them together.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import abc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING

from parasol.problems.derived import Derived
from parasol.problems.mapping import Mapping
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import RulePack

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from parasol.constraints.core.decision_vars import DecisionVars
    from parasol.constraints.physics.memory import MemoryLedger
    from parasol.problems.loader import Problem


ARGUMENTS = "Megatron-LM megatron/training/arguments.py"
BINDING_TOLERANCE = 1e-9
"""A holding inequality whose |slack| is at most this is at its limit (binding)."""
CONFIG = "Megatron-LM megatron/core/transformer/transformer_config.py"


class Family(StrEnum):
    """Rule families (one module each under constraints/)."""

    divisibility = "divisibility"
    batch = "batch arithmetic"
    pipeline = "pipeline schedule and layout"
    moe = "moe"
    context = "context parallel"
    memory = "memory"
    placement = "placement"
    feature = "feature compatibility"
    user = "user-declared"
    contract = "contract"


@dataclass(frozen=True)
class Citation:
    """Where a rule comes from: a file:line, a seed section, or a problem-file line."""

    source: str
    stage: MegatronStage = MegatronStage.not_megatron


@dataclass(frozen=True)
class Facts:
    """Everything a rule may read about one fully specified mapping."""

    problem: Problem
    mapping: Mapping
    derived: Derived
    options: MegatronOptions
    ledger_builder: Callable[[], MemoryLedger] | None = field(default=None, repr=False, compare=False)
    """Builds the memory ledger on first read (None: the mapping has none); most rules never read it."""
    extra: dict = field(default_factory=dict)

    @cached_property
    def ledger(self) -> MemoryLedger | None:
        """The memory ledger of the mapping (None when its layout does not cover the blocks), built once."""
        return self.ledger_builder() if self.ledger_builder is not None else None

    @property
    def model(self):  # noqa: ANN201 - ModelArchitecture
        return self.problem.model

    @property
    def training(self):  # noqa: ANN201 - Training
        return self.problem.training


class Severity(StrEnum):
    """An error makes a mapping infeasible; a warning reports what Megatron silently rewrites."""

    error = "error"
    warning = "warning"


@dataclass(frozen=True)
class Verdict:
    """One rule's judgement of one mapping."""

    rule: str
    slack: float
    unit: str
    message: str
    citation: Citation
    family: Family
    severity: Severity = Severity.error
    binding: bool = False
    """The rule holds, is in force, is an inequality here and sits exactly at its limit (Constraint.judge)."""
    in_force: bool = True
    """Whether the rule's condition concerns this mapping (Constraint.in_force)."""
    exact: bool = False
    """Whether slack 0 is how this rule holds here (Constraint.tight_at_zero is False)."""

    @property
    def holds(self) -> bool:
        """A warning never breaks a mapping; an error holds when its slack is >= 0."""
        return self.severity is Severity.warning or self.slack >= 0

    @property
    def triggered(self) -> bool:
        """Whether the condition is met (for a warning: whether Megatron would rewrite a flag)."""
        return self.slack < 0


def remainder_slack(numerator: int | Fraction, denominator: int | Fraction) -> float:
    """Slack of `denominator | numerator`: 0 when it divides, else minus the remainder (floored, as Python's %
    takes it: whole numbers, the search's common case, skip the fractions)."""
    if type(numerator) is int and type(denominator) is int:
        remainder = numerator % denominator
        return -float(remainder) if remainder else 0.0
    q = Fraction(numerator) / Fraction(denominator)
    if q.denominator == 1:
        return 0.0
    return -float(Fraction(numerator) - (q.numerator // q.denominator) * Fraction(denominator))


def is_whole(x: Fraction | None) -> bool:
    """True for an integral fraction."""
    return x is not None and x.denominator == 1


class Constraint(ABC):
    """A named rule. Subclasses set the class attributes and implement slack/message/post."""

    id: str
    family: Family
    citation: Citation
    pack: RulePack | None = RulePack.megatron_core
    severity: Severity = Severity.error
    unit: str = ""
    summary: str = ""
    exact: bool = False
    """Slack 0 is how the rule holds — a divisibility, an equality or an on/off condition — so zero slack
    never makes it binding."""
    solver_judges: str | None = None
    """How `solve` applies a rule whose CP-SAT side enumerates mappings in Python: "row" (judged once per
    degree row), "cut" (judged per stage cut, as it reads the step time); None: posted in the program."""
    reads_choices: bool = False
    """The rule reads an option `solve` chooses per row (the MoE token dispatcher, the CP communication
    type; solver/search/space.py): `solve` judges it per row in Python under the row's options."""
    reads_grid_only: bool = False
    """Of a mapping the rule reads only its degrees and rank order (besides the options it chooses): one verdict
    holds for every mapping of a grid whatever its microbatch, recompute, VPP or layout, so `solve` asks it once
    per grid and option (solver/search/choices.py ep_options; tests/test_degree_rules.py checks the claim)."""

    def active(self, problem: Problem) -> bool:
        """Whether the rule judges this problem: its pack is switched on and it applies."""
        return (self.pack is None or self.pack in problem.spec.framework.rule_packs) and self.applies(problem)

    def applies(self, problem: Problem) -> bool:
        """Whether the rule concerns this problem's model and options (override per rule)."""
        return True

    def in_force(self, facts: Facts) -> bool:
        """Whether the rule's condition concerns this mapping; a rule that does not is reported with
        slack 0, not binding (override in conditional rules)."""
        return True

    def tight_at_zero(self, facts: Facts) -> bool:
        """Whether slack 0 puts the rule at its limit on this mapping: inequalities yes, exact rules no
        (override where exactness depends on the mapping)."""
        return not self.exact

    def needs_ledger(self) -> bool:
        """Memory rules read the ledger; the evaluator builds it only when one asks."""
        return False

    @abstractmethod
    def slack(self, facts: Facts) -> float:
        """Signed slack in `unit`; >= 0 when the rule holds."""

    @abstractmethod
    def message(self, facts: Facts) -> str:
        """What the rule says about this mapping, with its numbers."""

    @abstractmethod
    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        """Add the rule to a CP-SAT model, holding only when `enforce` is true."""

    def degree_verdict(self, problem: Problem, degrees: abc.Mapping[str, int]) -> bool | None:
        """Whether the rule holds on every mapping of `problem` with these degree values (mapping.DEGREES)
        when it reads nothing else of a mapping; None when it reads more. `solve` drops the rows such a
        verdict refuses before pricing them (solver/search/domains.py); judge agrees (tests/test_degree_rules.py)."""
        return None

    def judge(self, facts: Facts) -> Verdict:
        """Evaluate and package the verdict, with whether the rule binds (holds exactly at its limit)."""
        slack = self.slack(facts)
        in_force = self.in_force(facts)
        tight = self.tight_at_zero(facts)
        holds = self.severity is Severity.warning or slack >= 0
        binding = holds and in_force and tight and abs(slack) <= BINDING_TOLERANCE
        return Verdict(self.id, slack, self.unit, self.message(facts), self.citation, self.family,
                       self.severity, binding=binding, in_force=in_force, exact=not tight)


def post_rules(v: DecisionVars, rules: Iterable[Constraint]) -> dict[str, cp_model.IntVar]:
    """Post every rule into `v`'s model behind a fresh literal of its own; returns rule id -> literal.
    The one way rules enter a CP-SAT model, shared by explain and solve."""
    literals = {}
    for rule in rules:
        literal = v.model.NewBoolVar(f"rule[{rule.id}]")
        rule.post(v.model, v, literal)
        literals[rule.id] = literal
    return literals
