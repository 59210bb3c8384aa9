"""Divisibility rules: the world and expert grids, attention heads and query groups versus TP, the
hidden size versus the heads, and the widths every tensor-parallel linear layer splits.

Sources: reference/megatron-rules.yaml (Megatron-LM main@d98e8a64). The rank-order and
distributed-optimizer rules of the same yaml category live in constraints/rules/feature.py.
"""

from __future__ import annotations

from parasol.constraints.core.base import Citation, Constraint, Facts, Family, remainder_slack
from parasol.constraints.core.consts import model_consts
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.model.architecture import GQAAttention


class WorldDivisibleByModelSize(Constraint):
    """N must be a multiple of TP·PP·CP (so that D_a is whole)."""

    id = "world-divisible-by-model-size"
    family = Family.divisibility
    citation = Citation("Megatron-LM megatron/training/arguments.py:424-434; megatron/core/parallel_state.py:813-823",
                        MegatronStage.arguments)
    unit = "GPUs"
    summary = "world size % (TP·PP·CP) == 0"
    exact = True

    def slack(self, f: Facts) -> float:
        m = f.mapping
        return remainder_slack(m.gpus, m.tp * m.pp * m.cp)

    def message(self, f: Facts) -> str:
        m = f.mapping
        size = m.tp * m.pp * m.cp
        return (f"world size ({m.gpus}) is not divisible by total_model_size (total_model_size={size}): "
                f"TP·PP·CP = {m.tp}·{m.pp}·{m.cp}")

    def post(self, model, v, enforce) -> None:
        v.require_dp_attn(enforce)


class WorldDivisibleByExpertGrid(Constraint):
    """N must be a multiple of ETP·EP·PP (so that D_e is whole); checked only when groups are built."""

    id = "world-divisible-by-expert-grid"
    family = Family.divisibility
    citation = Citation("Megatron-LM megatron/core/parallel_state.py:870-884", MegatronStage.process_groups)
    unit = "GPUs"
    summary = "world size % (ETP·EP·PP) == 0"
    exact = True

    def slack(self, f: Facts) -> float:
        m = f.mapping
        return remainder_slack(m.gpus, m.expert_tp * m.ep * m.pp)

    def message(self, f: Facts) -> str:
        m = f.mapping
        size = m.expert_tp * m.ep * m.pp
        return (f"world_size ({m.gpus}) is not divisible by expert_tensor_model_pipeline_parallel size ({size}): "
                f"ETP·EP·PP = {m.expert_tp}·{m.ep}·{m.pp}")

    def post(self, model, v, enforce) -> None:
        v.require_dp_expert(enforce)


class HeadsDivisibleByTP(Constraint):
    """Attention heads split evenly over TP ranks."""

    id = "heads-divisible-by-tp"
    family = Family.divisibility
    citation = Citation("Megatron-LM megatron/core/transformer/transformer_config.py:1446-1450", MegatronStage.config)
    unit = "heads"
    summary = "num_attention_heads % TP == 0"
    exact = True

    def slack(self, f: Facts) -> float:
        return remainder_slack(f.model.attention.num_heads, f.mapping.tp)

    def message(self, f: Facts) -> str:
        return (f"num_attention_heads ({f.model.attention.num_heads}) must be a multiple of "
                f"tensor_model_parallel_size ({f.mapping.tp}).")

    def post(self, model, v, enforce) -> None:
        v.divides(v.tp, v.consts["num_heads"], "heads_tp", enforce)


class QueryGroupsVsTP(Constraint):
    """Query groups must be a multiple or a divisor of TP (groups are replicated when TP > groups)."""

    id = "query-groups-vs-tp"
    family = Family.divisibility
    citation = Citation("Megatron-LM megatron/core/transformer/transformer_config.py:1458-1468", MegatronStage.config)
    unit = "query groups"
    summary = "num_query_groups % TP == 0 or TP % num_query_groups == 0"
    exact = True

    def applies(self, problem) -> bool:
        att = problem.model.attention
        return isinstance(att, GQAAttention) and att.num_kv_heads != att.num_heads

    def slack(self, f: Facts) -> float:
        groups, tp = f.model.attention.num_kv_heads, f.mapping.tp
        return 0.0 if groups % tp == 0 or tp % groups == 0 else -float(min(groups % tp, tp % groups))

    def message(self, f: Facts) -> str:
        return (f"num_query_groups ({f.model.attention.num_kv_heads}) must be a multiple or divisor of "
                f"tensor_model_parallel_size ({f.mapping.tp}).")

    def post(self, model, v, enforce) -> None:
        groups = v.consts["num_query_groups"]
        allowed = [t for t in range(1, v.upper("tp") + 1) if groups % t == 0 or t % groups == 0]
        model.AddAllowedAssignments([v.tp], [(t,) for t in allowed]).OnlyEnforceIf(enforce)


