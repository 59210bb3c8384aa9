"""Every number of the BRIEF's seed tables that the foundation touches, reproduced exactly.

Sources: reference/seeds/000_431f34d635186976.md (DeepSeek-V4-Pro, 1,024 / 8,192 GPUs, configs A/B/C)
and reference/seeds/003_60f510f8d159d310.md (5T MoE state ledger), as tabulated in reference/BRIEF.md.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from parasol.constraints.physics.memory import (
    routed_expert_weight_bytes,
    state_bytes_per_param,
    state_per_device_bytes,
    training_state_bytes,
    weight_bytes,
)
from parasol.problems.derived import (
    attention_data_parallel,
    bubble_fraction,
    derive,
    expert_data_parallel,
    experts_per_rank,
    mean_assignments_per_expert,
    num_microbatches,
    tokens_per_ep_dispatch,
    tokens_per_update,
)
from parasol.problems.mapping import Mapping
from parasol.problems.model.catalog import load_model
from parasol.problems.model.params import expert_params, model_params
from parasol.problems.rank_groups import placements

V4 = load_model("deepseek-v4-pro")


def seed_mapping(gpus: int, cp: int = 1, ep: int = 64) -> Mapping:
    """Seed 000's family: TP1 ETP1 PP8 MBS1, GBS 4096 sequences of 8192 tokens."""
    return Mapping(gpus=gpus, tp=1, pp=8, cp=cp, ep=ep, etp=1, mbs=1, gbs=4096, seq_len=8192)


def test_one_routed_expert_is_66_060_288_parameters() -> None:
    """Seed 000 §显存: P_expert = 3·h·f = 3·7168·3072."""
    assert expert_params(V4) == 66_060_288


def test_bf16_weights_of_1_6t_are_3_2_tb() -> None:
    """Seed 000 §先确定模型与实现: 1.6e12 × 2 B = 3.2 TB."""
    assert weight_bytes(1.6e12) == pytest.approx(3.2e12)
    assert model_params(V4).total_with_mtp * 2 / 1e12 == pytest.approx(3.2, abs=0.01)


@pytest.mark.parametrize(("ep", "gb", "per_rank", "dp_e"), [(32, 12.68, 12, 4), (64, 6.34, 6, 2), (128, 3.17, 3, 1)])
def test_routed_weights_of_eight_moe_layers(ep: int, gb: float, per_rank: int, dp_e: int) -> None:
    """Seed 000 table: 8 MoE layers per rank, 1,024 GPUs PP8 TP1 CP1: 12.68 / 6.34 / 3.17 GB (decimal),
    12 / 6 / 3 experts per rank per layer, expert DP 4 / 2 / 1."""
    assert round(float(routed_expert_weight_bytes(8, 384, ep, 1, expert_params(V4))) / 1e9, 2) == gb
    assert experts_per_rank(384, ep) == per_rank
    assert expert_data_parallel(1024, 8, 1, ep) == dp_e


@pytest.mark.parametrize(("name", "gpus", "cp", "d_a", "d_e", "m", "bubble"), [
    ("A", 1024, 1, 128, 2, 32, 0.179),
    ("B", 8192, 1, 1024, 16, 4, 0.636),
    ("C", 8192, 4, 256, 16, 16, 0.304),
])
def test_configurations_a_b_c(name: str, gpus: int, cp: int, d_a: int, d_e: int, m: int, bubble: float) -> None:
    """Seed 000 §PP 和 microbatch: D_a, D_e, m = B/(b·D_a) and the 1F1B bubble (p−1)/(m+p−1), p = 8."""
    assert attention_data_parallel(gpus, 8, 1, cp) == d_a
    assert expert_data_parallel(gpus, 8, 1, 64) == d_e
    assert num_microbatches(4096, 1, Fraction(d_a)) == m
    assert round(bubble_fraction(8, m), 3) == bubble
    d = derive(V4, seed_mapping(gpus, cp))
    assert (d.dp_attn, d.dp_expert, d.num_microbatches) == (d_a, d_e, m)


def test_folding_identity_holds_for_a_b_c() -> None:
    """Seed 000 §并行分组: N/PP = TP·CP·D_a = ETP·EP·D_e."""
    for gpus, cp in ((1024, 1), (8192, 1), (8192, 4)):
        d = derive(V4, seed_mapping(gpus, cp))
        assert gpus // 8 == 1 * cp * d.dp_attn == 1 * 64 * d.dp_expert


def test_tokens_per_update() -> None:
    """Seed 000: 4096 · 8192 = 33,554,432 packed token positions per update."""
    assert tokens_per_update(4096, 8192) == 33_554_432


@pytest.mark.parametrize(("cp", "tokens", "assignments"), [(1, 524_288, 8192), (4, 131_072, 2048)])
def test_dispatch_tokens_and_assignments(cp: int, tokens: int, assignments: int) -> None:
    """Seed 000 §CP: T_group = EP·b·S/CP (524,288 / 131,072) and k·T/E with k=6, E=384 (8,192 / 2,048)."""
    t = tokens_per_ep_dispatch(64, 1, 1, 8192, cp, 1)
    assert t == tokens
    assert mean_assignments_per_expert(6, t, 384) == assignments
    assert derive(V4, seed_mapping(8192, cp)).assignments_per_expert == assignments


def test_ep64_on_8_gpu_nodes_spans_8_nodes() -> None:
    """Seed 000 §EP 要连同物理拓扑一起调: EP64 on 8-GPU nodes spans at least 8 nodes (and, under
    Megatron's rank order, exactly 8: megatron-groups.md §1.5)."""
    ep = {g.kind: g for g in placements(seed_mapping(1024), 8, 8)}["ep"]
    assert ep.size == 64 and ep.max_nodes == 8 and not ep.inside_node


def test_5t_state_ledger() -> None:
    """Seed 003 §2: 16 B/param (BF16 weight, BF16 grad, FP32 master, Adam m and v) → 80 TB for 5T;
    18 B and 90 TB with FP32 grads; spread over 64 devices: 1.25 TB each, which 64 devices cannot hold."""
    assert state_bytes_per_param("bf16") == 16
    assert state_bytes_per_param("fp32") == 18
    assert training_state_bytes(5e12) == pytest.approx(80e12)
    assert training_state_bytes(5e12, "fp32") == pytest.approx(90e12)
    assert state_per_device_bytes(5e12, 64) == pytest.approx(1.25e12)
    catalog_5t = model_params(load_model("moe-5t")).total
    assert training_state_bytes(catalog_5t) / 1e12 == pytest.approx(80, rel=0.01)
