"""Issue 15: the shortcuts that make solve's per-row work cheap give exactly what the plain computations
give, row by row: the lazily built memory ledger, the FSDP unit buffer over distinct block splits, a
workload pricing each block kind once, rank-order placement by grid, and the memory floor that settles
rows no cut fits."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from stage_tables import all_stage_matrices, flat_bands, min_max_cut

from parasol.constraints.evaluate import evaluate, facts_for
from parasol.constraints.physics.exchanges import grid_links, links_for
from parasol.constraints.physics.memory import _rank_params, fsdp_buffer_bytes, memory_ledger, rank_holdings
from parasol.constraints.physics.memory import block_kind as block_kind_of
from parasol.constraints.physics.pricing import COMM_FIELDS, STAGE_FIELDS
from parasol.constraints.physics.weight_format import problem_weight_format
from parasol.constraints.physics.workload import (
    build_workload,
    routed,
    settings_for,
    stage_blocks,
    stage_blocks_after,
    stage_work,
)
from parasol.constraints.rules.registry import active_constraints
from parasol.problems.derived import default_layout, derive
from parasol.problems.loader import load_problem, load_problem_text
from parasol.problems.mapping import RankOrder
from parasol.problems.model.params import block_params
from parasol.solver.search.costs import (
    block_kinds,
    interval_counts,
    ledger_means_ratio,
    ledger_parts,
    memory_fields,
    memory_floor_mb,
    memory_floor_ratio,
    memory_key,
    prefix_counts,
    row_costs,
    usable_mb,
    with_states_of,
)
from parasol.solver.search.cuts import rank_counts, some_cut_fits
from parasol.solver.search.savings import (
    bare_memory_floor_any_vpp,
    default_cut_fits,
    default_rank_counts,
    fit_candidates,
    memory_floor_any_vpp,
    open_savings,
    resolve_fit,
    row_problem,
    row_with,
    saving_variant,
    with_saving,
    without_static,
)
from parasol.solver.search.space import distinct_orders, enumerate_rows, rank_order_choices
from tests.every_cut import random_cuts

ROOT = Path(__file__).resolve().parents[1]
QWEN = """
model: qwen3-235b-a22b
training: {seq_len: 4096, global_batch: 1024}
hardware: {preset: h100-hgx, gpus: 256}
"""
DSV3 = """
model: deepseek-v3
training: {seq_len: 4096, global_batch: 15360, precision: fp8}
hardware: {preset: h800-hgx, gpus: 2048}
"""


def _problems() -> list:
    return [load_problem_text(QWEN), load_problem_text(DSV3), load_problem(ROOT / "problems/deepseek-v4-pro-1024.yaml")]


def _sample(problem, n: int) -> list:  # noqa: ANN001
    rows = enumerate_rows(problem)
    return list(rows[::max(len(rows) // n, 1)][:n])


@pytest.fixture(scope="module")
def problems() -> list:
    return _problems()


def test_lazy_ledger_is_the_ledger_and_is_built_only_when_read(problems: list) -> None:
    """Rules that do not read the ledger leave it unbuilt; read, it is memory_ledger's; every verdict is
    the same as with the ledger read first."""
    for problem in problems:
        for row in _sample(problem, 6):
            mapping = row.mapping(problem, row.default_cut(problem))
            rules = active_constraints(problem)
            quiet = tuple(r for r in rules if not r.needs_ledger())
            assert "ledger" not in evaluate(problem, mapping, quiet).facts.__dict__
            lazy = evaluate(problem, mapping, rules)
            facts = facts_for(problem, mapping)
            eager = memory_ledger(problem.model, facts.mapping, facts.derived, problem.training,
                                  problem.hardware.gpu.usable_hbm_bytes, facts.options)
            assert lazy.ledger == eager
            read_first = facts_for(problem, mapping)
            assert read_first.ledger == eager
            assert tuple(r.judge(read_first) for r in rules) == lazy.verdicts


def test_fsdp_buffer_over_distinct_splits_is_the_largest_block(problems: list) -> None:
    """The FSDP unit buffer equals the largest block's share found by walking every main and MTP block."""
    for problem in problems:
        fsdp = with_saving(problem, "fsdp")
        for row in _sample(fsdp, 8):
            m = row.mapping(fsdp)
            d = derive(fsdp.model, m)
            largest = max(sum(_rank_params(block_params(fsdp.model, b), m, d.experts_per_rank or Fraction(0))[:2])
                          for b in (*fsdp.model.blocks, *fsdp.model.mtp_blocks))
            grad = 4 if fsdp.training.grad_dtype == "fp32" else 2
            weights = problem_weight_format(fsdp, fsdp.spec.framework.options)
            assert weights.parameter == weights.other == 2  # BF16 units: 2·2 B of weights a parameter
            assert fsdp_buffer_bytes(fsdp.model, m, d, fsdp.training, weights) == math.ceil(largest * (4 + grad)) > 0


def test_workload_pricing_each_kind_once_is_stage_by_stage_pricing(problems: list) -> None:
    """A mapping's workload, whose stages share their blocks' additions, has exactly the stages priced
    each on its own."""
    for problem in problems:
        for row in _sample(problem, 5):
            m = row.mapping(problem)
            d = derive(problem.model, m)
            settings = routed(problem, m, settings_for(problem))
            links = links_for(problem.hardware.topology, m)
            blocks = [*problem.model.blocks, *problem.model.mtp_blocks]
            alone = tuple(
                stage_work(problem.model, m, d, problem.training, settings, links,
                           [blocks[i] for i in r.blocks] + (list(problem.model.mtp_blocks) if r.last else []),
                           r.first, r.last)
                for r in rank_holdings(d.layout, m.pp, problem.training.pipeline_schedule))
            assert build_workload(problem, m, d).stages == alone


def test_rank_orders_by_grid_match_placed_mappings(problems: list) -> None:
    """grid_links is links_for on the mapping's grid, and distinct_orders keeps the swapped order exactly
    where the placed mappings' links differ."""
    for problem in problems:
        topology, orders = problem.hardware.topology, rank_order_choices(problem)
        for row in _sample(problem, 12):
            mapping = row.mapping(problem).model_copy(update={"rank_order": RankOrder.pp_last})
            swapped = mapping.model_copy(update={"rank_order": RankOrder.dp_last})
            grid = (topology, problem.gpus, row.tp, row.cp, row.pp, row.ep, row.etp)
            assert grid_links(*grid, RankOrder.pp_last) == links_for(topology, mapping)
            assert grid_links(*grid, RankOrder.dp_last) == links_for(topology, swapped)
            if len(orders) > 1 and row.pp > 1 and row.tp * row.cp == row.etp * row.ep \
                    and problem.gpus // (row.tp * row.cp * row.pp) > 1:
                differ = links_for(topology, mapping) != links_for(topology, swapped)
                assert distinct_orders(problem, orders, row) == (orders if differ else (RankOrder.pp_last,))


