"""A problem's MoE routing on one mapping: the tokens of a routing domain, the expected load of every
expert under the problem's skew model (`contract.routing`), the capacity of each expert, and the skew
of the busiest EP rank, which sets the time of the expert GEMMs and of a flexible all-to-all
(seed 003 §4: the hot expert and the hot rank set the time; constraints/physics/routing.py has the formulas).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parasol.constraints.physics import routing
from parasol.problems.mapping import Mapping

if TYPE_CHECKING:
    from parasol.problems.loader import Problem


def skew_model(problem: Problem) -> routing.SkewModel:
    """The problem's routing skew as routing.SkewModel."""
    r = problem.spec.contract.routing
    if r.skew.value == "zipf":
        return routing.SkewModel("zipf", exponent=r.zipf_exponent)
    if r.skew.value == "histogram":
        return routing.SkewModel("histogram", weights=tuple(r.histogram))
    return routing.SkewModel("uniform")


def routing_tokens(mapping: Mapping) -> tuple[int, int]:
    """(tokens per rank b·S/(CP·TP), tokens per EP routing domain EP·ETP·that), rounded down to whole tokens."""
    per_rank = max(mapping.mbs * mapping.seq_len // (mapping.cp * mapping.tp), 1)
    return per_rank, per_rank * mapping.ep * mapping.expert_tp


def expert_loads(problem: Problem, mapping: Mapping) -> tuple[float, ...]:
    """Expected assignments per expert in one routing domain under the problem's skew model."""
    moe = problem.model.moe
    return routing.expert_loads(routing_tokens(mapping)[1], moe.top_k, moe.num_experts, skew_model(problem))


def domain_capacity(problem: Problem, mapping: Mapping) -> int:
    """Slots one expert has per routing domain: EP sources × C_src = ⌈CF·k·T_rank/E⌉ (Megatron sizes the
    buffer per source rank)."""
    moe = problem.model.moe
    per_rank = routing_tokens(mapping)[0]
    cap = routing.expert_capacity(per_rank, moe.top_k, moe.num_experts, problem.training.capacity_factor)
    return cap * mapping.ep * mapping.expert_tp


def hot_rank_skew(problem: Problem, mapping: Mapping) -> float:
    """Assignments the busiest EP rank computes over a balanced rank's k·T/EP (1.0 for a dense model,
    uniform routing, or EP not dividing the experts, which other rules reject). With a capacity factor
    an expert computes at most its capacity; the rest is dropped."""
    moe = problem.model.moe
    if moe is None or problem.spec.contract.routing.skew.value == "uniform" or moe.num_experts % mapping.ep:
        return 1.0
    loads = expert_loads(problem, mapping)
    if problem.training.capacity_factor is not None:
        cap = domain_capacity(problem, mapping)
        loads = tuple(min(x, cap) for x in loads)
    balanced = routing.assignments(routing_tokens(mapping)[1], moe.top_k) / mapping.ep
    return max(routing.rank_loads(loads, mapping.ep)) / balanced
