"""DualPipe and DualPipeV requirements (training.pipeline_schedule): parasol rules, not Megatron's, since
Megatron-LM has no such schedule; they judge the mapping so that explain gives a verdict, not an input error.

DualPipe runs PP ranks, rank s holding stage s and its mirror PP−1−s (parasol: VPP 1), and asserts an even
number of ranks and an even number of microbatches m >= 2·PP. DualPipeV holds two chunks per rank in a V
(parasol: VPP 2) and asserts m >= 2·PP. m = GBS / (MBS·D_a) is read only when whole; otherwise the batch
rules say why Megatron stops first and these rules hold vacuously.

Sources: deepseek-ai/DualPipe@3da1bbea dualpipe/dualpipe.py:14,332-333, examples/example_dualpipe.py:138,
dualpipe/dualpipev.py:14,318;
parasol constraints/physics/memory.py rank_holdings (which stages a rank holds under each schedule).
"""

from __future__ import annotations

from parasol.constraints.core.base import Citation, Constraint, Facts, Family
from parasol.constraints.rules.schedule import _facts_numbers, _ScheduleRule

DUALPIPE = "deepseek-ai/DualPipe@3da1bbea dualpipe"


class _ForSchedule:
    """Mixin: the rule applies to problems whose training.pipeline_schedule is `schedule`."""

    pack = None
    schedule: str

    def applies(self, problem) -> bool:  # noqa: ANN001 - Problem
        return problem.training.pipeline_schedule == self.schedule


class DualPipeEvenPP(_ForSchedule, Constraint):
    """DualPipe pairs rank s with its mirror PP−1−s: an even number of pipeline ranks."""

    id = "dualpipe-even-pp"
    schedule = "dualpipe"
    family = Family.pipeline
    citation = Citation(f"{DUALPIPE}/dualpipe.py:332")
    unit = "pipeline stages"
    summary = "DualPipe: PP % 2 == 0"
    exact = True

    def slack(self, f: Facts) -> float:
        return -float(f.mapping.pp % 2)

    def message(self, f: Facts) -> str:
        return f"DualPipe needs an even number of pipeline ranks (num_ranks % 2 == 0); PP is {f.mapping.pp}"

    def post(self, model, v, enforce) -> None:
        v.divides(2, v.pp, "dualpipe_pp", enforce)


class DualPipeStagesPerRank(_ForSchedule, Constraint):
    """DualPipe: one stage per rank plus its implied mirror, so VPP 1 in parasol's mapping."""

    id = "dualpipe-stages-per-rank"
    schedule = "dualpipe"
    family = Family.pipeline
    citation = Citation(f"{DUALPIPE}/dualpipe.py:14 and examples/example_dualpipe.py:138 (stage s and its mirror "
                        "PP−1−s); parasol constraints/physics/memory.py rank_holdings")
    unit = "virtual stages"
    summary = "DualPipe: VPP == 1 (the mirrored stage is implied)"
    exact = True
    stages = 1

    def slack(self, f: Facts) -> float:
        return -float(abs(f.mapping.vpp - self.stages))

    def message(self, f: Facts) -> str:
        return f"{self.summary}; the mapping has VPP {f.mapping.vpp}"

    def post(self, model, v, enforce) -> None:
        model.Add(v.vpp == self.stages).OnlyEnforceIf(enforce)


class DualPipeVStagesPerRank(DualPipeStagesPerRank):
    """DualPipeV: two chunks per rank in a V (its modules are a pair), so VPP 2."""

    id = "dualpipev-stages-per-rank"
    schedule = "dualpipev"
    citation = Citation(f"{DUALPIPE}/dualpipev.py:14; parasol constraints/physics/memory.py rank_holdings")
    summary = "DualPipeV: VPP == 2 (two chunks per rank)"
    stages = 2


def dualpipe_microbatch_slack(pp: int, vpp: int, m: int | None, option: int | None) -> int:
    """m − 2·PP for an even whole m, at most −1 for an odd one; 0 when m is not whole."""
    if m is None:
        return 0
    return m - 2 * pp if m % 2 == 0 else min(m - 2 * pp, -1)


def dualpipev_microbatch_slack(pp: int, vpp: int, m: int | None, option: int | None) -> int:
    """m − 2·PP for whole m; 0 when m is not whole."""
    return 0 if m is None else m - 2 * pp


class DualPipeMicrobatches(_ForSchedule, _ScheduleRule):
    """DualPipe feeds half of the microbatches from each end: an even m >= 2·PP."""

    id = "dualpipe-microbatches"
    schedule = "dualpipe"
    citation = Citation(f"{DUALPIPE}/dualpipe.py:333")
    summary = "DualPipe: num_microbatches even and >= 2·PP"
    row_slack = staticmethod(dualpipe_microbatch_slack)
    need = "an even number of microbatches"

    def in_force(self, f: Facts) -> bool:
        """Only a whole number of microbatches reaches the schedule."""
        return _facts_numbers(f)[2] is not None

    def message(self, f: Facts) -> str:
        pp, _, m, _ = _facts_numbers(f)
        if m is None:
            return "the number of microbatches is not whole (see the batch rules); the schedule is never reached"
        return f"{self.schedule} needs {self.need} >= 2·PP = {2 * pp}; it has {m}"


class DualPipeVMicrobatches(DualPipeMicrobatches):
    """DualPipeV needs m >= 2·PP."""

    id = "dualpipev-microbatches"
    schedule = "dualpipev"
    citation = Citation(f"{DUALPIPE}/dualpipev.py:318")
    summary = "DualPipeV: num_microbatches >= 2·PP"
    row_slack = staticmethod(dualpipev_microbatch_slack)
    need = "a number of microbatches"


DUALPIPE_RULES = (DualPipeEvenPP, DualPipeStagesPerRank, DualPipeVStagesPerRank, DualPipeMicrobatches,
                  DualPipeVMicrobatches)
