"""MoE routing, capacity and fixed-size all-to-all accounting (constraints/physics/routing.py).

Sources: reference/seeds/003_60f510f8d159d310.md §4 (assignments, k·T/E, capacity, 80% used / 20%
padding, fixed-size all-to-all amplified by at least CF) and §6 (EP compute/communication ratio);
reference/seeds/000_431f34d635186976.md §CP (k·T/E = 8,192 / 2,048); reference/BRIEF.md "Seed 003"
table; Megatron-LM moe_utils.py:248-266, moe_layer.py:186-196, token_dispatcher.py:517-540.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from parasol.constraints.physics.routing import (
    CapacityOutcome,
    FixedSizeAllToAll,
    HotRank,
    LoadStats,
    SkewModel,
    assignments,
    capacity_outcome,
    dispatch_combine_bytes,
    ep_compute_comm_ratio,
    expert_capacity,
    expert_loads,
    fixed_size_all_to_all,
    hot_rank,
    load_stats,
    mean_assignments_per_expert,
    rank_loads,
    swiglu_expert_flops,
)

SEQ = 131_072
"""Seed 003 §4: one full 128k-token sequence as the routing domain."""

SKEWS = (SkewModel(), SkewModel("zipf", exponent=0.0), SkewModel("zipf", exponent=0.8),
         SkewModel("zipf", exponent=1.2), SkewModel("zipf", exponent=3.0),
         SkewModel("histogram", weights=tuple(float(1 + (i * 7) % 13) for i in range(384))))


def test_sixteen_assignments_per_token():
    """Seed 003 §4 / BRIEF "assignments per token": top-16 gives 16 per token."""
    assert assignments(1, 16) == 16
    assert assignments(SEQ, 16) == 2_097_152


def test_balanced_mean_is_t_over_24():
    """Seed 003 §4 / BRIEF: k·T/E = T/24 for k16, E384, for any T."""
    for tokens in (1, 24, 1000, SEQ, 33_554_432):
        assert mean_assignments_per_expert(tokens, 16, 384) == Fraction(tokens, 24)


def test_one_128k_sequence_gives_5461_per_expert():
    """Seed 003 §4 / BRIEF: one 131,072-token sequence -> 5,461.3 assignments per expert."""
    mean = mean_assignments_per_expert(SEQ, 16, 384)
    assert mean == Fraction(16384, 3)
    assert round(float(mean), 1) == 5461.3


def test_seed_000_means_8192_and_2048():
    """Seed 000 §CP / BRIEF: k6, E384: 524,288 tokens (A, B) -> 8,192; 131,072 (C, CP4) -> 2,048."""
    assert mean_assignments_per_expert(524_288, 6, 384) == 8192
    assert mean_assignments_per_expert(131_072, 6, 384) == 2048


def test_capacity_for_cf_1_25():
    """Seed 003 §4 / BRIEF: C = ⌈CF·k·T/E⌉; CF 1.25 on one 128k sequence -> ⌈6,826.67⌉ = 6,827."""
    assert expert_capacity(SEQ, 16, 384, 1.25) == 6827
    assert expert_capacity(524_288, 6, 384, 1.25) == 10_240
    assert expert_capacity(SEQ, 16, 384, 1.0) == 5462


def test_balanced_cf_1_25_uses_80_percent():
    """Seed 003 §4 / BRIEF: balanced routing, CF 1.25 -> 80% of the slots used, 20% padding."""
    exact = capacity_outcome(expert_loads(524_288, 6, 384, SkewModel()), 10_240)
    assert exact.used_share == pytest.approx(0.8, rel=1e-12)
    assert exact.padded_slots / exact.slots == pytest.approx(0.2, rel=1e-12)
    assert exact.dropped == 0 and exact.drop_rate == 0
    rounded = capacity_outcome(expert_loads(SEQ, 16, 384, SkewModel()), expert_capacity(SEQ, 16, 384, 1.25))
    assert rounded.slots == 384 * 6827
    assert rounded.used_share == pytest.approx(0.8, abs=1e-4)


@pytest.mark.parametrize("skew", SKEWS, ids=lambda s: f"{s.kind}-{s.exponent}")
def test_loads_sum_to_assignments(skew):
    """Seed 003 §4: every skew model spreads exactly the k·T assignments, none above T per expert."""
    loads = expert_loads(SEQ, 16, 384, skew)
    assert len(loads) == 384
    assert math.fsum(loads) == pytest.approx(16 * SEQ, rel=1e-12)
    assert max(loads) <= SEQ * (1 + 1e-12)


def test_zipf_zero_is_uniform():
    """Seed 003 §4: Zipf exponent 0 is the balanced case k·T/E."""
    assert expert_loads(SEQ, 16, 384, SkewModel("zipf", exponent=0.0)) == pytest.approx(
        expert_loads(SEQ, 16, 384, SkewModel()), rel=1e-12)


def test_zipf_cap_at_one_assignment_per_token():
    """Seed 003 §4 (top-k picks k distinct experts): Zipf(2) gives expert 0 a 61% share, above 1/16;
    it and the next hottest are capped at T and the excess goes to the rest proportionally."""
    loads = expert_loads(1000, 16, 384, SkewModel("zipf", exponent=2.0))
    capped = [i for i, load in enumerate(loads) if load == 1000]
    assert capped == list(range(len(capped))) and len(capped) > 1
    assert math.fsum(loads) == pytest.approx(16_000, rel=1e-12)
    free = loads[len(capped):]
    assert all(a >= b for a, b in zip(free, free[1:], strict=False))
    ratios = [free[0] / free[i] for i in range(1, 5)]
    assert ratios == pytest.approx([((len(capped) + 1 + i) / (len(capped) + 1)) ** 2 for i in range(1, 5)])


def test_steep_zipf_fills_k_experts():
    """Seed 003 §4: as s grows, Zipf routes every token to the same k experts, T each, the rest none."""
    loads = expert_loads(SEQ, 16, 384, SkewModel("zipf", exponent=1000.0))
    assert loads[:16] == pytest.approx((float(SEQ),) * 16)
    assert math.fsum(loads[16:]) == pytest.approx(0.0, abs=1e-6)


def test_all_experts_capped_when_e_equals_k():
    """Seed 003 §4: with E = k every token reaches every expert, T each, whatever the skew."""
    assert expert_loads(50, 8, 8, SkewModel("zipf", exponent=4.0)) == pytest.approx((50.0,) * 8)


def test_histogram_shares_and_shape_checks():
    """Seed 003 §4 (measured per-expert histogram): shares times k·T; length must equal E."""
    loads = expert_loads(100, 2, 4, SkewModel("histogram", weights=(1, 1, 1, 1)))
    assert loads == (50.0, 50.0, 50.0, 50.0)
    assert SkewModel("histogram", weights=[2, 6]).weights == (0.25, 0.75)
    with pytest.raises(ValueError, match="3 weights but the model has 4 experts"):
        expert_loads(100, 2, 4, SkewModel("histogram", weights=(1, 1, 1)))
    with pytest.raises(ValueError, match="> 1/k"):
        expert_loads(100, 2, 4, SkewModel("histogram", weights=(5, 1, 1, 1)))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"kind": "pareto"}, "skew kind"),
    ({"kind": "zipf"}, "zipf exponent must be a number, got None"),
    ({"kind": "zipf", "exponent": "1.1"}, "zipf exponent must be a number"),
    ({"kind": "zipf", "exponent": float("inf")}, "zipf exponent must be finite"),
    ({"kind": "zipf", "exponent": -1.0}, "zipf exponent must be >= 0"),
    ({"kind": "uniform", "exponent": 1.0}, "exponent is only for kind 'zipf'"),
    ({"kind": "zipf", "exponent": 1.0, "weights": (1.0,)}, "weights are only for kind 'histogram'"),
    ({"kind": "histogram"}, "one weight per expert"),
    ({"kind": "histogram", "weights": "1,2"}, "one weight per expert"),
    ({"kind": "histogram", "weights": (1.0, None)}, r"weights\[1\] must be a number"),
    ({"kind": "histogram", "weights": (1.0, -2.0)}, r"weights\[1\] = -2.0"),
    ({"kind": "histogram", "weights": (0.0, 0.0)}, "not all be 0"),
])
def test_skew_model_rejects_bad_shapes(kwargs, match):
    """Seed 003 §4: a skew model must describe a distribution; the message names the bad field."""
    with pytest.raises(ValueError, match=match):
        SkewModel(**kwargs)


def test_load_stats_nearest_rank_p95():
    """Seed 003 §4 (min/mean/p95/max of per-expert load): p95 is the ⌈0.95·n⌉-th smallest."""
    stats = load_stats(tuple(float(x) for x in range(1, 21)))
    assert stats == LoadStats(min=1.0, mean=10.5, p95=19.0, max=20.0, hot_expert=19, imbalance=20 / 10.5)
    assert load_stats((3.0, 5.0, 5.0, 1.0)).hot_expert == 1
    uniform = load_stats(expert_loads(SEQ, 16, 384, SkewModel()))
    assert uniform.imbalance == pytest.approx(1.0) and uniform.p95 == pytest.approx(SEQ / 24)


def test_rank_loads_follow_contiguous_placement():
    """Megatron moe_layer.py:186-196: EP rank r holds experts [r·E/EP, (r+1)·E/EP)."""
    loads = tuple(float(i) for i in range(8))
    assert rank_loads(loads, 4) == (1.0, 5.0, 9.0, 13.0)
    assert rank_loads(loads, 1) == (28.0,)
    with pytest.raises(ValueError, match="divide the 8 experts"):
        rank_loads(loads, 3)


def test_hot_rank_under_zipf():
    """Seed 000 §CP (rank balance differs from expert balance): Zipf puts the hot experts on rank 0."""
    loads = expert_loads(SEQ, 16, 384, SkewModel("zipf", exponent=1.0))
    hot = hot_rank(loads, 64)
    assert isinstance(hot, HotRank) and hot.rank == 0
    assert hot.load == pytest.approx(math.fsum(loads[:6]))
    assert hot.imbalance == pytest.approx(hot.load / (16 * SEQ / 64))
    assert hot_rank(expert_loads(SEQ, 16, 384, SkewModel()), 64) == pytest.approx((0, 16 * SEQ / 64, 1.0))


@pytest.mark.parametrize("skew", SKEWS, ids=lambda s: f"{s.kind}-{s.exponent}")
def test_capacity_outcome_conserves_assignments(skew):
    """Seed 003 §4 (utilisation and drop rate): used + dropped = k·T; used + padding = E·C."""
    loads = expert_loads(SEQ, 16, 384, skew)
    out = capacity_outcome(loads, expert_capacity(SEQ, 16, 384, 1.25))
    assert isinstance(out, CapacityOutcome)
    assert out.used_slots + out.dropped == pytest.approx(16 * SEQ, rel=1e-12)
    assert out.used_slots + out.padded_slots == pytest.approx(out.slots, rel=1e-12)
    assert out.drop_rate == pytest.approx(out.dropped / (16 * SEQ))


def test_skew_drops_beyond_capacity():
    """Seed 003 §4: a hot expert beyond C drops its excess assignments."""
    out = capacity_outcome((10.0, 2.0, 0.0, 0.0), 4)
    assert (out.slots, out.used_slots, out.dropped, out.padded_slots) == (16, 6.0, 6.0, 10.0)
    assert out.drop_rate == 0.5 and out.used_share == 6 / 16


def test_fixed_size_all_to_all_balanced_amplification_is_cf():
    """Seed 003 §4 / BRIEF: fixed-size all-to-all is amplified by CF exactly when divisible; seed 000's
    config A per rank: 8,192 tokens, k6, E384, EP64 -> 160 slots per expert, 6 experts per peer."""
    a2a = fixed_size_all_to_all(8192, 6, 384, 64, 1.25, hidden=7168, bytes_per_element=2)
    assert isinstance(a2a, FixedSizeAllToAll)
    assert (a2a.local_experts, a2a.capacity_per_source, a2a.slots_per_peer) == (6, 160, 960)
    assert a2a.ideal_bytes == 6 * 8192 * 7168 * 2
    assert a2a.per_peer_bytes == 960 * 7168 * 2 and a2a.padded_bytes == 64 * a2a.per_peer_bytes
    assert a2a.amplification == 1.25
    assert a2a.padding_bytes == a2a.padded_bytes - a2a.ideal_bytes
    assert a2a.off_rank_bytes == 63 * a2a.per_peer_bytes
    assert (a2a.dispatch_combine_bytes, a2a.ideal_dispatch_combine_bytes) == (2 * a2a.padded_bytes,
                                                                               2 * a2a.ideal_bytes)


@pytest.mark.parametrize(("tokens", "top_k", "experts", "ep", "cf", "rounding"), [
    (1000, 16, 384, 64, 1.25, 1), (8192, 6, 384, 64, 1.25, 128), (SEQ // 8, 16, 384, 8, 1.0, 1),
    (777, 8, 256, 32, 1.5, 16), (4096, 2, 8, 8, 1.1, 1), (3, 16, 384, 384, 1.25, 1),
])
def test_fixed_size_all_to_all_amplification_at_least_cf(tokens, top_k, experts, ep, cf, rounding):
    """Seed 003 §4 / BRIEF "amplified by at least CF": rounding of C and of per-peer buffers only adds."""
    a2a = fixed_size_all_to_all(tokens, top_k, experts, ep, cf, 4096, 1, per_peer_rounding=rounding)
    assert a2a.amplification >= cf
    assert a2a.slots_per_peer % rounding == 0
    assert a2a.capacity_per_source == expert_capacity(tokens, top_k, experts, cf)


def test_fixed_size_all_to_all_rounding_adds_padding():
    """Seed 003 §4 (per-peer padding): 128-slot rounding of 6·53 = 318 slots gives 384 per peer."""
    plain = fixed_size_all_to_all(1000, 16, 384, 64, 1.25, 4096, 2)
    rounded = fixed_size_all_to_all(1000, 16, 384, 64, 1.25, 4096, 2, per_peer_rounding=128)
    assert (plain.slots_per_peer, rounded.slots_per_peer) == (318, 384)
    assert plain.amplification == pytest.approx(64 * 318 / 16_000)
    assert rounded.amplification == pytest.approx(64 * 384 / 16_000)
    with pytest.raises(ValueError, match="divide the 384 experts"):
        fixed_size_all_to_all(1000, 16, 384, 48 + 1, 1.25, 4096, 2)


def test_ep_ratio_closed_form():
    """Seed 003 §6 / BRIEF: ratio = 3·f·B_link/(b·F)."""
    assert ep_compute_comm_ratio(2048, 50e9, 2, 400e12) == pytest.approx(3 * 2048 * 50e9 / (2 * 400e12))


def test_ep_ratio_independent_of_hidden_experts_topk_batch():
    """Seed 003 §6 / BRIEF: from 6·h·f FLOPs vs 2·h·b bytes per assignment, the ratio does not depend
    on h, E, k or the batch: total compute time over total all-to-all time for any k·T assignments."""
    f, link, b, flops = 3072, 90e9, 1.0, 1.2e15
    expected = ep_compute_comm_ratio(f, link, b, flops)
    for hidden, tokens, top_k in ((4096, 1000, 2), (7168, SEQ, 16), (16_384, 8192, 6)):
        n = assignments(tokens, top_k)
        compute_s = n * swiglu_expert_flops(hidden, f) / flops
        comm_s = n * dispatch_combine_bytes(hidden, b) / link
        assert compute_s / comm_s == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: mean_assignments_per_expert(10, 17, 16), "top_k must be in"),
    (lambda: expert_capacity(10, 2, 16, 0.0), "capacity_factor"),
    (lambda: expert_capacity(-1, 2, 16, 1.0), "tokens must be >= 0"),
    (lambda: load_stats(()), "must not be empty"),
    (lambda: capacity_outcome((1.0,), 0), "capacity must be >= 1"),
    (lambda: ep_compute_comm_ratio(2048, 0.0, 2, 1e15), "must be > 0"),
])
def test_bad_numbers_raise_value_error(call, match):
    """Seed 003 §4, §6: shapes outside the formulas' domain are refused with the value named."""
    with pytest.raises(ValueError, match=match):
        call()
