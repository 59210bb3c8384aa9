"""Issue 15: multi-latent attention (DeepSeek-V2/V3, Kimi K2) runs every CP communication type Transformer
Engine offers, priced for its own widths, and `solve` chooses among them per row.

Megatron's MLA hands its core attention per-head queries and keys of qk_nope + qk_rope channels and values of
v_head_dim (multi_latent_attention.py: k_channels=q_head_dim, v_channels=v_head_dim, cp_comm_type passed on);
TE's all-to-all attention moves Q, K, V as they are and the output with the values' width
(context_parallel.py@d0067d0 :4216-4217 orig_o_shape = q's leading dims + v's last) and asserts heads % CP
(:4246-4249). DeepSeek-V3: 128 heads, qk 128 + 64 = 192, v 128 (reference/model-specs.yaml)."""

from __future__ import annotations

import pytest

from parasol.constraints.physics.comm import cp_level_links, group_link
from parasol.constraints.physics.exchanges import cp_a2a_bytes, cp_comm
from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.loader import Problem, load_problem, load_problem_text
from parasol.problems.mapping import Mapping
from parasol.problems.model.architecture import MLAAttention
from parasol.solver.diagnose.explain import explain
from parasol.solver.search.choices import no_slower, settled
from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs
from parasol.solver.search.savings import row_problem, time_model_for
from parasol.solver.search.space import CP_COMM_TYPES, Row, choice_variants, cp_comm_choices, with_choices

V3 = """
model: deepseek-v3
training: {seq_len: 4096, global_batch: 1024}
hardware: {preset: h100-hgx, gpus: 256}
"""
US = 1e-6


@pytest.fixture(scope="module")
def v3() -> Problem:
    return load_problem_text(V3)


def test_mla_all_to_all_bytes_by_hand(v3: Problem) -> None:
    """1,024 tokens a rank, TP 2: 64 heads of Q (192), K (192), V (128) and O (128) channels, BF16:
    1024 · 64 · (192 + 192 + 128 + 128) · 2 B = 83,886,080 B (GQA's 4·N·h/P when the widths are equal)."""
    att = v3.model.attention
    assert isinstance(att, MLAAttention) and (att.num_heads, att.head_dim, att.v_head_dim) == (128, 192, 128)
    assert cp_a2a_bytes(att, 1024.0, 2) == 83_886_080


def test_mla_cp_types_price_by_hand(v3: Problem) -> None:
    """TP 1, CP 8 inside one H100 node (NVLink 450 GB/s, 3.4 us a hop, hardware/presets/h100-hgx.yaml), 1,024
    tokens a rank. a2a: 1024 · 128 · 640 · 2 = 167,772,160 B, 7/8 of it over NVLink = 326.224 us + 3.4 us.
    p2p: 7 ring steps of the K and V chunk, 1024 · 128 · (192 + 128) · 2 = 83,886,080 B = 186.414 us + 3.4 us
    each. a2a+p2p [2, 4] with TP 2 over two nodes (NIC 50 GB/s, 14 us): the all-to-all of 83,886,080 B inside
    the level-1 pair, half of it over NVLink (93.207 us + 3.4 us), and 3 ring steps of 1024 · 64 · 320 · 2 =
    41,943,040 B over the NIC (the level-2 group of 4 spans two nodes), 3 · 838.861 us + 3 · 14 us."""
    block = v3.model.blocks[3]
    topology = v3.hardware.topology
    inside = group_link(topology, Mapping(gpus=256, gbs=1024, seq_len=4096, cp=8), "cp")
    assert (inside.size, inside.local_peers) == (8, 8)
    a2a = cp_comm(v3.model, block, 1024.0, 1, inside, "a2a")
    assert (a2a.nvlink_s, a2a.network_s, a2a.latency_s) == (pytest.approx(7 / 8 * 167_772_160 / 450e9), 0.0,
                                                             pytest.approx(3.4 * US))
    p2p = cp_comm(v3.model, block, 1024.0, 1, inside, "p2p")
    assert p2p.seconds() == pytest.approx(7 * (83_886_080 / 450e9 + 3.4 * US))
    two_nodes = Mapping(gpus=256, gbs=1024, seq_len=4096, tp=2, cp=8)
    levels = cp_level_links(topology, two_nodes, (2, 4))
    split = cp_comm(v3.model, block, 1024.0, 2, group_link(topology, two_nodes, "cp"), "a2a+p2p", levels)
    assert split.nvlink_s == pytest.approx(0.5 * 83_886_080 / 450e9)
    assert split.network_s == pytest.approx(3 * 41_943_040 / 50e9)
    assert split.network_bytes == pytest.approx(3 * 41_943_040)
    assert split.latency_s == pytest.approx((3.4 + 3 * 14) * US)