def _least_peak_1f1b(c, counts: np.ndarray) -> int:  # noqa: ANN001
    """The least heaviest-rank memory over every cut of a 1F1B row (the exact min-max DP)."""
    memory = [m for _, m in all_stage_matrices(c, counts)]
    return min_max_cut(memory, counts.shape[0] - 1)[0]


def _floor_rank_by_rank(c, totals: np.ndarray) -> Fraction:  # noqa: ANN001
    """memory_floor_mb's two weighted means computed rank by rank, as its docstring states them, plus the
    least of what each rank holds besides (costs.least_held)."""
    inflight = [Fraction(f) for f in c.inflight]
    spread = sum(1 / f for f in inflight)
    bounds = []
    for weights in ([(1 / f) / spread for f in inflight], [Fraction(1, len(inflight))] * len(inflight)):
        edges = sum(w * (s + f * a) for w, s, a, f in zip(weights, c.edge_static, c.edge_activation, inflight, strict=True))
        blocks = sum(int(n) * min(w * (s + f * a) for w, f in zip(weights, inflight, strict=True))
                     for n, s, a in zip(totals, c.kind_static, c.kind_activation, strict=True))
        bounds.append(edges + blocks + c.workspace_mb)
    held_kinds = [k for k, n in enumerate(totals) if n]
    besides = []
    for r in range(c.row.pp):
        if c.row.vpp > 1 and r in (0, c.row.pp - 1):
            besides.append(c.edge_peak[r] + (c.dispatch_mb if c.edge_moe[r] else 0))
            continue
        surely_moe = c.edge_moe[r] or all(c.kind_moe[k] for k in held_kinds)
        besides.append(max([c.edge_peak[r]] + [min(c.kind_peak[k] for k in held_kinds)])
                       + (c.dispatch_mb if surely_moe else 0))
    return max(bounds) + min(besides)


def test_memory_floor_is_below_every_cut_and_fitting_is_unchanged(problems: list) -> None:
    """The floor never exceeds the least peak of a 1F1B row, nor the peak of an interleaved row's default
    cut; a row whose default cut fits is one the cut search finds fitting; resolve_fit with both shortcuts
    answers as cuts.some_cut_fits alone does, and its quick candidates (savings.fit_candidates) hold that
    answer, alone when they call it settled, with the memory tables each candidate's own problem gives."""
    pruned = deferred = 0
    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        totals, usable, savings = counts[0, -1], usable_mb(problem), open_savings(problem)
        for row in _sample(problem, 16):
            c = row_costs(problem, row, None)
            for costs in (c, without_static(c)):
                floor = memory_floor_mb(costs, totals)
                assert floor == _floor_rank_by_rank(costs, totals)
                if row.vpp == 1:
                    assert floor <= _least_peak_1f1b(costs, counts)
                else:
                    layout = row.default_cut(problem)
                    starts = np.cumsum((0, *layout))
                    per_rank = [np.zeros(len(totals), dtype=np.int64) for _ in range(row.pp)]
                    for k, n in enumerate(layout):
                        per_rank[k % row.pp] += counts[starts[k], starts[k] + n]
                    assert floor <= max(costs.stage_memory(r, tuple(int(x) for x in per_rank[r]))
                                        for r in range(row.pp))
                pruned += floor > usable
                assert not default_cut_fits(costs, counts, usable) or some_cut_fits(costs, counts, usable)
            plain = row if some_cut_fits(c, counts, usable) else None
            if plain is None and savings and some_cut_fits(without_static(c), counts, usable):
                plain = next((v for v in (dataclasses.replace(row, saving=s) for s in savings)
                              if some_cut_fits(row_costs(with_saving(problem, v.saving), v, None), counts, usable)),
                             None)
            candidates = fit_candidates(problem, row, savings, counts, usable)
            assert candidates.costs == tuple(row_costs(row_problem(problem, v), v, None) for v in candidates.rows)
            assert resolve_fit(candidates, counts, usable) == (plain, True)
            assert plain is None or plain in candidates.rows
            if candidates.settled:
                assert candidates.rows == ((plain,) if plain else ())
            deferred += not candidates.settled
    assert pruned > 0 and deferred > 0


def test_worst_placed_group_is_the_one_placement_ranks_worst(problems: list) -> None:
    """group_link's worst group, placed all at once, is the first of the groups _placement ranks worst; the
    bases it examines (rank_groups.residue_bases, built over the indices that add new residues only) are the
    first base of each residue modulo the rack in the whole lattice of bases, and no group placed anywhere
    lies worse."""
    from parasol.constraints.physics import comm
    from parasol.problems.rank_groups import lattice, residue_bases

    for problem in problems:
        topology = problem.hardware.topology
        for row in _sample(problem, 10):
            m = row.mapping(problem)
            order = comm.order_of(m)
            for kind in ("tp", "cp", "ep", "pp", "dp_cp", "dp_expert"):
                grid, dims = comm.GROUP_KINDS[kind]
                sizes = comm.dense_sizes(m) if grid == "dense" else comm.expert_sizes(m)
                offsets = comm._group_offsets(sizes, dims, order)
                bases = lattice(sizes, [d for d in order if d not in dims], order)
                _, first = np.unique(bases % topology.gpus_per_rack, return_index=True)
                assert residue_bases(sizes, dims, topology.gpus_per_rack, order).tolist() == sorted(bases[first])
                plain = max(([int(b) + int(o) for o in offsets] for b in sorted(bases[first])),
                            key=lambda members: comm._placement(topology, members))
                assert comm._worst_placed(topology, offsets, np.sort(bases[first])).tolist() == plain
                everywhere = max(comm._placement(topology, [int(b) + int(o) for o in offsets]) for b in bases[:4096])
                assert comm._placement(topology, plain) >= everywhere


def test_row_costs_edges_are_every_stage_priced_on_its_own(problems: list) -> None:
    """row_costs prices the first, a middle and the last rank's edges once, and keeps contributions per
    problem for rows that differ only in VPP or rank order: every stage's edge tables and every kind's are
    those of their own edge_contribution and block_contribution."""
    from parasol.constraints.physics.memory import block_contribution, edge_contribution
    from parasol.solver.search.costs import kind_representatives

    for problem in problems:
        options = problem.spec.framework.options
        for base in _sample(problem, 8):
            other = RankOrder.dp_last if base.rank_order == RankOrder.pp_last else RankOrder.pp_last
            for row in (base, dataclasses.replace(base, vpp=1), dataclasses.replace(base, rank_order=other.value)):
                c = row_costs(problem, row, None)
                m = row.mapping(problem)
                d = derive(problem.model, m)
                alone = [edge_contribution(problem.model, m, d, problem.training, s == 0, s == row.pp - 1, options)
                         for s in range(row.pp)]
                assert c.edge_bytes == tuple((e.static, e.activation, e.recompute_peak) for e in alone)
                assert c.edge_moe == tuple(e.moe for e in alone)
                kinds = [block_contribution(problem.model, m, d, problem.training, b, options)
                         for b in kind_representatives(problem).values()]
                assert c.kind_bytes == tuple((k.static, k.activation, k.recompute_peak) for k in kinds)


