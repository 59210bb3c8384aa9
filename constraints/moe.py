"""MoE rules: experts spread evenly over EP; EP needs experts.

Sources: ../shared/reference/megatron-rules.yaml (Megatron-LM main@d98e8a64).
"""

from __future__ import annotations

from parasol.constraints.base import Citation, Constraint, Facts, Family, MegatronStage, remainder_slack


class ExpertsDivisibleByEP(Constraint):
    """Every EP rank holds the same number of routed experts."""

    id = "experts-divisible-by-ep"
    family = Family.moe
    citation = Citation("Megatron-LM megatron/training/arguments.py (num_experts % expert_model_parallel_size); "
                        "megatron/core/transformer/moe/moe_layer.py", MegatronStage.arguments)
    unit = "experts"
    summary = "num_experts % EP == 0"

    def applies(self, problem) -> bool:
        return problem.model.moe is not None

    def slack(self, f: Facts) -> float:
        return remainder_slack(f.model.moe.num_experts, f.mapping.ep)

    def message(self, f: Facts) -> str:
        return (f"number of experts ({f.model.moe.num_experts}) is not a multiple of expert model parallel "
                f"size ({f.mapping.ep})")

    def post(self, model, v, enforce) -> None:
        v.divides(v.ep, v.consts["num_experts"], "experts_ep", enforce)


class EPRequiresExperts(Constraint):
    """A dense model cannot use expert parallelism."""

    id = "ep-requires-experts"
    family = Family.moe
    citation = Citation("Megatron-LM megatron/training/arguments.py (EP > 1 requires --num-experts)",
                        MegatronStage.arguments)
    unit = "EP"
    summary = "EP > 1 -> the model has routed experts"

    def applies(self, problem) -> bool:
        return problem.model.moe is None

    def slack(self, f: Facts) -> float:
        return float(1 - f.mapping.ep)

    def message(self, f: Facts) -> str:
        return f"EP = {f.mapping.ep} but the model has no routed experts (dense model)"

    def post(self, model, v, enforce) -> None:
        model.Add(v.ep == 1).OnlyEnforceIf(enforce)
