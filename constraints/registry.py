"""Every built-in rule, in a stable order, and the selection that applies to one problem."""

from __future__ import annotations

from parasol.constraints.base import Constraint
from parasol.constraints.batch import EvalGbsDivisible, GbsDivisibleByMbsDp
from parasol.constraints.capacity import MemoryFitsHBM
from parasol.constraints.divisibility import (
    HeadsDivisibleByTP,
    QueryGroupsVsTP,
    WorldDivisibleByExpertGrid,
    WorldDivisibleByModelSize,
)
from parasol.constraints.moe import EPRequiresExperts, ExpertsDivisibleByEP
from parasol.constraints.pipeline import LayoutCoversBlocks


def builtin_constraints() -> tuple[Constraint, ...]:
    """All built-in rules, one instance each, in reporting order (Megatron's stage order first)."""
    return (
        WorldDivisibleByModelSize(),
        WorldDivisibleByExpertGrid(),
        HeadsDivisibleByTP(),
        QueryGroupsVsTP(),
        EvalGbsDivisible(),
        GbsDivisibleByMbsDp(),
        ExpertsDivisibleByEP(),
        EPRequiresExperts(),
        LayoutCoversBlocks(),
        MemoryFitsHBM(),
    )


def active_constraints(problem) -> tuple[Constraint, ...]:  # noqa: ANN001 - Problem
    """The rules that apply to `problem` (its model kind and rule packs)."""
    return tuple(c for c in builtin_constraints() if c.active(problem))