def _assert_ledger_tables(c, problem, row) -> None:  # noqa: ANN001 - a test's check
    """c's memory tables are the whole contributions and buffers the ledger computes for `row` alone under
    `problem`'s options."""
    from parasol.constraints.physics.memory import (
        block_contribution,
        dispatch_buffer_bytes,
        edge_contribution,
        workspace_bytes,
    )
    from parasol.solver.search.costs import kind_representatives

    options, model, training = problem.spec.framework.options, problem.model, problem.training
    m = row.mapping(problem)
    d = derive(model, m)
    weights = problem_weight_format(problem, options)
    edges = [edge_contribution(model, m, d, training, s == 0, s == row.pp - 1, options, weights) for s in range(row.pp)]
    kinds = [block_contribution(model, m, d, training, b, options, weights)
             for b in kind_representatives(problem).values()]
    assert c.edge_bytes == tuple((e.static, e.activation, e.recompute_peak) for e in edges)
    assert c.kind_bytes == tuple((k.static, k.activation, k.recompute_peak) for k in kinds)
    assert (c.edge_moe, c.kind_moe) == (tuple(e.moe for e in edges), tuple(k.moe for k in kinds))
    assert c.dispatch_bytes == dispatch_buffer_bytes(model, m, training)
    assert c.fixed_bytes == workspace_bytes(training) + fsdp_buffer_bytes(model, m, d, training, weights)


