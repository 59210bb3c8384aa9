"""What parasol predicts Megatron-LM does with one launch line: accepted, or rejected at which stage
by which rules. Memory and the rules that are not Megatron checks are left out (Megatron judges
neither), so the verdict compares one to one with the real Megatron's (tests/test_oracle_cases.py)."""

from __future__ import annotations

from dataclasses import dataclass

from parasol.constraints.core.base import Family
from parasol.constraints.evaluate import evaluate
from parasol.constraints.rules.registry import active_constraints
from parasol.problems.inputs import explain_inputs
from parasol.problems.megatron.shell import SOURCE
from parasol.problems.megatron.stages import MegatronStage

STAGE_LETTERS = {stage: stage.value[0] for stage in MegatronStage if stage is not MegatronStage.not_megatron}
"""Stage letters as Megatron's launch order names them: A G I C B R."""


@dataclass(frozen=True)
class LaunchVerdict:
    """Parasol's Megatron verdict of one launch line: the broken Megatron rules and their stages."""

    broken: tuple[tuple[str, str], ...]
    """(rule id, stage letter) of every broken Megatron rule, in reporting order."""

    @property
    def rejected(self) -> bool:
        return bool(self.broken)

    def stages(self) -> set[str]:
        """Stage letters at which a broken rule sits."""
        return {stage for _, stage in self.broken}


def megatron_verdict(args: str, gpus: int, hardware: str = "h100-hgx") -> LaunchVerdict:
    """Judge `args` on `gpus` GPUs of `hardware` as `explain --megatron-args` does, keeping only Megatron's
    own rules (InputError propagates: exit 2)."""
    inputs = explain_inputs(None, (), (args, SOURCE), hardware=hardware, gpus=gpus)
    rules = tuple(r for r in active_constraints(inputs.problem)
                  if r.family is not Family.memory and r.citation.stage is not MegatronStage.not_megatron)
    ev = evaluate(inputs.problem, inputs.mapping, rules=rules)
    return LaunchVerdict(tuple((v.rule, STAGE_LETTERS[v.citation.stage]) for v in ev.violations))
