"""Interleaved (VPP) schedule rules, checked by Megatron at the first forward/backward (stage R).

With VPP > 1 the interleaved schedule runs the microbatches in groups of N contiguous microbatches
per virtual stage, N = --microbatch-group-size-per-virtual-pipeline-stage (default PP). It needs
PP <= N <= m, and the last group must be complete or at least PP long (m % N == 0 or m % N >= PP).
The non-interleaved 1F1B schedule accepts any m >= 1, so both rules judge VPP > 1 only.

The rules read a whole number of microbatches m = GBS / (MBS·D_a). When D_a or m is not whole the
batch rules (constraints/rules/batch.py) report it and Megatron stops at stage G before the schedule runs,
so these rules hold vacuously there. Both sides compute the verdict from the same integers: Python
for one mapping, CP-SAT as a table over (TP·PP·CP, PP, MBS, VPP) rows built by the same function.

Sources: Megatron-LM megatron/core/pipeline_parallel/schedules.py:1157-1180 and
model_parallel_config.py:567-568 (N defaults to PP); seed 000 §PP 和 microbatch (B with VPP: 8 > 4).
"""

from __future__ import annotations

from collections import abc
from collections.abc import Callable
from itertools import product
from typing import TYPE_CHECKING

from parasol.constraints.core.base import Citation, Constraint, Facts, Family, Severity
from parasol.problems.megatron.stages import MegatronStage

if TYPE_CHECKING:
    from parasol.problems.loader import Problem

SCHEDULE_SOURCE = "Megatron-LM megatron/core/pipeline_parallel/schedules.py"