class QueryGroupsDivideHeads(Constraint):
    """Every query group holds the same number of query heads. Megatron's validation accepts any group
    count; the model build fails: TE's DotProductAttention asserts heads % groups == 0, and the local
    path divides heads by groups when groups < TP (utils.divide) or reshapes QKV per group in forward."""

    id = "query-groups-divide-heads"
    family = Family.divisibility
    citation = Citation("Megatron-LM megatron/core/transformer/attention.py:349-365,1843-1880 "
                        "(Transformer Engine DotProductAttention: num_attention_heads % num_gqa_groups == 0)",
                        MegatronStage.model_build)
    unit = "heads"
    summary = "num_attention_heads % num_query_groups == 0"
    exact = True

    def applies(self, problem) -> bool:
        return isinstance(problem.model.attention, GQAAttention)

    def slack(self, f: Facts) -> float:
        return remainder_slack(f.model.attention.num_heads, f.model.attention.num_kv_heads)

    def message(self, f: Facts) -> str:
        heads, groups = f.model.attention.num_heads, f.model.attention.num_kv_heads
        return (f"num_attention_heads ({heads}) is not divisible by num_query_groups ({groups}): every query "
                "group must hold the same number of heads (the attention layer cannot be built)")

    def post(self, model, v, enforce) -> None:
        if v.consts["num_heads"] % v.consts["num_query_groups"]:
            model.AddBoolOr([enforce.Not()])


class HiddenDivisibleByHeads(Constraint):
    """Without --kv-channels Megatron sets kv_channels = hidden / heads, which must be whole. A model whose heads
    are not that wide is launched with --kv-channels (consts.kv_channels_implied), so there the rule is not in
    force."""

    id = "hidden-divisible-by-heads"
    family = Family.divisibility
    citation = Citation("Megatron-LM megatron/training/arguments.py:1331-1333", MegatronStage.arguments)
    unit = "hidden units"
    summary = "kv_channels unset -> hidden_size % num_attention_heads == 0"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only without --kv-channels, given or implied by the model's head width, does Megatron derive
        kv_channels = hidden / heads."""
        return f.options.kv_channels is None and not model_consts(f.problem)["kv_channels_implied"]

    def slack(self, f: Facts) -> float:
        if not self.in_force(f):
            return 0.0
        return remainder_slack(f.model.hidden_size, f.model.attention.num_heads)

    def message(self, f: Facts) -> str:
        hidden, heads = f.model.hidden_size, f.model.attention.num_heads
        return (f"hidden_size ({hidden}) is not divisible by num_attention_heads ({heads}) and --kv-channels is "
                "not set (Megatron asserts hidden_size % num_attention_heads == 0)")

    def post(self, model, v, enforce) -> None:
        implied = v.consts["kv_channels_implied"]
        if v.options.kv_channels is None and not implied and v.consts["hidden_size"] % v.consts["num_heads"]:
            model.AddBoolOr([enforce.Not()])


# (const name, what it is, degree that splits it): column/row-parallel widths (utils.divide).
SHARDED_WIDTHS = (
    ("ffn_hidden_size", "dense MLP ffn_hidden_size", "tp"),
    ("attn_proj_width", "attention output projection input (heads x v_head_dim)", "tp"),
    ("shared_ffn_hidden_size", "shared-expert ffn_hidden_size", "tp"),
    ("expert_ffn_hidden_size", "routed-expert ffn_hidden_size", "etp"),
    ("mamba_heads", "Mamba-2 heads", "tp"),
    ("mamba_groups", "Mamba-2 groups", "tp"),
    ("gdn_key_heads", "gated DeltaNet key heads", "tp"),
    ("gdn_value_heads", "gated DeltaNet value heads", "tp"),
)


def sharded_widths(consts: dict[str, int]) -> list[tuple[str, str, int, str]]:
    """(const, label, width, degree) for every tensor-parallel width the model has (0 = absent)."""
    return [(key, label, consts[key], degree) for key, label, degree in SHARDED_WIDTHS if consts[key]]


class TPShardedLinearDims(Constraint):
    """Every tensor-parallel linear splits its width evenly: dense and shared-expert MLPs and the attention
    projection over TP, the routed experts' grouped linears over ETP, and a Mamba-2 or gated DeltaNet
    mixer's heads (and Mamba groups) over TP."""

    id = "tp-sharded-linear-dims"
    family = Family.divisibility
    citation = Citation("Megatron-LM megatron/core/utils.py:590-599 via megatron/core/tensor_parallel/layers.py:"
                        "1038,1408 and megatron/core/extensions/transformer_engine.py:1265-1267,2455-2472; "
                        "megatron/core/ssm/mamba_mixer.py:262,270; megatron/core/ssm/gated_delta_net/common.py:"
                        "183-187", MegatronStage.model_build)
    unit = "columns"
    summary = "ffn, shared ffn, heads x v_dim % TP == 0; expert ffn % ETP == 0"
    exact = True

    def _degrees(self, f: Facts) -> dict[str, int]:
        return {"tp": f.mapping.tp, "etp": f.mapping.expert_tp}

    def slack(self, f: Facts) -> float:
        degrees = self._degrees(f)
        return min((remainder_slack(width, degrees[d]) for _, _, width, d in sharded_widths(model_consts(f.problem))),
                   default=0.0)

    def message(self, f: Facts) -> str:
        degrees = self._degrees(f)
        bad = [f"{label} {width} is not divisible by {d.upper()} {degrees[d]}"
               for _, label, width, d in sharded_widths(model_consts(f.problem)) if width % degrees[d]]
        return "; ".join(bad) if bad else "every tensor-parallel width divides evenly"

    def post(self, model, v, enforce) -> None:
        for key, _, width, degree in sharded_widths(v.consts):
            v.divides(v.degree[degree], width, f"{key}_{degree}", enforce)