def test_mla_a2a_needs_heads_divisible_by_cp(v3: Problem) -> None:
    """cp-a2a-heads-divisible applies to MLA: 128 heads over TP 8 leave 16 a rank, which CP 32 cannot split
    whole; CP 16 can."""
    for cp, broken in ((32, True), (16, False)):
        mapping = Mapping(gpus=256, gbs=1024, seq_len=4096, tp=8, cp=cp)
        row = Row(1, 1, 8, cp, 1, 1, 1, "full", cp_comm="a2a")
        rules = [v["rule"] for v in explain(with_choices(v3, row), mapping, repairs=0).as_dict()["violations"]]
        assert ("cp-a2a-heads-divisible" in rules) is broken


def test_mla_rows_choose_their_cp_type(v3: Problem) -> None:
    """MLA rows try every CP type (a2a+p2p with its splits); DeepSeek-V4's hybrid attention keeps its own."""
    assert cp_comm_choices(v3) == CP_COMM_TYPES
    kinds = {v.cp_comm for v in choice_variants(v3, Row(1, 1, 2, 8, 8, 1, 1, "full"))}
    assert kinds == set(CP_COMM_TYPES)
    assert cp_comm_choices(load_problem("problems/deepseek-v4-pro-1024.yaml")) == ("p2p",)


def test_a_row_without_a_fastest_variant_keeps_every_unbeaten_one() -> None:
    """DeepSeek-V3 on 2,048 H800 (the default-space problem), PP 1 TP 2 CP 4 EP 256 MBS 4 under FSDP, every variant
    priced: none is no slower on every table than every other (allgather prices the dense blocks faster, flex
    the MoE ones), so settled keeps more than one; no kept variant is no slower than another, and every variant
    is matched by a kept one no slower than it (the front over the kept ones is the front over all). With the
    exchange keys settled keeps one variant, and the row's one cut (PP 1) prices no slower under it than under
    any variant, as printed (StageTimeModel.cut_step_times_s)."""
    problem = load_problem_text("model: deepseek-v3\ntraining: {seq_len: 4096, global_batch: 15360, precision: fp8}\n"
                                "hardware: {preset: h800-hgx, gpus: 2048}\n")
    row = Row(pp=1, vpp=1, tp=2, cp=4, ep=256, etp=1, mbs=4, recompute="full", saving="fsdp")
    own = row_problem(problem, row)
    model = time_model_for(CalibratedStageTimes(problem), own)
    kept = settled(own, row, model, compare=False)
    assert len(kept) > 1
    assert not any(no_slower(a, b) for i, (_, a) in enumerate(kept) for j, (_, b) in enumerate(kept) if i != j)
    for variant in choice_variants(own, row):
        costs = row_costs(own, variant, model)
        assert any(no_slower(c, costs) for _, c in kept)
    (quick, _), = settled(own, row, model)
    counts = interval_counts(prefix_counts(own, block_kinds(own)))
    totals = counts[0, counts.shape[0] - 1][None, None, :]

    def printed(variant: Row) -> float:
        chosen = row_problem(problem, variant)
        return float(model.for_problem(chosen).cut_step_times_s(variant.mapping(chosen), variant.derived(chosen),
                                                               totals)[0])

    assert all(printed(quick) <= printed(v) for v in choice_variants(own, row))
