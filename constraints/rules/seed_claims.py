"""Seed claims pack: restrictions seed 000 states for the V4 path that the Megatron-LM code read for
parasol does not enforce. Each is its own rule citing the seed, so a problem can switch them on
(rule pack `seed-claims`) to plan as the seed says, or leave them off to plan as the code reads.

Seed 000 §先确定模型与实现, table 固定提交中的限制 (Megatron-LM ed9c2c8c, 2026-10-26): "当前只支持 static
CP，packed 路径尚不支持 deterministic mode". megatron-groups.md §3 found neither rejection in
dev@d48bd6be: that code supports dynamic CP, and the packed compressor only falls back to its eager
path under deterministic algorithms (csa_utils/fused_compressor.py:255-258). The seed's commit is
later than the one read, so the claims may hold there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parasol.constraints.core.base import Citation, Constraint, Facts, Family
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.model.architecture import DSV4Attention
from parasol.problems.schema import RulePack

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from parasol.constraints.core.decision_vars import DecisionVars
    from parasol.problems.loader import Problem

SEED_SECTION = "seed 000 §先确定模型与实现 (table 固定提交中的限制, Megatron-LM ed9c2c8c)"
NOT_FOUND = "Megatron-LM dev@d48bd6be was not found to enforce this (megatron-groups.md §3)"


class SeedClaim(Constraint):
    """Base of the pack: a V4-path claim of the seed, switchable per problem."""

    family = Family.feature
    pack = RulePack.seed_claims
    exact = True

    def applies(self, problem: Problem) -> bool:
        return isinstance(problem.model.attention, DSV4Attention)


class SeedStaticCPOnly(SeedClaim):
    """The seed: the V4 path supports static CP only, so dynamic context parallelism is rejected."""

    id = "seed-dsv4-static-cp-only"
    citation = Citation(f"{SEED_SECTION}: 当前只支持 static CP", MegatronStage.not_megatron)
    unit = "settings"
    summary = "seed claim: DSv4 -> not dynamic_context_parallel"

    def slack(self, f: Facts) -> float:
        return -1.0 if f.options.dynamic_context_parallel else 0.0

    def message(self, f: Facts) -> str:
        state = "on" if f.options.dynamic_context_parallel else "off"
        return (f"seed 000 says the V4 path supports static CP only; dynamic_context_parallel is {state}. "
                f"{NOT_FOUND}: dev supports dynamic CP.")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if v.options.dynamic_context_parallel:
            model.AddBoolOr([enforce.Not()])


class SeedPackedNoDeterministic(SeedClaim):
    """The seed: the packed path has no deterministic mode, so deterministic runs keep CP at 1 there."""

    id = "seed-dsv4-packed-no-deterministic"
    citation = Citation(f"{SEED_SECTION}: packed 路径尚不支持 deterministic mode", MegatronStage.not_megatron)
    unit = "CP"
    summary = "seed claim: DSv4, packed and CP > 1 -> not deterministic_mode"

    def _applies_to_run(self, deterministic: bool, packed: bool) -> bool:
        return deterministic and packed

    def in_force(self, f: Facts) -> bool:
        """Only deterministic runs on packed input keep CP at 1."""
        return self._applies_to_run(f.options.deterministic_mode, f.training.packed_sequences)

    def slack(self, f: Facts) -> float:
        if self._applies_to_run(f.options.deterministic_mode, f.training.packed_sequences):
            return float(1 - f.mapping.cp)
        return 0.0

    def message(self, f: Facts) -> str:
        return (f"seed 000 says the packed V4 path does not support deterministic mode (deterministic_mode "
                f"{f.options.deterministic_mode}, packed {f.training.packed_sequences}, CP = {f.mapping.cp}). "
                f"{NOT_FOUND}: only the fused THD compressor falls back to its eager path "
                "(csa_utils/fused_compressor.py:255-258).")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if self._applies_to_run(v.options.deterministic_mode, bool(v.consts["packed_sequences"])):
            model.Add(v.cp == 1).OnlyEnforceIf(enforce)


SEED_CLAIM_RULES: tuple[type[SeedClaim], ...] = (SeedStaticCPOnly, SeedPackedNoDeterministic)
