"""The problem and mapping numbers rules read on both sides: Python from Facts, CP-SAT from
DecisionVars.consts (model sizes, attention kind, training switches, selective-recompute modules, the
DeepSeek-V4 pack's numbers, and the numbers of one mapping's cut and rank order)."""

from __future__ import annotations

from parasol.constraints.core.base import Facts
from parasol.constraints.physics.memory import megatron_param_gather
from parasol.hardware.gpu import compute_capability
from parasol.problems.loader import Problem
from parasol.problems.mapping import RankOrder
from parasol.problems.memo import memoised
from parasol.problems.model.architecture import (
    Activation,
    DSV4Attention,
    GQAAttention,
    MLAAttention,
    ModelArchitecture,
    window_rows,
)
from parasol.problems.schema import RECOMPUTE_MODULES, Optimizer, Precision


def _attention_consts(attention) -> dict[str, int]:  # noqa: ANN001 - Attention
    """Heads, query groups and the width of the attention output projection's input (heads·v_dim)."""
    heads = attention.num_heads
    if isinstance(attention, MLAAttention):
        return {"num_heads": heads, "num_query_groups": heads, "attn_proj_width": heads * attention.v_head_dim}
    groups = attention.num_kv_heads if isinstance(attention, GQAAttention) else heads
    return {"num_heads": heads, "num_query_groups": groups, "attn_proj_width": heads * attention.head_dim}


def kv_channels_implied(model) -> bool:  # noqa: ANN001 - ModelArchitecture
    """Whether the model can only be launched with --kv-channels: its heads are not hidden / heads wide (what
    Megatron derives without the flag, arguments.py:1331-1333), as GLM-4.5's 96 heads of 128 on a 5,120 hidden
    size or Qwen3-235B's 64 of 128 on 4,096. MLA sets its own head widths."""
    attention = model.attention
    return not isinstance(attention, MLAAttention) and attention.head_dim != model.hidden_size // attention.num_heads


def _mixer_consts(model) -> dict[str, int]:  # noqa: ANN001 - ModelArchitecture
    """Heads (and Mamba groups) of the Mamba-2 and gated DeltaNet mixers the model's blocks use (0: none)."""
    mixers = {b.mixer.value for b in model.blocks}
    mamba = model.mamba if "mamba" in mixers else None
    gdn = model.linear_attention if "gdn" in mixers else None
    return {"mamba_heads": mamba.num_heads if mamba else 0, "mamba_groups": mamba.num_groups if mamba else 0,
            "gdn_key_heads": gdn.num_key_heads if gdn else 0, "gdn_value_heads": gdn.num_value_heads if gdn else 0}


def model_consts(problem: Problem) -> dict[str, int]:
    """The problem's numbers and flags the rules read (model_consts computed once per Problem: Python rules
    read them on every slack call)."""
    return dict(memoised(problem, "model_consts", lambda: _compute_model_consts(problem)))


def _compute_model_consts(problem: Problem) -> dict[str, int]:
    """The problem's numbers and 0/1 flags the rules read on the CP-SAT side (the same values Python
    reads from Facts): model sizes, attention kind, training switches, selective-recompute modules."""
    model, training = problem.model, problem.training
    moe, dense = model.moe, model.dense_mlp
    consts = {
        **_attention_consts(model.attention),
        "kv_channels_implied": int(kv_channels_implied(model)),
        "num_experts": moe.num_experts if moe else 0,
        "moe_top_k": moe.top_k if moe else 0,
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "ffn_hidden_size": dense.intermediate_size if dense and (moe is None or model.first_dense_layers) else 0,
        "expert_ffn_hidden_size": moe.expert_intermediate_size if moe else 0,
        "shared_ffn_hidden_size": moe.shared_width if moe else 0,
        "mtp_layers": model.mtp_layers,
        "hc_mult": model.hc_mult,
        "is_moe": int(moe is not None),
        "multi_latent_attention": int(isinstance(model.attention, MLAAttention | DSV4Attention)),
        "hybrid_model": int(isinstance(model.attention, DSV4Attention)),
        "hybrid_layers": int(model.layer_pattern is not None),
        **_mixer_consts(model),
        "sequence_parallel": int(training.sequence_parallel),
        "sequence_parallel_requested": int(sequence_parallel_requested(training)),
        "packed_sequences": int(training.packed_sequences),
        "capacity_factor_set": int(training.capacity_factor is not None),
        "swiglu": int(all(mlp.activation is Activation.swiglu for mlp in _mlps_used(model))),
        "gpus_per_nvlink_domain": problem.hardware.topology.gpus_per_nvlink_domain,
        "tied_embeddings": int(model.tied_embeddings),
        "megatron_param_gather": int(megatron_param_gather(training)),
        "torch_fsdp2": int(training.fsdp == "torch-fsdp2"),
        "megatron_fsdp": int(training.fsdp == "megatron-fsdp"),
        "optimizer_adam": int(training.optimizer is Optimizer.adam),
        "fp8": int(training.precision is Precision.fp8),
    }
    consts |= {f"recompute_{name}": int(name in training.recompute_modules) for name in RECOMPUTE_MODULES}
    consts |= _dsv4_consts(problem)
    return consts


def _mlps_used(model: ModelArchitecture) -> tuple:
    """The MLP shapes the model's blocks use (one activation per Megatron config)."""
    dense = model.dense_mlp if model.dense_mlp and (model.moe is None or model.first_dense_layers) else None
    return tuple(m for m in (model.moe, dense) if m is not None)


def sequence_parallel_requested(training) -> bool:  # noqa: ANN001 - Training
    """Whether the problem itself asks for --sequence-parallel (an explicit `sequence_parallel: true`);
    parasol's default True only means 'SP whenever TP > 1' and asks for nothing at TP 1."""
    return training.sequence_parallel and "sequence_parallel" in training.model_fields_set


def mapping_consts(facts: Facts) -> dict[str, int]:
    """Numbers of one fully specified mapping's pipeline cut: its stage count, the blocks it places, and
    whether the cut is parasol's own (an explicit layout, realised as --pipeline-model-parallel-layout)
    rather than Megatron's even split (layout_explicit 0, also the reading when the key is absent);
    and whether its rank order is --use-tp-pp-dp-mapping's (rank_order_dp_last)."""
    layout = facts.derived.layout
    return {"layout_stages": len(layout), "layout_blocks": sum(layout),
            "layout_explicit": int(facts.mapping.layout is not None),
            "rank_order_dp_last": int(facts.mapping.rank_order == RankOrder.dp_last)}


def _dsv4_consts(problem: Problem) -> dict[str, int]:
    """The numbers the DeepSeek-V4 pack reads beyond the flags above: the GPU's SM (0 when unknown), whether the
    model runs on Megatron-LM's dev branch (a DeepSeek-V4 model: main has no V4 attention), D_window and the
    output-projection grouping."""
    att = problem.model.attention
    consts = {"gpu_sm": compute_capability(problem.hardware.gpu.name) or 0,
              "runs_on_dev": int(isinstance(att, DSV4Attention))}
    if isinstance(att, DSV4Attention):
        consts |= {"dsv4_window_rows": window_rows(att), "dsv4_o_width": att.num_heads * att.head_dim,
                   "dsv4_o_groups": att.o_groups}
    return consts
