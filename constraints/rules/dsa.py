"""Rules of DeepSeek sparse attention (DSA, DeepSeek-V3.2: MLA with a lightning indexer; Megatron-LM's
--experimental-attention-variant dsa), main@d98e8a64 transformer_config.py. They judge models whose MLA carries an
indexer (problems/model/architecture.py DSAIndexer). Not modelled: RoPE fusion, which DSA refuses (3163), since
parasol does not carry --no-rope-fusion; DSA's own memory and time, which a warning says (dsa-scores-not-priced)."""

from __future__ import annotations

from parasol.constraints.core.base import CONFIG, Citation, Constraint, Facts, Family
from parasol.constraints.rules.feature import SettingsRule, WarningRule
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.model.architecture import MLAAttention
from parasol.problems.options import MegatronOptions

DSA = "Megatron-LM megatron/core/transformer/experimental_attention_variant/dsa.py"


def has_dsa(problem) -> bool:  # noqa: ANN001 - Problem
    """Whether the model's attention is DSA: MLA with an indexer."""
    attention = problem.model.attention
    return isinstance(attention, MLAAttention) and attention.indexer is not None


class DsaNoLinearBias(SettingsRule):
    """DSA runs on the absorbed MLA attention, which has no linear biases."""

    id = "dsa-no-linear-bias"
    citation = Citation(f"{CONFIG}:1510-1516", MegatronStage.config)
    summary = "DSA -> add_bias_linear False"

    def applies(self, problem) -> bool:  # noqa: ANN001 - Problem
        return has_dsa(problem)

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.add_bias_linear:
            return ["DSA uses AbsorbedMLASelfAttention, which requires add_bias_linear=False. Disable linear bias "
                    "for DSA configs."]
        return []


class DsaCpAllgather(Constraint):
    """DSA's context parallelism gathers the whole sequence's keys for the indexer: only the allgather CP
    communication runs it."""

    id = "dsa-cp-allgather-only"
    family = Family.context
    citation = Citation(f"{CONFIG}:3162-3175", MegatronStage.config)
    unit = "settings"
    summary = "DSA and CP > 1 -> cp_comm_type allgather"
    exact = True
    reads_choices = True

    def applies(self, problem) -> bool:  # noqa: ANN001 - Problem
        return has_dsa(problem)

    def in_force(self, f: Facts) -> bool:
        """Only with context parallelism."""
        return f.mapping.cp > 1

    def slack(self, f: Facts) -> float:
        return -1.0 if f.mapping.cp > 1 and f.options.cp_comm_type != "allgather" else 0.0

    def message(self, f: Facts) -> str:
        return (f"DSAttention context parallelism currently supports cp_comm_type=allgather only (CP {f.mapping.cp}, "
                f"cp_comm_type {f.options.cp_comm_type})")

    def post(self, model, v, enforce) -> None:
        if v.options.cp_comm_type != "allgather":
            model.Add(v.cp == 1).OnlyEnforceIf(enforce)


class DsaScoresNotPriced(WarningRule):
    """parasol prices DSA's attention as fused dense MLA. Megatron's DSAttention runs its PyTorch path with
    --dsa-kernel-backend none (TransformerConfig's default, transformer_config.py:340) and wherever a fused kernel
    declines the shape: that path holds FP32 scores of heads × sequence × sequence per layer (dsa.py:59-111,
    146-171), as the indexer does its own (517-562), none of which the memory ledger holds."""

    id = "dsa-scores-not-priced"
    citation = Citation(f"{DSA}:59-111,146-171,517-562", MegatronStage.runtime)
    summary = "DSA -> its score matrices and sparse attention are not priced (warning)"

    def applies(self, problem) -> bool:  # noqa: ANN001 - Problem
        return has_dsa(problem)

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        return ["DSA's attention is priced as fused dense MLA; Megatron's unfused DSAttention path (--dsa-kernel-backend "
                "none, its default, or a shape the fused kernels decline) holds FP32 scores of heads x sequence x "
                "sequence per layer that the memory ledger does not: leave headroom or run a fused backend."]