def test_memoised_halves_are_the_ledger(problems: list) -> None:
    """row_costs keeps a block's (and an edge's) parameter state and its saved activations apart, each per
    problem and the fields it reads, so rows that differ in CP, the microbatch or recompute share the first
    and rows that differ in EP or PP (past 2: the same edges) the second: every row's tables, under each
    saving and with CPU offloading, are those of the whole contributions and buffers the ledger computes for
    that row alone."""
    offloading = load_problem_text(QWEN + "framework: {options: {cpu_offloading: true, cpu_offloading_num_layers: 3}}\n")
    variants = [with_saving(p, s) for p in problems for s in ("none", *open_savings(p))] + [offloading]
    for problem in variants:
        rows = enumerate_rows(problem)
        spread = rows[::max(len(rows) // 3, 1)]
        shared = {(r.pp, r.tp, r.ep, r.etp) for r in spread}
        depths = {(r.tp, r.etp, r.cp, r.mbs, r.recompute) for r in spread}
        for row in ([r for r in rows if (r.pp, r.tp, r.ep, r.etp) in shared][:40]
                    + [r for r in rows if (r.tp, r.etp, r.cp, r.mbs, r.recompute) in depths and r.vpp == 1][:40]
                    + list(rows[::max(len(rows) // 12, 1)][:12])):
            _assert_ledger_tables(row_costs(problem, row, None), problem, row)


def test_memory_tables_read_no_option_a_row_chooses(problems: list) -> None:
    """row_costs builds a row's memory tables on the problem without the options it chooses (dispatcher, flex
    backend, CP communication type and levels), shared by every row of its grid (costs.memory_key): the ledger's
    contributions and buffers computed under the row's own options (space.with_choices) are those tables, on
    the option variants a row is settled among (space.choice_variants: every dispatcher and CP type)."""
    from parasol.solver.search.space import choice_variants, with_choices

    seen = set()
    for problem in problems:
        plain = enumerate_rows(problem)
        rows = [v for r in plain[::max(len(plain) // 12, 1)] for v in choice_variants(problem, r) if v.chooses]
        for row in rows:
            seen.add(tuple(row.settings().items()))
            _assert_ledger_tables(row_costs(problem, row, None), with_choices(problem, row), row)
    kinds = {name for settings in seen for name, _ in settings}
    assert {"moe_token_dispatcher_type", "cp_comm_type"} <= kinds and len(seen) >= 4


def test_saving_tables_moved_from_the_plain_ones_are_their_own() -> None:
    """A saving's memory tables built from the row's own (row_costs' moved_from: the saving moves the parameter
    state and the FSDP unit buffers, the saved activations stay) are the tables its problem gives alone, on
    every pipeline depth (one, two and more edges) and with CPU offloading, under every open saving."""
    offloading = QWEN + "framework: {options: {cpu_offloading: true, cpu_offloading_num_layers: 3}}\n"
    for text in (QWEN, DSV3, offloading):
        moved, alone = load_problem_text(text), load_problem_text(text)
        rows = enumerate_rows(moved)
        by_depth = {pp: [r for r in rows if r.pp == pp] for pp in sorted({r.pp for r in rows})}
        sample = [r for pp_rows in by_depth.values() for r in pp_rows[::max(len(pp_rows) // 6, 1)][:6]]
        assert {1, 2, 4} <= by_depth.keys() and open_savings(moved)
        for row in sample:
            plain = row_costs(moved, row, None)
            for saving in open_savings(moved):
                variant = dataclasses.replace(row, saving=saving)
                c = row_costs(with_saving(moved, saving), variant, None, plain)
                assert c == row_costs(with_saving(alone, saving), variant, None), (variant, text[:20])
                assert c.kind_activation == plain.kind_activation and c.edge_peak == plain.edge_peak


def test_states_of_a_saving_on_the_plain_tables_are_its_tables() -> None:
    """costs.with_states_of (the plain tables with a saving's parameter state, workspace and FSDP unit buffers)
    holds the memory fields row_costs builds under that saving, on every pipeline depth and open saving."""
    for text in (QWEN, DSV3):
        problem = load_problem_text(text)
        rows = enumerate_rows(problem)
        by_depth = {pp: [r for r in rows if r.pp == pp] for pp in sorted({r.pp for r in rows})}
        assert {1, 2, 4} <= by_depth.keys() and open_savings(problem)
        for row in (r for pp_rows in by_depth.values() for r in pp_rows[::max(len(pp_rows) // 5, 1)][:5]):
            plain = row_costs(problem, row, None)
            for saving in open_savings(problem):
                alone = row_costs(with_saving(problem, saving), saving_variant(row, saving), None)
                assert memory_fields(with_states_of(plain, with_saving(problem, saving))) == memory_fields(alone)


def test_memory_floor_any_vpp_bounds_every_vpp_and_is_the_floor_at_vpp_one(problems: list) -> None:
    """savings.memory_floor_any_vpp, by which solve drops a row's whole group (its degrees, microbatch and
    recompute at every VPP and rank order), is at most every VPP's memory floor (reprice.memory_means_units) and
    peak of the default and random cuts and cuts whose edge rank holds no block, under each saving, and is that
    floor at VPP 1 with the edge ranks allowed to hold no block (as from VPP 2 on); below it for some group.
    savings.bare_memory_floor_any_vpp (the group dropped at once when beaten) is at most it under every saving,
    and below it for some."""
    from parasol.solver.search.reprice import memory_means_units, memory_units

    rng = np.random.default_rng(41)
    below = bare_below = 0
    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        blocks = counts.shape[0] - 1
        groups: dict[tuple, list] = {}
        for row in enumerate_rows(problem):
            groups.setdefault(memory_key(row), []).append(row)
        interleaved = [g for g in groups.values() if len({r.vpp for r in g}) > 2]
        for group in interleaved[::max(len(interleaved) // 6, 1)][:6]:
            bare = bare_memory_floor_any_vpp(problem, group[0], counts)
            plain = row_costs(problem, dataclasses.replace(group[0], vpp=1), None)
            assert bare == memory_means_units(without_static(plain), counts, open_edges=True), group[0]
            for saving in ("none", *open_savings(problem)):
                floor = memory_floor_any_vpp(problem, group[0], saving, counts)
                assert bare <= floor, (group[0], saving)
                bare_below += bare < floor
                for row in group:
                    variant = dataclasses.replace(row, saving=saving)
                    c = row_costs(with_saving(problem, saving), variant, None)
                    own = memory_means_units(c, counts)
                    assert floor <= own, (variant, floor, own)
                    assert row.vpp > 1 or floor == memory_means_units(c, counts, open_edges=True), variant
                    below += floor < own
                    stages = row.pp * row.vpp
                    layouts = [default_layout(blocks, row.pp, row.vpp), *random_cuts(rng, blocks, stages, row.pp, 2)]
                    if row.vpp > 1:
                        layouts += [x for x in (_edge_empty_layout(blocks, row.pp, row.vpp, r) for r in (0, row.pp - 1))
                                    if x is not None]
                    for layout in layouts:
                        ranks = rank_counts(tuple(int(x) for x in layout), row.pp, counts)
                        assert floor <= memory_units(max(c.stage_bytes(r, n) for r, n in enumerate(ranks))), variant
    assert below > 0 and bare_below > 0


def test_saving_variant_is_the_replaced_row(problems: list) -> None:
    """savings.saving_variant and row_with are dataclasses.replace: equal, hashed and ordered alike, the row
    itself unchanged."""
    for problem in problems:
        for row in _sample(problem, 8):
            for saving in ("fsdp", "optimizer-offload"):
                variant, replaced = saving_variant(row, saving), dataclasses.replace(row, saving=saving)
                assert variant == replaced and hash(variant) == hash(replaced) and not variant < replaced
                assert dataclasses.astuple(variant) == dataclasses.astuple(replaced) and row.saving == "none"
            variant, replaced = row_with(row, vpp=1, saving="fsdp"), dataclasses.replace(row, vpp=1, saving="fsdp")
            assert variant == replaced and hash(variant) == hash(replaced)
            assert dataclasses.astuple(variant) == dataclasses.astuple(replaced) and row.saving == "none"


def test_ledger_floor_is_the_tables_floor(problems: list) -> None:
    """costs.ledger_means_ratio (the weighted means floor summed from the ledger's parts, by which solve prices its
    groups' floors at any VPP) is memory_floor_ratio in bytes of the row's own tables: as they are, with each open
    saving's parameter state and buffers (with_states_of) and with none (without_static), at every VPP sampled and
    with the edge ranks free to hold no block or not."""
    compared = 0
    for problem in problems:
        totals = interval_counts(prefix_counts(problem, block_kinds(problem)))[0, -1]
        for row in _sample(problem, 12):
            tables = row_costs(problem, row, None)
            for open_edges in (True, False):
                parts = ledger_parts(problem, row, totals, open_edges)
                states = [(problem, tables), (None, without_static(tables))] + [
                    (with_saving(problem, s), with_states_of(tables, with_saving(problem, s)))
                    for s in open_savings(problem)]
                for saving_problem, table in states:
                    assert (Fraction(*ledger_means_ratio(parts, saving_problem))
                            == Fraction(*memory_floor_ratio(table, totals, True, open_edges))), (row, open_edges)
                    compared += 1
    assert compared > 100


def test_derive_memo_is_the_computation(problems: list) -> None:
    """derive's memo gives what computing the mapping afresh gives, and rows differing only in recompute
    or rank order share one entry."""
    from parasol.problems.derived import _derive

    for problem in problems:
        for row in _sample(problem, 10):
            for layout in (None, row.default_cut(problem)):
                m = row.mapping(problem, layout)
                assert derive(problem.model, m) == _derive(problem.model, m)
                other = m.model_copy(update={"recompute": "full", "rank_order": RankOrder.dp_last})
                assert derive(problem.model, other) is derive(problem.model, m)


def test_stage_times_price_each_stage_as_alone(problems: list) -> None:
    """stage_times_s prices stages together (repeated ones included) exactly as each on its own."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes

    for problem in problems:
        model = CalibratedStageTimes(problem)
        kinds = len(model.kinds)
        for row in _sample(problem, 4):
            m = row.mapping(problem)
            d = derive(problem.model, m)
            probes = [(s, counts) for s in range(row.pp) for counts in ((0,) * kinds, (1,) * kinds)]
            together = model.stage_times_s(m, d, probes)
            assert together == [model.stage_times_s(m, d, [probe])[0] for probe in probes]


def _stage_inputs(problem, row) -> tuple:  # noqa: ANN001
    """A row's mapping, derived sizes, routed settings and links: what a stage's work is built from."""
    m = row.mapping(problem)
    return m, derive(problem.model, m), routed(problem, m, settings_for(problem)), links_for(problem.hardware.topology, m)


def test_stage_work_sharing_additions_is_stage_work_alone(problems: list) -> None:
    """Stages priced with shared block additions and stages (rank_work's and stage_times_s's probes: no
    block, one and two of a kind, at every rank position) are exactly the stages priced on their own."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes

    for problem in problems:
        reps = list(CalibratedStageTimes(problem).kinds.values())
        for row in _sample(problem, 4):
            m, d, settings, links = _stage_inputs(problem, row)
            known: dict = {}
            for first, last in ((True, False), (False, False), (False, True), (True, True)):
                tail = list(problem.model.mtp_blocks) if last else []
                for held in ([], *([b] for b in reps), *([b, b] for b in reps), reps):
                    args = (problem.model, m, d, problem.training, settings, links, held + tail, first, last)
                    assert stage_work(*args, known) == stage_work(*args)
            assert known



def test_stage_blocks_after_a_middle_rank_is_stage_blocks_alone(problems: list) -> None:
    """The end ranks' blocks half built on from the middle rank's (workload.stage_blocks_after, what rank_work
    does from three ranks on) is exactly stage_blocks of the whole stage, for every held set and position."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes

    for problem in problems:
        reps = list(CalibratedStageTimes(problem).kinds.values())
        for row in _sample(problem, 4):
            m, d, settings, links = _stage_inputs(problem, row)
            args = (problem.model, m, d, problem.training, settings, links)
            for held in ([], *([b] for b in reps), *([b, b] for b in reps), reps):
                body = stage_blocks(*args, held, False, False)
                for first, last in ((True, False), (False, True), (True, True)):
                    tail = list(problem.model.mtp_blocks) if last else []
                    after = stage_blocks_after(body, *args, held, tail, first, last)
                    assert after == stage_blocks(*args, held + tail, first, last)
                assert body == stage_blocks(*args, held, False, False)

def _stage_vector(work) -> np.ndarray:  # noqa: ANN001 - StageWork
    """A rank's StageWork as the vector pricing.STAGE_VECTOR names, written field by field from the StageWork
    (the reference rank_work's vectors, written from a stage's sums, are checked against)."""
    values = [float(getattr(work, f)) for f in STAGE_FIELDS]
    for f in COMM_FIELDS:
        term = getattr(work, f)
        values += [term.nvlink_s, term.network_s, term.latency_s]
    return np.array(values)


def _rank_vectors_alone(model, problem, m, d) -> list:  # noqa: ANN001 - CalibratedStageTimes, Problem
    """Per rank position, the stage vectors of no block, one and two of each kind, each from stage_work on
    its own (what rank_work read before it kept halves across mappings)."""
    settings, links = routed(problem, m, model.settings), model.links(m)
    reps = list(model.kinds.values())
    out = []
    for first, last in sorted({(s == 0, s == m.pp - 1) for s in range(m.pp)}):
        tail = list(problem.model.mtp_blocks) if last else []
        out.append(np.array([_stage_vector(stage_work(problem.model, m, d, problem.training, settings, links,
                                                      held + tail, first, last))
                             for held in ([], *([b] for b in reps), *([b, b] for b in reps))]))
    return out


def test_rank_work_from_shared_halves_is_stage_work_alone(problems: list) -> None:
    """rank_work, which keeps a stage's blocks-and-edges half across PP, VPP and rank orders and its
    data-parallel half across MBS, recompute and the options (sibling models share both), gives exactly the
    rank work of stages priced on their own, whichever mapping built the halves it reuses."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.solver.search.space import choice_variants, with_choices

    for problem in problems:
        model = CalibratedStageTimes(problem)
        rows = _sample(problem, 10)
        rows += [dataclasses.replace(r, pp=pp) for r in rows[:3] for pp in (1, 2, 4) if pp != r.pp]
        rows += [dataclasses.replace(r, mbs=2, recompute="full") for r in rows[:3]]
        rows += [v for r in rows[:4] for v in choice_variants(problem, r)]
        for row in rows:
            chosen = with_choices(problem, row)
            m = row.mapping(chosen)
            if m.gpus % (m.tp * m.pp * m.cp) or m.gpus % (m.expert_tp * m.ep * m.pp):
                continue
            d = derive(chosen.model, m)
            sibling = model.for_problem(chosen)
            work = sibling.rank_work(m, d)
            alone = _rank_vectors_alone(sibling, chosen, m, d)
            kinds = len(sibling.kinds)
            for s in range(m.pp):
                first, last = s == 0, s == m.pp - 1
                vectors = alone[sorted({(r == 0, r == m.pp - 1) for r in range(m.pp)}).index((first, last))]
                empty, one, two = vectors[0], vectors[1:1 + kinds], vectors[1 + kinds:]
                assert np.array_equal(work.empty[s], empty)
                assert np.array_equal(work.slope[s], two - one)
                assert np.array_equal(work.onset[s], one - empty - (two - one))


def test_hardware_flops_memo_is_the_sum(problems: list) -> None:
    """hardware_flops_per_token's memo gives the sum over every block for each recompute choice."""
    from parasol.constraints.physics.flops import (
        block_flops,
        hardware_flops_per_token,
        model_flops_per_token,
        recomputed_flops,
    )
    from parasol.problems.mapping import Recompute

    for problem in problems:
        model, seq = problem.model, problem.training.seq_len
        for recompute in Recompute:
            for modules in ((), ("core_attn",), ("mlp", "core_attn")):
                plain = model_flops_per_token(model, seq) + sum(
                    recomputed_flops(recompute, modules, block_flops(model, b, seq)).total
                    for b in (*model.blocks, *model.mtp_blocks))
                assert hardware_flops_per_token(model, seq, recompute, modules) == plain
                assert hardware_flops_per_token(model, seq, recompute, modules) == plain


def test_holds_is_evaluate_feasible(problems: list) -> None:
    """holds (no verdicts, first failure stops it) answers as evaluate(...).feasible for every rule set the
    search judges, on rows that pass and rows that fail."""
    from parasol.constraints.evaluate import holds
    from parasol.solver.search.program import choice_rules, judged_rules, program_rules
    from parasol.solver.search.space import choice_variants, with_choices

    answers = set()
    for problem in problems:
        for row in _sample(problem, 10):
            for variant in choice_variants(problem, row):
                chosen = with_choices(problem, variant)
                sets = (active_constraints(chosen), program_rules(chosen), choice_rules(chosen),
                        judged_rules(chosen, "row"), judged_rules(chosen, "cut"))
                for layout in (None, row.default_cut(problem), (1,) * row.pp):
                    mapping = variant.mapping(chosen, layout)
                    for rules in sets:
                        answer = evaluate(chosen, mapping, rules).feasible
                        assert holds(chosen, mapping, rules) == answer
                        answers.add(answer)
    assert answers == {True, False}


def test_stage_matrices_are_the_stage_formulas(problems: list) -> None:
    """all_stage_matrices (the blocks' interval sums once, each stage adding its edge and in-flight share)
    gives, for every stage and block interval, RowCosts.stage_time_us and stage_memory of that stage."""
    rng = np.random.default_rng(23)
    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        blocks = counts.shape[0] - 1
        for row in _sample(problem, 6):
            c = row_costs(problem, row, None)
            for s, (time, memory) in enumerate(all_stage_matrices(c, counts)):
                for i, j in sorted({tuple(sorted(rng.choice(blocks + 1, 2, replace=False))) for _ in range(12)}):
                    held = tuple(int(x) for x in counts[i, j])
                    assert time[i, j] == c.stage_time_us(s, held) and memory[i, j] == c.stage_memory(s, held)


def test_ranks_memory_is_stage_memory_rank_by_rank(problems: list) -> None:
    """RowCosts.ranks_memory (every rank at once, as default_cut_fits judges the default cut) gives each rank's
    stage_memory, with and without static memory, on the default cut and on random per-rank counts; the
    default cut fits exactly when its heaviest rank does."""
    rng = np.random.default_rng(29)
    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        for row in _sample(problem, 40):
            plain = row_costs(problem, row, None)
            default = default_rank_counts(counts, row.pp, row.vpp)
            layout = row.default_cut(problem)
            assert default.tolist() == [list(r) for r in rank_counts(layout, row.pp, counts)]
            for c in (plain, without_static(plain)):
                for held in (default, rng.integers(0, 3, size=(row.pp, counts.shape[2]))):
                    expected = [c.stage_memory(r, tuple(int(x) for x in held[r])) for r in range(row.pp)]
                    assert c.ranks_memory(held).tolist() == expected
                heaviest = max(c.stage_memory(r, tuple(int(x) for x in default[r])) for r in range(row.pp))
                assert default_cut_fits(c, counts, heaviest) and not default_cut_fits(c, counts, heaviest - 1)


def test_default_cut_fits_prices_the_ranks_that_may_be_heaviest(problems: list) -> None:
    """default_cut_fits, pricing only the first, the last and the middle ranks with the least and the most in
    flight among those holding the same blocks, answers as every rank's stage_memory does: on row_costs' tables,
    with no static memory, with middle edges alike but changed (activations of either sign), and with middle
    edges that differ (every rank priced)."""
    rng = np.random.default_rng(31)
    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        for row in [r for r in _sample(problem, 60) if r.pp > 2][:30]:
            plain = row_costs(problem, row, None)
            middle = row.pp - 2
            shift = int(rng.integers(-40, 40))
            alike = dataclasses.replace(plain, edge_activation=(plain.edge_activation[0],) + (shift,) * middle
                                        + (plain.edge_activation[-1],))
            differ = dataclasses.replace(plain, edge_static=tuple(s + int(rng.integers(0, 500)) for s in plain.edge_static))
            default = default_rank_counts(counts, row.pp, row.vpp)
            for c in (plain, without_static(plain), alike, differ):
                heaviest = max(c.stage_memory(r, tuple(int(x) for x in default[r])) for r in range(row.pp))
                assert default_cut_fits(c, counts, heaviest) and not default_cut_fits(c, counts, heaviest - 1)


def test_memory_floor_in_bytes_is_below_every_cut(problems: list) -> None:
    """reprice.memory_floor_bytes (the floor solve judges rows by, with what every rank holds besides its
    blocks) never exceeds the ledger's peak bytes (RowCosts.stage_bytes) of the default cut or of random
    cuts, under every saving; the recompute and dispatch part lifts it on some row."""
    from parasol.solver.search.cuts import rank_counts
    from parasol.solver.search.reprice import memory_floor_bytes

    rng = np.random.default_rng(29)
    lifted = 0
    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        blocks = counts.shape[0] - 1
        for row in _sample(problem, 10):
            for saving in ("none", *open_savings(problem)):
                variant = dataclasses.replace(row, saving=saving)
                c = row_costs(with_saving(problem, saving), variant, None)
                floor = memory_floor_bytes(c, counts)
                stages = row.pp * row.vpp
                layouts = [default_layout(blocks, row.pp, row.vpp), *random_cuts(rng, blocks, stages, row.pp, 4)]
                for layout in layouts:
                    ranks = rank_counts(tuple(int(x) for x in layout), row.pp, counts)
                    assert floor <= max(c.stage_bytes(r, n) for r, n in enumerate(ranks)), (variant, layout)
                lifted += floor > memory_floor_bytes(dataclasses.replace(
                    c, kind_bytes=tuple((s, a, 0) for s, a, _ in c.kind_bytes),
                    edge_bytes=tuple((s, a, 0) for s, a, _ in c.edge_bytes), dispatch_bytes=0), counts)
    assert lifted > 0


def _least_peak(weight, pp: int, counts: np.ndarray) -> int:  # noqa: ANN001 - RowCosts.stage_bytes or stage_memory
    """The least over every contiguous cut (one virtual stage per rank, each at least one block) of the
    heaviest rank's `weight(stage, counts)`, by a dynamic program over (stage, first block)."""
    blocks = counts.shape[0] - 1
    best = {blocks: 0}
    for s in reversed(range(pp)):
        best = {i: min(max(weight(s, tuple(int(x) for x in counts[i, j])), best[j]) for j in best if j > i)
                for i in range(s, blocks - (pp - 1 - s)) if any(j > i for j in best)}
    return best[0]


def test_whole_block_memory_floor_is_below_every_cut_and_often_exact(problems: list) -> None:
    """costs.whole_block_memory_floor (ranks hold whole blocks, each at its least bytes) never exceeds the
    printed peak-memory units of the least-memory contiguous cut (a dynamic program over every cut), nor
    in MB the least cut's RowCosts.stage_memory (what savings.quick_fit compares), nor random interleaved
    cuts, and it meets the least cut on some row of a model with one kind of
    block, where the weighted means fall short (a rank holding 2 of 94 blocks)."""
    from parasol.solver.search.costs import whole_block_memory_floor
    from parasol.solver.search.cuts import rank_counts
    from parasol.solver.search.reprice import memory_floor_bytes, memory_floor_units, memory_units

    rng = np.random.default_rng(31)
    exact = lifted = 0
    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        blocks = counts.shape[0] - 1
        rows = enumerate_rows(problem)
        plain = [r for r in rows if r.vpp == 1 and r.pp > 1]
        interleaved = [r for r in rows if r.vpp > 1]
        for row in [plain[k] for k in rng.choice(len(plain), 6, replace=False)]:
            c = row_costs(problem, row, None)
            floor = memory_floor_units(c, counts)
            least = memory_units(_least_peak(c.stage_bytes, row.pp, counts))
            assert floor <= least, row
            assert whole_block_memory_floor(c, counts[0, blocks], 1, in_bytes=False) <= \
                _least_peak(c.stage_memory, row.pp, counts), row
            exact += floor == least
            lifted += floor > memory_units(memory_floor_bytes(c, counts))
        for row in [interleaved[k] for k in rng.choice(len(interleaved), min(6, len(interleaved)), replace=False)]:
            c = row_costs(problem, row, None)
            floor = memory_floor_units(c, counts)
            stages = row.pp * row.vpp
            for layout in random_cuts(rng, blocks, stages, row.pp, 4):
                ranks = rank_counts(layout, row.pp, counts)
                assert floor <= memory_units(max(c.stage_bytes(r, n) for r, n in enumerate(ranks))), row
    assert exact > 0 and lifted > 0


def _edge_empty_layout(blocks: int, pp: int, vpp: int, empty: int) -> tuple[int, ...] | None:
    """A cut of an interleaved row whose rank `empty` (the first or the last) holds no block, the blocks spread
    evenly over every other virtual stage (each at least one); None when there are too few blocks."""
    held = [k for k in range(pp * vpp) if k % pp != empty]
    if blocks < len(held):
        return None
    share, extra = divmod(blocks, len(held))
    sizes = dict.fromkeys(range(pp * vpp), 0)
    for i, k in enumerate(held):
        sizes[k] = share + (i < extra)
    return tuple(sizes[k] for k in range(pp * vpp))


def test_memory_floors_hold_when_an_edge_rank_holds_no_block(problems: list) -> None:
    """An interleaved row's first or last rank may hold no block at all (empty_stages.open_stages): then it
    holds no block's recompute working set nor, unless its edge is MoE, the dispatch buffers, so the memory
    floors (the weighted means in MB and bytes, the whole-block bound, the printed units) never exceed such a
    cut's peak. On generated problem 6 the cut 1 1 1 0 2 2 2 0 of PP 4 VPP 2 (CP 2, full recompute) leaves the
    last rank empty at 2.91 GB printed, its heaviest rank: the floor took a block's working set on it (2.98)."""
    from parasol.solver.search.costs import whole_block_memory_floor
    from parasol.solver.search.reprice import memory_floor_bytes, memory_floor_units, memory_units
    from tests.test_solve_reference import GENERATED

    generated = load_problem_text(GENERATED[6])
    checked = 0
    for problem in (*problems, generated):
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        blocks, totals = counts.shape[0] - 1, counts[0, counts.shape[0] - 1]
        rows = [r for r in enumerate_rows(problem) if r.vpp > 1]
        rng = np.random.default_rng(37)
        for row in [rows[k] for k in rng.choice(len(rows), min(12, len(rows)), replace=False)]:
            c = row_costs(problem, row, None)
            for empty in (0, row.pp - 1):
                layout = _edge_empty_layout(blocks, row.pp, row.vpp, empty)
                if layout is None:
                    continue
                ranks = rank_counts(layout, row.pp, counts)
                peak_bytes = max(c.stage_bytes(r, n) for r, n in enumerate(ranks))
                peak_mb = max(c.stage_memory(r, n) for r, n in enumerate(ranks))
                assert memory_floor_units(c, counts) <= memory_units(peak_bytes), (row, layout)
                assert memory_floor_bytes(c, counts) <= peak_bytes, (row, layout)
                assert memory_floor_mb(c, totals) <= peak_mb, (row, layout)
                assert whole_block_memory_floor(c, totals, 1, in_bytes=False) <= peak_mb, (row, layout)
                assert memory_floor_any_vpp(problem, row, "none", counts) <= memory_units(peak_bytes), (row, layout)
                checked += 1
    row = next(r for r in enumerate_rows(generated) if (r.pp, r.vpp, r.cp, str(r.recompute)) == (4, 2, 2, "full"))
    c = row_costs(generated, row, None)
    counts = interval_counts(prefix_counts(generated, block_kinds(generated)))
    ranks = rank_counts((1, 1, 1, 0, 2, 2, 2, 0), 4, counts)
    assert memory_units(max(c.stage_bytes(r, n) for r, n in enumerate(ranks))) == 291
    assert memory_floor_units(c, counts) <= 291
    assert checked > 20


def test_floor_without_static_bounds_every_saving() -> None:
    """A row's memory floors with its weights, gradients and optimizer state at zero (savings.without_static,
    in MB and in bytes) are at most every saving variant's: solve judges a row by them before building the
    variants (RowSearch.screen), so a row some saving lets fit is never dropped by its own static memory."""
    from parasol.solver.search.costs import whole_block_memory_floor
    from parasol.solver.search.reprice import memory_floor_units

    problem = load_problem(ROOT / "problems/llama-3.1-70b-h100-256.yaml")
    savings = open_savings(problem)
    assert savings
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    totals = counts[0, counts.shape[0] - 1]
    lower = 0
    for row in _sample(problem, 24):
        bare = without_static(row_costs(problem, row, None))
        floors = (memory_floor_units(bare, counts), memory_floor_mb(bare, totals),
                  whole_block_memory_floor(bare, totals, 1, in_bytes=False))
        for saving in savings:
            variant = dataclasses.replace(row, saving=saving)
            c = row_costs(with_saving(problem, saving), variant, None)
            saved = (memory_floor_units(c, counts), memory_floor_mb(c, totals),
                     whole_block_memory_floor(c, totals, 1, in_bytes=False))
            assert all(f <= g for f, g in zip(floors, saved, strict=True)), (variant, floors, saved)
            lower += floors[0] < saved[0]
    assert lower > 0


def test_row_times_in_one_price_are_each_priced_alone(problems: list) -> None:
    """block_times_s, edge_times_s and step_extra_s read one price of the row's cuts (_row_prices) and give
    exactly what pricing each on its own gives: the probes as stages alone, the default cut as a run."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes

    for problem in problems:
        model = CalibratedStageTimes(problem)
        kinds = list(model.kinds)
        for row in _sample(problem, 6):
            m = row.mapping(problem)
            d = derive(problem.model, m)
            reps = list(model.kinds.values())
            shares = [max(round(sum(block_kind_of(b) == k for b in problem.model.blocks) / m.pp), 1) for k in kinds]
            zero = (0,) * len(kinds)
            probes = [(0, zero)] + [(0, tuple(s if j == i else 0 for j in range(len(kinds)))) for i, s in enumerate(shares)]
            alone = model.stage_times_s(m, d, probes)
            whole = model._priced_cuts(m, d, model._default_counts(m, d))
            fresh = CalibratedStageTimes(problem)
            assert fresh.block_times_s(m, d, reps) == [(t - alone[0]) / s for t, s in zip(alone[1:], shares, strict=True)]
            assert fresh.edge_times_s(m, d) == model.stage_times_s(m, d, [(s, zero) for s in range(m.pp)])
            assert fresh.step_extra_s(m, d) == float(whole["step"][0] - whole["pipeline"][0])


def test_min_max_cut_is_the_least_over_every_cut() -> None:
    """min_max_cut (its DP read only where every stage can still hold a block) gives the least largest
    stage cost over every contiguous cut of random tables, and a cut that has it; None when no cut has a
    finite cost."""
    from itertools import combinations

    from parasol.solver.search.costs import NO_STAGE

    rng = np.random.default_rng(15)
    for _ in range(400):
        blocks, stages = int(rng.integers(1, 9)), int(rng.integers(1, 6))
        tables = []
        for _ in range(stages):
            table = rng.integers(0, 5, size=(blocks + 1, blocks + 1)).astype(np.int64)
            open_ = np.triu(np.ones_like(table, dtype=bool), k=1) & (rng.random(table.shape) > 0.2)
            tables.append(np.where(open_, table, NO_STAGE))
        least = NO_STAGE
        for cut in combinations(range(1, blocks), stages - 1):
            bounds = (0, *cut, blocks)
            least = min(least, max(int(t[a, b]) for t, a, b in zip(tables, bounds, bounds[1:], strict=False)))
        found = min_max_cut(tables, blocks)
        if least >= NO_STAGE:
            assert found is None
            continue
        assert found is not None and found[0] == least
        bounds = np.concatenate([[0], np.cumsum(found[1])])
        assert bounds[-1] == blocks and all(n >= 1 for n in found[1])
        assert max(int(t[a, b]) for t, a, b in zip(tables, bounds, bounds[1:], strict=False)) == least


def test_stage_bands_are_min_max_cuts_of_the_stage_matrices(problems: list) -> None:
    """cuts.stage_bands holds the entries of all_stage_matrices that min_max_cut reads, and StageBands.least_max
    gives min_max_cut's least and cut over them under any mask (as dp_staircase masks them per cap), and the same
    least without a trace."""
    from parasol.solver.search.costs import NO_STAGE
    from parasol.solver.search.cuts import stage_bands

    rng = np.random.default_rng(31)
    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        blocks = counts.shape[0] - 1
        for row in _sample(problem, 12):
            if row.pp > blocks:
                continue
            c = row_costs(problem, row, None)
            mats = all_stage_matrices(c, counts)
            bands = stage_bands(c, counts)
            for k in range(2):
                assert (bands.time, bands.memory)[k].tolist() == flat_bands([pair[k] for pair in mats], blocks).tolist()
            for cap in sorted({int(x) for x in rng.choice(bands.memory[bands.memory < NO_STAGE], 4)}):
                masked = [np.where(m <= cap, t, NO_STAGE) for t, m in mats]
                expected = min_max_cut(masked, blocks)
                assert bands.least_max(np.where(bands.memory <= cap, bands.time, NO_STAGE)) == expected
                found = bands.least_max(np.where(bands.memory <= cap, bands.time, NO_STAGE), trace=False)
                assert (found is None) == (expected is None) and (found is None or found[0] == expected[0])


def test_table_memo_is_shared_by_a_tables_rows_and_follows_its_fields(problems: list) -> None:
    """The memory floors' memo (costs.TableMemo) is one per table: the rows of a table that differ in VPP or
    rank order, and their zero-static twins (savings.without_static), share it; tables whose memory fields
    were replaced (dataclasses.replace) get floors of their own fields; and every floor, quick answer and
    fit is what the same tables with no memo give."""
    from parasol.solver.search.costs import memo_of, whole_block_memory_floor
    from parasol.solver.search.reprice import memory_floor_units
    from parasol.solver.search.savings import quick_fit

    for problem in problems:
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        totals, usable = counts[0, counts.shape[0] - 1], usable_mb(problem)
        shared = 0
        for row in _sample(problem, 12):
            c = row_costs(problem, row, None)
            sibling = row_costs(problem, dataclasses.replace(row, vpp=1, rank_order=RankOrder.pp_last.value), None)
            assert c.memo is sibling.memo and without_static(c).memo is without_static(sibling).memo
            doubled = dataclasses.replace(c, kind_static=tuple(2 * s for s in c.kind_static))
            assert memo_of(doubled) is not c.memo
            for tables in (c, without_static(c), doubled, sibling):
                bare = dataclasses.replace(tables, memo=None)
                for memoised in (tables, tables):  # asked twice: the second answer is the memo's
                    assert memory_floor_units(memoised, counts) == memory_floor_units(bare, counts)
                    assert quick_fit(memoised, counts, usable) == quick_fit(bare, counts, usable)
                    for in_bytes in (False, True):
                        assert memory_floor_mb(memoised, totals, in_bytes) == memory_floor_mb(bare, totals, in_bytes)
                        assert whole_block_memory_floor(memoised, totals, 1, in_bytes) == \
                            whole_block_memory_floor(bare, totals, 1, in_bytes)
            shared += row.vpp > 1
        assert shared > 0


def test_tables_alike_in_memory_share_one_memo_and_unlike_ones_do_not(problems: list) -> None:
    """Rows whose table keys differ but whose memory fields are equal (CP and MBS alike in ratio) share one
    memo (costs.shared_memo), and so do their zero-static twins; a table differing in one memory field gets a memo of its own; every
    floor read through a shared memo is what the same tables with no memo give."""
    from parasol.solver.search.costs import memo_of, memory_fields, whole_block_memory_floor
    from parasol.solver.search.reprice import memory_floor_units
    from parasol.solver.search.savings import quick_fit

    problem = problems[1]
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    totals, usable = counts[0, counts.shape[0] - 1], usable_mb(problem)
    by_fields: dict[tuple, list] = {}
    for row in enumerate_rows(problem)[:4000]:
        c = row_costs(problem, row, None)
        by_fields.setdefault(memory_fields(c), []).append(c)
    alike = [tables for tables in by_fields.values() if len({(t.row.cp, t.row.mbs) for t in tables}) > 1]
    assert alike
    for tables in alike[:5]:
        first = tables[0]
        for other in tables[1:]:
            assert other.memo is first.memo and without_static(other).memo is without_static(first).memo
        heavier = dataclasses.replace(first, workspace_mb=first.workspace_mb + 1,
                                      fixed_bytes=first.fixed_bytes + 10**6)
        assert memo_of(heavier) is not first.memo
        for c in (*tables, heavier, without_static(first)):
            bare = dataclasses.replace(c, memo=None)
            assert memory_floor_units(c, counts) == memory_floor_units(bare, counts)
            assert quick_fit(c, counts, usable) == quick_fit(bare, counts, usable)
            for in_bytes in (False, True):
                assert memory_floor_mb(c, totals, in_bytes) == memory_floor_mb(bare, totals, in_bytes)
                assert whole_block_memory_floor(c, totals, 1, in_bytes) == whole_block_memory_floor(bare, totals, 1,
                                                                                                     in_bytes)


def test_derived_sizes_kept_across_vpp_follow_every_field_they_read(problems: list) -> None:
    """derive keeps the sizes that read neither VPP nor the layout once per the fields they read (derived._sizes),
    and builds the rest per mapping: every row's derived sizes, asked after rows that differ in each field
    (VPP, MBS, the degrees), are those the formulas give for that row."""
    from parasol.problems.derived import (
        attention_data_parallel,
        bubble_fraction,
        expert_data_parallel,
        experts_per_rank,
        mean_assignments_per_expert,
        num_microbatches,
        resolve_layout,
        tokens_per_ep_dispatch,
        tokens_per_rank,
    )

    for problem in problems[:2]:
        model, moe = problem.model, problem.model.moe
        rows = enumerate_rows(problem)
        assert len({r.vpp for r in rows}) > 1 and len({r.mbs for r in rows}) > 1
        for row in rows[::7]:
            m = row.mapping(problem)
            d = derive(model, m)
            dp_a = attention_data_parallel(m.gpus, m.pp, m.tp, m.cp)
            mb = num_microbatches(m.gbs, m.mbs, dp_a)
            dispatch = tokens_per_ep_dispatch(m.ep, m.expert_tp, m.mbs, m.seq_len, m.cp, m.tp)
            assert (d.dp_attn, d.dp_expert, d.num_microbatches) == (
                dp_a, expert_data_parallel(m.gpus, m.pp, m.expert_tp, m.ep), mb)
            assert d.bubble_fraction == bubble_fraction(m.pp, float(mb), m.vpp)
            assert d.tokens_per_rank == tokens_per_rank(m.mbs, m.seq_len, m.cp, m.tp)
            assert (d.tokens_per_ep_dispatch, d.assignments_per_expert, d.experts_per_rank) == (
                dispatch, mean_assignments_per_expert(moe.top_k, dispatch, moe.num_experts),
                experts_per_rank(moe.num_experts, m.ep))
            assert d.layout == resolve_layout(model, m)
