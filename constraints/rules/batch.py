"""Batch arithmetic: GBS = MBS·D_a·m with m a whole number >= 1 (CP and EP add no samples).

Sources: reference/megatron-rules.yaml (gbs-divisible-by-mbs-dp, num-microbatches,
eval-gbs-divisible); seed 000 §PP 和 microbatch (B = b·D_a·m).
"""

from __future__ import annotations

from parasol.constraints.core.base import (
    Citation,
    Constraint,
    Facts,
    Family,
    is_whole,
    remainder_slack,
)
from parasol.problems.megatron.stages import MegatronStage


class GbsDivisibleByMbsDp(Constraint):
    """The global batch splits into whole microbatches per attention data-parallel rank."""

    id = "gbs-divisible-by-mbs-dp"
    family = Family.batch
    citation = Citation("Megatron-LM megatron/core/num_microbatches_calculator.py:367-388; "
                        "megatron/training/global_vars.py:148-157", MegatronStage.global_vars)
    unit = "sequences"
    summary = "GBS % (MBS·D_a) == 0"
    exact = True

    def slack(self, f: Facts) -> float:
        dp = f.derived.dp_attn
        if not is_whole(dp):
            return -float(f.mapping.gbs)
        return remainder_slack(f.mapping.gbs, f.mapping.mbs * int(dp))

    def message(self, f: Facts) -> str:
        m, dp = f.mapping, f.derived.dp_attn
        if not is_whole(dp):
            return "global batch cannot be split: D_a is not a whole number (world size not divisible by TP·PP·CP)"
        return (f"global batch size ({m.gbs}) is not divisible by micro batch size ({m.mbs}) times data "
                f"parallel size ({int(dp)}) = {m.mbs * int(dp)}")

    def post(self, model, v, enforce) -> None:
        v.require_microbatches(enforce)


class EvalGbsDivisible(GbsDivisibleByMbsDp):
    """The same arithmetic for the evaluation batch, which defaults to GBS and is checked first."""

    id = "eval-gbs-divisible"
    citation = Citation("Megatron-LM megatron/training/arguments.py:707-720 (eval_global_batch_size defaults "
                        "to global_batch_size)", MegatronStage.arguments)
    summary = "eval GBS (default GBS) % (eval MBS·D_a) == 0"

    def message(self, f: Facts) -> str:
        m, dp = f.mapping, f.derived.dp_attn
        if not is_whole(dp):
            return "eval batch cannot be split: D_a is not a whole number"
        return (f"eval_global_batch_size ({m.gbs}) must be divisible by eval_micro_batch_size ({m.mbs}) * "
                f"data_parallel_size ({int(dp)}) * gtp_weight_remat_size (1)")


class NumMicrobatches(Constraint):
    """Each data-parallel rank runs at least one microbatch: m = GBS / (MBS·D_a) >= 1."""

    id = "num-microbatches"
    family = Family.batch
    citation = Citation("Megatron-LM megatron/core/num_microbatches_calculator.py:388-391", MegatronStage.global_vars)
    unit = "microbatches"
    summary = "GBS / (MBS·D_a) >= 1"

    def slack(self, f: Facts) -> float:
        return float(f.derived.num_microbatches) - 1.0

    def message(self, f: Facts) -> str:
        m, micro = f.mapping, f.derived.num_microbatches
        shown = int(micro) if is_whole(micro) else round(float(micro), 3)
        return (f"number of microbatches should be at least 1, got {shown} (global batch {m.gbs} over micro batch "
                f"{m.mbs} times data parallel size {float(f.derived.dp_attn):g})")

    def post(self, model, v, enforce) -> None:
        """GBS·TP·PP·CP >= MBS·N: the same inequality with D_a = N/(TP·PP·CP) multiplied out."""
        model.Add(v.gbs * v.product("tp", "pp", "cp") >= v.gpus * v.mbs).OnlyEnforceIf(enforce)