def whole_microbatches(gpus: int, gbs: int, model_size: int, mbs: int) -> int | None:
    """m = GBS / (MBS·N/(TP·PP·CP)) when D_a and m are whole numbers, else None."""
    if gpus % model_size:
        return None
    per_step = mbs * (gpus // model_size)
    return gbs // per_step if gbs % per_step == 0 else None


def group_size(pp: int, option: int | None) -> int:
    """N, the contiguous microbatches per virtual stage: the flag, or PP by default."""
    return option if option is not None else pp


def group_range_slack(pp: int, vpp: int, m: int | None, option: int | None) -> int:
    """min(N − PP, m − N) in microbatches when interleaved with whole m; 0 otherwise (rule idle)."""
    if vpp == 1 or m is None:
        return 0
    n = group_size(pp, option)
    return min(n - pp, m - n)


def final_group_slack(pp: int, vpp: int, m: int | None, option: int | None) -> int:
    """0 when m % N is 0 or >= PP; else −(PP − m % N), the microbatches the last group lacks."""
    if vpp == 1 or m is None:
        return 0
    rem = m % group_size(pp, option)
    return 0 if rem == 0 or rem >= pp else rem - pp


def _facts_numbers(f: Facts) -> tuple[int, int, int | None, int | None]:
    """(PP, VPP, whole m or None, N flag) of one mapping."""
    m = f.mapping
    micro = whole_microbatches(m.gpus, m.gbs, m.tp * m.pp * m.cp, m.mbs)
    return m.pp, m.vpp, micro, f.options.microbatch_group_size_per_vp_stage


class _ScheduleRule(Constraint):
    """Shared CP-SAT posting: allow the (TP·PP·CP, PP, MBS, VPP) rows whose slack is >= 0; `row_slack`
    (PP, VPP, whole m or None, N flag) -> slack is the rule itself, read by both sides."""

    family = Family.pipeline
    unit = "microbatches"

    row_slack: Callable[[int, int, int | None, int | None], int]

    def slack(self, f: Facts) -> float:
        return float(self.row_slack(*_facts_numbers(f)))

    def degree_verdict(self, problem: Problem, degrees: abc.Mapping[str, int]) -> bool:
        """The rule reads only TP·PP·CP, PP, MBS and VPP of a mapping (and the problem's GPUs, batch and N flag)."""
        micro = whole_microbatches(problem.gpus, problem.training.global_batch,
                                   degrees["tp"] * degrees["pp"] * degrees["cp"], degrees["mbs"])
        option = problem.spec.framework.options.microbatch_group_size_per_vp_stage
        return self.severity is Severity.warning or self.row_slack(degrees["pp"], degrees["vpp"], micro, option) >= 0

    def in_force(self, f: Facts) -> bool:
        """Only an interleaved schedule with a whole number of microbatches forms groups."""
        _, vpp, micro, _ = _facts_numbers(f)
        return vpp > 1 and micro is not None

    def post(self, model, v, enforce) -> None:
        """Table over the reachable products TP·PP·CP with PP, MBS and VPP (gpus, gbs are constants)."""
        option = v.options.microbatch_group_size_per_vp_stage
        pairs = sorted({(t * p * c, p) for t, p, c in product(v.domain_values("tp"), v.domain_values("pp"),
                                                               v.domain_values("cp"))})
        rows = [(size, p, b, k) for (size, p), b, k in product(pairs, v.domain_values("mbs"), v.domain_values("vpp"))
                if self.row_slack(p, k, whole_microbatches(v.gpus, v.gbs, size, b), option) >= 0]
        if not rows:
            model.AddBoolOr([enforce.Not()])
            return
        columns = [v.product("tp", "pp", "cp"), v.pp, v.mbs, v.vpp]
        model.AddAllowedAssignments(columns, rows).OnlyEnforceIf(enforce)


class VppMicrobatchGroupRange(_ScheduleRule):
    """Interleaved schedule: PP <= N <= m (with the default N = PP: at least PP microbatches)."""

    id = "vpp-microbatch-group-range"
    citation = Citation(f"{SCHEDULE_SOURCE}:1157-1168; megatron/core/model_parallel_config.py:567-568; "
                        "seed 000 §PP 和 microbatch", MegatronStage.runtime)
    summary = "VPP > 1: PP <= microbatch group N (default PP) <= num_microbatches"

    row_slack = staticmethod(group_range_slack)

    def tight_at_zero(self, f: Facts) -> bool:
        """With the default N = PP the half N >= PP holds at 0 by definition, so slack 0 is at the limit
        only when PP == m; a given N is an inequality on both sides."""
        pp, _, micro, option = _facts_numbers(f)
        return option is not None or micro == pp

    def message(self, f: Facts) -> str:
        pp, vpp, m, option = _facts_numbers(f)
        if vpp == 1:
            return "not interleaved (VPP 1): the 1F1B schedule accepts any number of microbatches"
        if m is None:
            return "the number of microbatches is not whole (see the batch rules); the schedule is never reached"
        n = group_size(pp, option)
        name = f"N = PP {pp}" if option is None else f"N = {n}"
        if n < pp:
            verdict = f"{name} < PP {pp}"
        elif n > m:
            verdict = f"{name} > {m} microbatches"
        else:
            verdict = f"PP {pp} <= {name} <= {m} microbatches holds"
        return (f"interleaved schedule (VPP {vpp}) needs PP <= N <= m: {verdict} (the number of contiguous "
                f"micro-batches in a virtual pipeline stage should range in [PP={pp}, M={m}])")


class VppFinalGroupRemainder(_ScheduleRule):
    """Interleaved schedule: the last microbatch group is complete or at least PP long."""

    id = "vpp-final-group-remainder"
    citation = Citation(f"{SCHEDULE_SOURCE}:1170-1180", MegatronStage.runtime)
    summary = "VPP > 1: num_microbatches % N == 0 or >= PP"

    row_slack = staticmethod(final_group_slack)
    exact = True

    def message(self, f: Facts) -> str:
        pp, vpp, m, option = _facts_numbers(f)
        if vpp == 1:
            return "not interleaved (VPP 1): no microbatch groups"
        if m is None:
            return "the number of microbatches is not whole (see the batch rules); the schedule is never reached"
        n = group_size(pp, option)
        rem = m % n
        return (f"the remainder of M ({m} microbatches) divided by N ({n} per virtual-stage group) should be 0 "
                f"or >= PP ({pp}), but it is {rem}"
                + ("" if rem == 0 or rem >= pp else "; a short last group adds dependency bubbles"))
