"""Issue 15: two framework choices `solve` makes per row besides the dispatcher and the flat CP type.

- a2a+p2p (hierarchical CP): an all-to-all over heads inside the level-1 groups of
  --hierarchical-context-parallel-sizes and a ring over the level-2 groups (Transformer Engine
  context_parallel.py@d0067d0 :1407-1419, 1486-1500; Megatron parallel_state.py:378-420 builds the groups),
  tried where the CP group leaves an NVLink domain and level 1 stays inside one.
- the flex dispatcher's backend: DeepEP's normal kernels reach at most 8 ranks over NVLink (NUM_MAX_NVL_PEERS,
  DeepEP csrc/kernels/configs.cuh:3, deep_ep.cpp:169-170) and send to the rest through the NIC, Hybrid-EP
  uses the group's whole NVLink domain (deep_ep/hybrid_ep_buffer.py:61-83); hybridep is tried where the two
  differ (NVL72 racks) or DeepEP cannot take the group.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from inline_problems import SMALL_MOE

from parasol.constraints.physics.comm import cp_level_links, deduplicated_dispatch, group_link
from parasol.constraints.physics.exchanges import cp_comm, cp_parts, dispatch_link, grid_links
from parasol.constraints.physics.step_time import CalibratedStageTimes, step_time
from parasol.constraints.rules.moe import tp_ep_shares
from parasol.hardware.calibration import StepCoefficients
from parasol.hardware.topology import Level
from parasol.problems.derived import derive
from parasol.problems.loader import load_problem_text
from parasol.problems.mapping import Mapping, RankOrder
from parasol.solver.diagnose.explain import explain
from parasol.solver.diagnose.megatron_verdict import megatron_verdict
from parasol.solver.outputs.emit import megatron_args
from parasol.solver.search.choices import choice_rules_hold, settled
from parasol.solver.search.space import Row, choice_variants, cp_level_choices, with_choices

CASES = yaml.safe_load((Path(__file__).resolve().parent / "data" / "oracle_choice_cases.yaml").read_text())
MOE24 = SMALL_MOE.replace("num_experts: 16", "num_experts: 24")
NVL72 = MOE24.replace("h100-hgx", "gb200-nvl72").replace("gpus: 64", "gpus: 144")
MOE192 = (SMALL_MOE.replace("num_experts: 16", "num_experts: 192").replace("gpus: 64", "gpus: 192")
          .replace("global_batch: 256", "global_batch: 192"))
GQA = SMALL_MOE.replace("num_heads: 16, num_kv_heads: 4", "num_heads: 32, num_kv_heads: 8")
US = 1e-6


def test_hierarchical_levels_are_megatrons_groups() -> None:
    """create_hierarchical_groups cuts a CP group (in rank order) into level-1 groups of consecutive members and
    level-2 groups of members level-1 apart: with TP 2 and CP 8 on 8-GPU nodes the CP group {0, 2, ..., 14}
    spans two nodes; sizes [4, 2] give level 1 {0, 2, 4, 6} (one node) and level 2 {0, 8} (two nodes)."""
    problem = load_problem_text(SMALL_MOE)
    mapping = Mapping(gpus=64, gbs=256, seq_len=4096, tp=2, cp=8)
    topology = problem.hardware.topology
    flat = group_link(topology, mapping, "cp")
    assert (flat.size, flat.domains, flat.level) == (8, 2, Level.rack)
    inner, outer = cp_level_links(topology, mapping, (4, 2))
    assert (inner.size, inner.domains, inner.level) == (4, 1, Level.nvlink_domain)
    assert (outer.size, outer.domains, outer.level, outer.local_peers) == (2, 2, Level.rack, 1)
    inner, outer = cp_level_links(topology, mapping, (2, 4))
    assert (inner.size, inner.level, outer.size, outer.local_peers) == (2, Level.nvlink_domain, 4, 2)


def test_a2a_p2p_price_by_hand() -> None:
    """GQA 32 heads, 8 KV heads, head dim 128, TP 2, CP 8 = [4, 2] on H100 (NVLink 450 GB/s, NIC 50 GB/s, NCCL
    hop latency 3.4 / 14 us, hardware/presets/h100-hgx.yaml), 1,024 tokens a rank:
    level-1 all-to-all of Q, K, V, O: 1024·(2·16 + 2·4)·128·2 B = 10,485,760 B, 3/4 of it over NVLink =
    17.476 us + 3.4 us; level-2 ring, 1 step of K and V for 4 KV heads: 1024·(2·4·128)·2 B = 2,097,152 B over
    the NIC = 41.943 us + 14 us. Priced max(17.476, 41.943) + 17.4 = 59.343 us: under both the flat ring
    (7 steps of 55.943 us) and the flat all-to-all (its network half: 104.858 us + 14 us)."""
    problem = load_problem_text(GQA)
    block = problem.model.blocks[1]
    mapping = Mapping(gpus=64, gbs=256, seq_len=8192, tp=2, cp=8)
    topology = problem.hardware.topology
    flat = group_link(topology, mapping, "cp")
    term = cp_comm(problem.model, block, 1024.0, 2, flat, "a2a+p2p", cp_level_links(topology, mapping, (4, 2)))
    assert term.nvlink_s == pytest.approx(0.75 * 10_485_760 / 450e9)
    assert term.network_s == pytest.approx(2_097_152 / 50e9)
    assert term.latency_s == pytest.approx(17.4 * US)
    assert term.seconds() == pytest.approx(59.343 * US, rel=1e-4)
    p2p = cp_comm(problem.model, block, 1024.0, 2, flat, "p2p")
    a2a = cp_comm(problem.model, block, 1024.0, 2, flat, "a2a")
    assert p2p.seconds() == pytest.approx(7 * (2_097_152 / 50e9 + 14 * US))
    assert a2a.seconds() == pytest.approx(4 / 8 * 10_485_760 / 50e9 + 14 * US)
    assert term.seconds() < min(p2p.seconds(), a2a.seconds())
    assert cp_comm(problem.model, block, 1024.0, 2, flat, "a2a+p2p") == p2p  # no sizes: Megatron refuses anyway


def test_a2a_p2p_is_tried_where_its_all_to_all_stays_in_a_domain() -> None:
    """Splits with both levels > 1 and level 1 inside an NVLink domain: TP 2 CP 8 on 8-GPU nodes tries [2, 4]
    and [4, 2] (level 1 of [4, 2] spans 4·2 = 8 GPUs, one node); TP 1 CP 8 inside one node tries both too (a
    split's ring may hide where the flat all-to-all blocks); TP 4 CP 8 only [2, 4] ([4, 2]'s level 1 spans
    16 GPUs); CP 2 none. A problem that sets the sizes keeps them; `search.cp_comm_type: a2a+p2p` alone takes
    every split."""
    problem, gqa = load_problem_text(SMALL_MOE), load_problem_text(GQA)
    for source in (problem, gqa):
        for tp in (1, 2):
            splits = {(v.cp_comm, v.cp_levels) for v in choice_variants(source, Row(1, 1, tp, 8, 8, 1, 1, "none"))}
            assert {s for c, s in splits if c == "a2a+p2p"} == {(2, 4), (4, 2)}
        splits = {(v.cp_comm, v.cp_levels) for v in choice_variants(source, Row(1, 1, 4, 8, 8, 1, 1, "none"))}
        assert {s for c, s in splits if c == "a2a+p2p"} == {(2, 4)}
    assert "a2a+p2p" not in {v.cp_comm for v in choice_variants(gqa, Row(1, 1, 1, 2, 8, 1, 1, "none"))}
    inside = Row(1, 1, 1, 8, 8, 1, 1, "none")
    (row, _), = settled(problem, inside, CalibratedStageTimes(problem))
    assert (row.cp_comm, row.cp_levels) == ("a2a+p2p", (4, 2))
    own = load_problem_text(SMALL_MOE.replace("[megatron-core]}", "[megatron-core], options: "
                                              "{hierarchical_context_parallel_sizes: [2, 4]}}"))
    variant = next(v for v in choice_variants(own, Row(1, 1, 2, 8, 8, 1, 1, "none")) if v.cp_comm == "a2a+p2p")
    assert variant.cp_levels == () and with_choices(own, variant).spec.framework.options.hierarchical_context_parallel_sizes == (2, 4)
    only = load_problem_text(SMALL_MOE + "search: {cp_comm_type: a2a+p2p}\n")
    assert cp_level_choices(only, Row(1, 1, 1, 8, 8, 1, 1, "none"), True) == ((2, 4), (4, 2))


def test_a_row_chooses_an_option_exactly_when_it_has_settings() -> None:
    """Row.chooses (with_choices' shortcut for rows that choose nothing) agrees with Row.settings on every
    variant the choices make, and a row choosing nothing is priced under the problem itself."""
    problem = load_problem_text(SMALL_MOE)
    plain = Row(1, 1, 2, 8, 8, 1, 1, "none")
    variants = choice_variants(problem, plain)
    assert any(v.chooses for v in variants)
    for v in (plain, *variants):
        assert v.chooses == bool(v.settings())
    assert not plain.chooses and with_choices(problem, plain) is problem


def test_only_a_ring_hides_behind_attention() -> None:
    """Transformer Engine's all-to-all waits for Q, K and V before the attention and its KV all-gather ends
    before the first step (context_parallel.py@d0067d0 :387-535, :3212-3238); only ring steps run beside the
    attention. So cp_parts gives a2a and allgather no ring part, p2p no blocking part, a2a+p2p its
    all-to-all as the blocking part (the hand prices of test_a2a_p2p_price_by_hand); and a mapping's exposed
    CP seconds (step time breakdown) are the whole
    exchange under a2a and allgather whatever overlap_cp says, and shrink with it under p2p."""
    problem = load_problem_text(GQA)
    block = problem.model.blocks[1]
    mapping = Mapping(gpus=64, gbs=256, seq_len=8192, tp=2, cp=8)
    topology = problem.hardware.topology
    flat = group_link(topology, mapping, "cp")
    for kind in ("a2a", "allgather"):
        ring, blocking = cp_parts(problem.model, block, 1024.0, 2, flat, kind)
        assert ring.seconds() == 0 and blocking == cp_comm(problem.model, block, 1024.0, 2, flat, kind)
    ring, blocking = cp_parts(problem.model, block, 1024.0, 2, flat, "p2p")
    assert blocking.seconds() == 0 and ring.seconds() > 0
    levels = cp_level_links(topology, mapping, (4, 2))
    ring, blocking = cp_parts(problem.model, block, 1024.0, 2, flat, "a2a+p2p", levels)
    assert blocking.seconds() == pytest.approx(17.476 * US + 3.4 * US, rel=1e-3)
    assert ring.seconds() == pytest.approx(41.943 * US + 14 * US, rel=1e-3)
    full = mapping.model_copy(update={"ep": 8, "etp": 1})
    exposed = {}
    for kind in ("p2p", "a2a", "allgather"):
        chosen = load_problem_text(GQA.replace("[megatron-core]}", f"[megatron-core], options: {{cp_comm_type: {kind}}}}}"))
        derived = derive(chosen.model, full)
        exposed[kind] = [step_time(chosen, full, derived, StepCoefficients(overlap_cp=share)).breakdown["cp"]
                         for share in (0.0, 0.9)]
    assert exposed["p2p"][1] < exposed["p2p"][0]
    assert exposed["a2a"][1] == exposed["a2a"][0] > 0 and exposed["allgather"][1] == exposed["allgather"][0] > 0


def test_a2a_p2p_rules() -> None:
    """Transformer Engine takes exactly two levels, and splits a TP rank's query and KV heads over level 1:
    SMALL_MOE's 4 KV heads over TP 2 split over 2 (sizes [2, 4]) but not over 4 ([4, 2])."""
    problem = load_problem_text(SMALL_MOE)
    mapping = Mapping(gpus=64, gbs=256, seq_len=4096, tp=2, cp=8, ep=8, etp=1)
    rows = {sizes: Row(1, 1, 2, 8, 8, 1, 1, "none", dispatcher="alltoall", cp_comm="a2a+p2p", cp_levels=sizes)
            for sizes in ((2, 4), (4, 2), (2, 2, 2))}
    assert choice_rules_hold(problem, rows[(2, 4)])
    assert not choice_rules_hold(problem, rows[(4, 2)])
    broken = {sizes: [v["rule"] for v in explain(with_choices(problem, row), mapping, repairs=0).as_dict()["violations"]]
              for sizes, row in rows.items()}
    assert "cp-a2a-p2p-heads-divisible" in broken[(4, 2)] and "cp-a2a-p2p-two-levels" in broken[(2, 2, 2)]
    assert not {"cp-a2a-p2p-heads-divisible", "cp-a2a-p2p-two-levels"} & set(broken[(2, 4)])


def test_settled_row_runs_a2a_p2p_and_emits_it() -> None:
    """The TP 2 CP 8 row keeps a2a+p2p [2, 4] (the one split its heads allow), proved fastest, and its launch
    line carries the type and the sizes (Megatron's verdict on that line: tests/data/oracle_choice_cases.yaml)."""
    problem = load_problem_text(SMALL_MOE)
    (row, _), = settled(problem, Row(1, 1, 2, 8, 8, 1, 1, "none"), CalibratedStageTimes(problem))
    assert (row.cp_comm, row.cp_levels) == ("a2a+p2p", (2, 4))
    args = dict(megatron_args(with_choices(problem, row), row.mapping(problem)).pairs())
    assert args["--cp-comm-type"] == "a2a+p2p" and args["--hierarchical-context-parallel-sizes"] == "2 4"


def test_deepep_reaches_eight_nvlink_peers_hybrid_ep_the_domain() -> None:
    """EP 24 inside one 72-GPU NVLink domain (GB200 NVL72: NVLink 900 GB/s, NIC 50 GB/s): Hybrid-EP keeps the
    dispatch on NVLink; DeepEP sees 3 RDMA ranks of 8 and sends a token to 2·(1 − (2/3)^k) other ones over
    the NIC. 1 MB of tokens, top-8: DeepEP 8·1e6·7/8 B over NVLink (7.778 us) and 1e6·1.921963 B over the NIC
    (38.439 us) + 14 us; Hybrid-EP 8·1e6·23/24 B over NVLink (8.519 us) + 3.4 us. On 8-GPU HGX nodes both
    are the same link."""
    problem = load_problem_text(NVL72)
    links = grid_links(problem.hardware.topology, 144, 1, 1, 1, 24, 1, RankOrder.pp_last)
    deepep = deduplicated_dispatch(1e6, 8, dispatch_link(links, "flex", "deepep"))
    hybrid = deduplicated_dispatch(1e6, 8, dispatch_link(links, "flex", "hybridep"))
    assert deepep.nvlink_s == pytest.approx(8e6 * 7 / 8 / 900e9)
    assert deepep.network_s == pytest.approx(1e6 * 2 * (1 - (2 / 3) ** 8) / 50e9)
    assert deepep.seconds() == pytest.approx(52.439 * US, rel=1e-4)
    assert (hybrid.network_s, hybrid.latency_s) == (0.0, pytest.approx(3.4 * US))
    assert hybrid.nvlink_s == pytest.approx(8e6 * 23 / 24 / 900e9)
    hgx = load_problem_text(MOE24)
    hgx_links = grid_links(hgx.hardware.topology, 64, 1, 1, 1, 8, 1, RankOrder.pp_last)
    assert hgx_links.ep_deepep == hgx_links.ep


def test_hybridep_is_tried_only_where_it_differs() -> None:
    """NVL72 EP 24 (DeepEP's reach is smaller than the group's domain share): flex runs deepep and hybridep; EP 8
    (within DeepEP's reach) one flex row. On H100 EP 12 neither backend takes the group (DeepEP: not a multiple
    of 8; Hybrid-EP: its groups split 8 + 4 over two nodes), so the row runs without flex; EP 192 is over
    DeepEP's 160 ranks and 24 whole nodes for Hybrid-EP, the flex row that holds. A problem that sets the
    backend keeps it."""
    nvl72 = load_problem_text(NVL72)
    backends = {v.flex_backend for v in choice_variants(nvl72, Row(1, 1, 1, 1, 24, 1, 1, "none")) if v.dispatcher == "flex"}
    assert backends == {"", "hybridep"}
    assert len(choice_variants(nvl72, Row(1, 1, 1, 1, 8, 1, 1, "none"))) == 3
    hgx = load_problem_text(MOE24.replace("gpus: 64", "gpus: 96").replace("global_batch: 256", "global_batch: 192"))
    flex = [v for v in choice_variants(hgx, Row(1, 1, 1, 1, 12, 1, 1, "none")) if v.dispatcher == "flex"]
    assert [(v.flex_backend, choice_rules_hold(hgx, v)) for v in flex] == [("", False), ("hybridep", False)]
    (row, _), = settled(hgx, Row(1, 1, 1, 1, 12, 1, 1, "none"), CalibratedStageTimes(hgx))
    assert row.dispatcher != "flex"
    wide = load_problem_text(MOE192)
    flex = [v for v in choice_variants(wide, Row(1, 1, 1, 1, 192, 1, 1, "none")) if v.dispatcher == "flex"]
    assert [(v.flex_backend, choice_rules_hold(wide, v)) for v in flex] == [("", False), ("hybridep", True)]
    (row, _), = settled(wide, Row(1, 1, 1, 1, 192, 1, 1, "none"), CalibratedStageTimes(wide))
    assert (row.dispatcher, row.flex_backend) == ("flex", "hybridep")
    pinned = load_problem_text(NVL72.replace("[megatron-core]}", "[megatron-core], options: "
                                             "{moe_flex_dispatcher_backend: deepep}}"))
    assert {v.flex_backend for v in choice_variants(pinned, Row(1, 1, 1, 1, 24, 1, 1, "none"))} == {""}


def test_deepep_group_size_rule() -> None:
    """DeepEP's Buffer asserts an ETP×EP group of < 8 ranks or a multiple of 8, at most 160 (deep_ep.cpp:152-153)."""
    hgx = load_problem_text(MOE24.replace("gpus: 64", "gpus: 96").replace("global_batch: 256", "global_batch: 192"))
    flex = with_choices(hgx, Row(1, 1, 1, 1, 12, 1, 1, "none", dispatcher="flex"))
    for ep, ok in ((4, True), (8, True), (12, False), (24, True)):
        broken = explain(flex, Mapping(gpus=96, gbs=192, seq_len=4096, ep=ep), repairs=0).as_dict()["violations"]
        assert ("deepep-group-size" not in [v["rule"] for v in broken]) is ok


def test_hybridep_domain_layout() -> None:
    """Hybrid-EP (DeepEP hybrid-ep@94a9f8f hybrid_ep_buffer.py:74-83) derives each rank's node layout from the
    group ranks it reaches over NVLink: ETP×EP groups are aligned blocks of consecutive ranks, so EP 12 on 8-GPU
    nodes splits 8 + 4 and 4 + 8; on 72-GPU NVL72 domains EP 64 splits 64, 8 + 56, ..., 56 + 8 (refused) and
    EP 48 splits 48 or 24 + 24 (taken), and a 4,608-GPU EP 4,608 group spans 64 domains (over 33)."""
    def shares(gpus: int, ep: int, domain: int) -> frozenset[tuple[int, ...]]:
        return tp_ep_shares(Mapping(gpus=gpus, gbs=1, seq_len=1, ep=ep, etp=1), domain)

    assert shares(96, 12, 8) == {(8, 4), (4, 8)}
    assert (8, 56) in shares(576, 64, 72) and shares(576, 48, 72) == {(48,), (24, 24)}
    assert max(len(p) for p in shares(4608, 4608, 72)) == 64
    nvl72 = load_problem_text(SMALL_MOE.replace("num_experts: 16", "num_experts: 192")
                              .replace("h100-hgx", "gb200-nvl72").replace("gpus: 64", "gpus: 576")
                              .replace("[megatron-core]}", "[megatron-core], options: {moe_token_dispatcher_type: "
                                       "flex, moe_flex_dispatcher_backend: hybridep}}"))
    for ep, ok in ((64, False), (48, True), (24, True), (96, False)):
        broken = explain(nvl72, Mapping(gpus=576, gbs=256, seq_len=4096, ep=ep), repairs=0).as_dict()["violations"]
        assert ("hybridep-even-domains" not in [v["rule"] for v in broken]) is ok, ep


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_parasol_agrees_with_megatron_on_the_choice_lines(case: dict) -> None:
    """Megatron accepts the emitted a2a+p2p and hybridep lines and rejects a2a+p2p without sizes or with sizes
    that do not multiply to CP at validate_args (stage A); parasol's Megatron rules say the same."""
    verdict = megatron_verdict(case["args"], case["world_size"])
    assert verdict.rejected == (case["verdict"] == "rejected")
    if verdict.rejected:
        assert case["stage"] in verdict.stages()


def test_the_recorded_lines_are_what_parasol_emits() -> None:
    """The parallel flags of the two *-emitted lines are `--emit megatron`'s for the settled rows."""
    problems = {"a2a-p2p-emitted": (load_problem_text(SMALL_MOE), Row(1, 1, 2, 8, 8, 1, 1, "none")),
                "hybridep-emitted": (load_problem_text(MOE192), Row(1, 1, 1, 1, 192, 1, 1, "none"))}
    for case in CASES:
        if case["id"] not in problems:
            continue
        problem, row = problems[case["id"]]
        (chosen, _), = settled(problem, row, CalibratedStageTimes(problem))
        flags = " ".join(k if v is None else f"{k} {v}" for k, v in
                         megatron_args(with_choices(problem, chosen), chosen.mapping(problem)).pairs())
        assert case["args"].startswith(flags + " ")
