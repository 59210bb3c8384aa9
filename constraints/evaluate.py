"""Judge one fully specified mapping in plain Python: derived sizes, memory ledger, every rule."""

from __future__ import annotations

from dataclasses import dataclass

from parasol.constraints.core.base import Constraint, Facts, Severity, Verdict
from parasol.constraints.physics.memory import MemoryLedger, memory_ledger, schedule_fits_layout
from parasol.constraints.physics.weight_format import problem_weight_format
from parasol.constraints.rules.registry import active_constraints
from parasol.problems.derived import derive
from parasol.problems.mapping import Mapping, RankOrder
from parasol.problems.options import MegatronOptions


@dataclass(frozen=True)
class Evaluation:
    """Verdicts of every active rule on one mapping, with the facts they read."""

    facts: Facts
    verdicts: tuple[Verdict, ...]
    skipped: tuple[tuple[str, str], ...]

    @property
    def feasible(self) -> bool:
        return all(v.holds for v in self.verdicts) and not self.skipped

    @property
    def violations(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.holds)

    @property
    def warnings(self) -> tuple[Verdict, ...]:
        """Warning rules whose condition is met (flags Megatron would silently rewrite)."""
        return tuple(v for v in self.verdicts if v.severity.value == "warning" and v.triggered)

    @property
    def ledger(self) -> MemoryLedger | None:
        return self.facts.ledger


def layout_is_valid(model, mapping: Mapping, layout: tuple[int, ...], schedule: str = "megatron") -> bool:  # noqa: ANN001
    """A ledger can be built when the layout has PP·VPP stages covering every block, paired as the
    pipeline schedule needs (DualPipe: even PP, VPP 1; DualPipeV: VPP 2); without an explicit layout,
    more virtual stages than blocks leave the layout empty (derived.resolve_layout)."""
    return (len(layout) == mapping.pp * mapping.vpp and sum(layout) == model.num_layers
            and schedule_fits_layout(layout, mapping.pp, schedule))


def facts_for(problem, mapping: Mapping, options: MegatronOptions | None = None) -> Facts:  # noqa: ANN001
    """Derived sizes and, when the layout is valid, the memory ledger of `mapping` (built when first read:
    most rules never read it); `options` default to the problem's framework options
    (--use-tp-pp-dp-mapping there sets the mapping's rank order)."""
    opts = options if options is not None else problem.spec.framework.options
    if opts.use_tp_pp_dp_mapping and mapping.rank_order != RankOrder.dp_last:
        mapping = mapping.model_copy(update={"rank_order": RankOrder.dp_last})
    derived = derive(problem.model, mapping)
    builder = None
    if layout_is_valid(problem.model, mapping, derived.layout, problem.training.pipeline_schedule):
        def builder() -> MemoryLedger:
            return memory_ledger(problem.model, mapping, derived, problem.training,
                                 problem.hardware.gpu.usable_hbm_bytes, opts, problem_weight_format(problem, opts))
    return Facts(problem=problem, mapping=mapping, derived=derived, options=opts, ledger_builder=builder)


def evaluate(problem, mapping: Mapping, rules: tuple[Constraint, ...] | None = None,  # noqa: ANN001
             options: MegatronOptions | None = None) -> Evaluation:
    """Every active rule's verdict; rules that need a ledger are skipped (with the reason) without one."""
    facts = facts_for(problem, mapping, options)
    verdicts, skipped = [], []
    for rule in rules if rules is not None else active_constraints(problem):
        if rule.needs_ledger() and facts.ledger_builder is None:
            skipped.append((rule.id, "not evaluated: the layout does not cover the blocks with PP·VPP stages"))
            continue
        verdicts.append(rule.judge(facts))
    return Evaluation(facts=facts, verdicts=tuple(verdicts), skipped=tuple(skipped))


def holds(problem, mapping: Mapping, rules: tuple[Constraint, ...],  # noqa: ANN001
          options: MegatronOptions | None = None) -> bool:
    """evaluate(...).feasible without verdicts: whether every error rule's slack is >= 0 (a rule that needs
    a ledger the mapping lacks fails), stopping at the first that is not; what the search asks per row."""
    facts = facts_for(problem, mapping, options)
    for rule in rules:
        if rule.needs_ledger() and facts.ledger_builder is None:
            return False
        if rule.severity is not Severity.warning and not rule.slack(facts) >= 0:
            return False
    return True
