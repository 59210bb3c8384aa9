"""The rank order as a placement choice: Megatron's default tp-cp-ep-dp-pp and --use-tp-pp-dp-mapping's
tp-cp-ep-pp-dp (megatron-groups.md §1.2; Megatron-LM initialize.py:395, parallel_state.py:269-375 and
898-907). The order changes which groups share a node, hence their links and the step time; explain,
the rules and the solver read it from the mapping."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from parasol.constraints.physics.exchanges import links_for
from parasol.problems.loader import load_problem, load_problem_text
from parasol.problems.mapping import Mapping, RankOrder
from parasol.problems.rank_groups import dense_sizes, groups, order_of, placements
from parasol.solver.cli import main
from parasol.solver.diagnose.explain import explain
from parasol.solver.search.space import enumerate_rows

DENSE = """
model: llama-3.1-8b
training: {seq_len: 4096, global_batch: 256}
hardware: {preset: h100-hgx, gpus: 64}
"""


def _mapping(order: RankOrder) -> Mapping:
    return Mapping(gpus=64, gbs=256, seq_len=4096, tp=2, pp=4, rank_order=order)


def test_pipeline_groups_move_inside_the_node_under_tp_pp_dp() -> None:
    """TP2 PP4 on 64 GPUs: by default PP strides over TP·DP = 16 ranks and DP over 2; with order
    tp-cp-ep-pp-dp PP strides over TP·CP = 2 ranks and DP over TP·PP = 8 (parallel_state.py:269-375)."""
    default, swapped = _mapping(RankOrder.pp_last), _mapping(RankOrder.dp_last)
    assert groups(dense_sizes(default), ("pp",), order_of(default))[0] == [0, 16, 32, 48]
    assert groups(dense_sizes(default), ("dp",), order_of(default))[0] == [0, 2, 4, 6, 8, 10, 12, 14]
    assert groups(dense_sizes(swapped), ("pp",), order_of(swapped))[0] == [0, 2, 4, 6]
    assert groups(dense_sizes(swapped), ("dp",), order_of(swapped))[0] == [0, 8, 16, 24, 32, 40, 48, 56]
    spans = {p.kind: p.max_nodes for p in placements(swapped, 8, 8)}
    assert spans["pp"] == 1 and spans["dp_attn"] == 8
    assert {p.kind: p.max_nodes for p in placements(default, 8, 8)}["pp"] == 4


def test_links_and_step_time_follow_the_order() -> None:
    """The DP group leaves the node under tp-cp-ep-pp-dp and PP stays inside it: the links the step
    time prices change with the order."""
    problem = load_problem_text(DENSE)
    default = links_for(problem.hardware.topology, _mapping(RankOrder.pp_last))
    swapped = links_for(problem.hardware.topology, _mapping(RankOrder.dp_last))
    assert default.pp.over_network and not swapped.pp.over_network
    assert swapped.dp_cp.domains > default.dp_cp.domains
    times = {o: explain(problem, _mapping(o), repairs=0).step.step_time_s for o in RankOrder}
    assert times[RankOrder.pp_last] != times[RankOrder.dp_last]


def test_megatron_flag_sets_the_order_and_its_rule() -> None:
    """`use_tp_pp_dp_mapping: true` in the problem's options gives every mapping that order; with MoE
    folding where TP·CP ≠ ETP·EP Megatron refuses it (parallel_state.py:898-902)."""
    problem = load_problem_text(DENSE + "framework: {options: {use_tp_pp_dp_mapping: true}}\n")
    account = explain(problem, _mapping(RankOrder.pp_last), repairs=0)
    assert account.mapping.rank_order == RankOrder.dp_last
    assert account.as_dict()["mapping"]["rank_order"] == "tp-cp-ep-pp-dp"
    moe = load_problem_text(DENSE.replace("llama-3.1-8b", "mixtral-8x7b"))
    bad = Mapping(gpus=64, gbs=256, seq_len=4096, tp=2, pp=4, ep=8, etp=1, rank_order=RankOrder.dp_last)
    verdict = explain(moe, bad, repairs=0)
    assert "non-pp-last-order-requires-equal-dp" in {v.rule for v in verdict.evaluation.violations}


def test_search_offers_the_second_order_only_where_it_differs_and_is_legal() -> None:
    """Rows with tp-cp-ep-pp-dp exist only for PP > 1, TP·CP = ETP·EP, D_a > 1 and links that differ
    from the default order's; a pin in the options or the search section restricts the choice."""
    problem = load_problem_text(DENSE)
    rows = enumerate_rows(problem)
    swapped = [r for r in rows if r.rank_order == RankOrder.dp_last.value]
    assert swapped and all(r.pp > 1 and r.tp * r.cp == r.etp * r.ep for r in swapped)
    assert all(64 // (r.tp * r.cp * r.pp) > 1 for r in swapped)
    topology = problem.hardware.topology
    for r in swapped:
        m = r.mapping(problem)
        assert links_for(topology, m) != links_for(topology, m.model_copy(update={"rank_order": RankOrder.pp_last}))
    five_t = load_problem("problems/5t-moe-asic-4096.yaml")
    assert {r.rank_order for r in enumerate_rows(five_t)} == {RankOrder.pp_last.value}
    pinned = load_problem_text(DENSE + "search: {rank_order: tp-cp-ep-dp-pp}\n")
    assert {r.rank_order for r in enumerate_rows(pinned)} == {RankOrder.pp_last.value}


def test_cli_set_rank_order(tmp_path: Path) -> None:
    """`--set rank_order=…` pins the order for explain, and the JSON mapping reports it."""
    path = tmp_path / "dense.yaml"
    path.write_text(DENSE, encoding="utf-8")
    result = CliRunner().invoke(main, ["explain", str(path), "--set", "tp=2", "--set", "pp=4",
                                       "--set", "rank_order=tp-cp-ep-pp-dp", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["mapping"]["rank_order"] == "tp-cp-ep-pp-dp"
    bad = CliRunner().invoke(main, ["explain", str(path), "--set", "rank_order=pp-first"])
    assert bad.exit_code == 2 and "rank_order" in bad.output
