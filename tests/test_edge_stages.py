"""Empty stages on the edge ranks (problems/empty_stages.py): on interleaved rows the first and last pipeline rank
may leave virtual stages empty, as Megatron's layout allows (`E|…|L`) and Llama 3 405B ran (arXiv:2407.21783
section 3.3.2: PP 16, interleaved, one block fewer on the first and last stage). The exact cut search covers
that family on every interleaved row, of one kind of block or several (checked against enumeration), the
space lists PP·VPP up to the block count plus 2·VPP, and the answer is emitted as a layout Megatron accepts."""

from __future__ import annotations

import math

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.derived import default_layout
from parasol.problems.empty_stages import (
    evenest_cut,
    least_piece,
    least_rank_blocks,
    most_stages,
    open_stages,
    stage_least,
)
from parasol.problems.loader import load_problem, load_problem_text
from parasol.solver.outputs.emit import layout_string
from parasol.solver.search.brute_force import compositions, holding_cuts, row_layouts
from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
from parasol.solver.search.cuts import best_cut, cuts_rank_counts, rank_counts, row_staircase
from parasol.solver.search.dominance import nondominated
from parasol.solver.search.space import enumerate_rows
from tests.test_front_cuts import _sequence_counts
from tests.test_solve_reference import GENERATED, AdditiveTime

LLAMA_405B = """model: llama-3.1-405b
training:
  seq_len: 8192
  global_batch: 2048
  precision: bf16
  optimizer: adam
hardware:
  preset: h100-hgx
  gpus: 16384
"""
"""Llama 3.1 405B on 16,384 H100 as a new user writes it (bench/solve_speed.py's default-space problem)."""


def test_compositions_count_every_cut_of_the_family() -> None:
    """Every cut whose middle ranks' stages hold a block and whose first and last rank's stages hold any number
    on an interleaved row (a block each on a 1F1B row),
    once each (stars and bars: C(n + e − 1, parts − 1) with e stages free to be empty), and the closed family
    is the part with no empty stage."""
    for total, pp, vpp in ((5, 3, 1), (7, 2, 2), (6, 4, 2), (4, 3, 3), (9, 4, 3)):
        parts = pp * vpp
        least = stage_least(pp, vpp)
        free = least.count(0)
        family = list(compositions(total, parts, pp))
        assert len(family) == len(set(family)) == math.comb(total + free - 1, parts - 1)
        assert all(sum(c) == total and all(x >= m for x, m in zip(c, least, strict=True)) for c in family)
        assert list(compositions(total, parts)) == [c for c in family if min(c) >= 1]
    assert list(compositions(3, 6, 3)) == [(0, 1, 0, 0, 1, 1), (0, 1, 0, 0, 2, 0), (0, 1, 0, 1, 1, 0),
                                          (0, 1, 1, 0, 1, 0), (0, 2, 0, 0, 1, 0), (1, 1, 0, 0, 1, 0)]
    assert [least_piece(s, 4, True) for s in range(8)] == [0, 1, 1, 0, 0, 1, 1, 0]
    assert [least_piece(s, 4, False) for s in range(4)] == [1, 1, 1, 1]
    assert stage_least(4, 2) == (0, 1, 1, 0, 0, 1, 1, 0) and stage_least(4, 1) == (1, 1, 1, 1)


def test_holding_cuts_are_the_first_cut_of_every_holding() -> None:
    """The brute force's cuts (one per distinct holding of the ranks, the first in layout order) are those of
    listing every cut of the family and keeping the first of each holding, on sequences of one to four kinds."""
    for seq, pp, vpp in (("0012323232", 2, 3), ("0012323232323", 3, 3), ("01101201", 4, 2), ("000111", 2, 4),
                         ("1111111", 3, 2), ("0001111111", 4, 3)):
        counts = _sequence_counts(seq)
        every = list(compositions(len(seq), pp * vpp, pp))
        first: dict[tuple[int, ...], tuple[int, ...]] = {}
        for layout, held in sorted(zip(every, map(tuple, cuts_rank_counts(every, pp, counts).reshape(len(every), -1)
                                                  .tolist()), strict=True)):
            first.setdefault(held, layout)
        assert holding_cuts(counts, pp, vpp) == sorted(first.values())


def test_most_stages_and_least_rank_blocks() -> None:
    """Interleaved rows may cut into the block count plus two VPP of virtual stages (the edge ranks' may all be
    empty); 1F1B rows keep a block on every stage; the floors' least blocks per rank are VPP on a middle rank,
    none on the edge ranks of an interleaved row."""
    assert most_stages(126, 8) == 142 and open_stages(2)
    assert most_stages(126, 1) == 126 and not open_stages(1)
    assert least_rank_blocks(8, 16).tolist() == [0, *([8] * 14), 0]
    assert least_rank_blocks(1, 8) == 1
    assert evenest_cut(61, 16, 4) == default_layout(61, 16, 4)
    assert [k for k, x in enumerate(default_layout(61, 16, 4)) if x == 0] == [0, 48, 63]
    assert default_layout(126, 16, 8) == (0, *([1] * 126), 0)


def test_space_lists_rows_up_to_the_edge_ranks_stages_past_the_blocks() -> None:
    """The generated problems list interleaved rows past their block count and none beyond it plus 2·VPP."""
    found = set()
    for text in GENERATED:
        problem = load_problem_text(text)
        n = problem.model.num_layers
        for row in enumerate_rows(problem):
            assert row.pp * row.vpp <= n + (2 * row.vpp if row.vpp > 1 else 0)
            assert (row.pp - 2) * row.vpp <= n
            found.add(row.pp * row.vpp - n)
    assert max(found) >= 2


def test_rows_past_the_blocks_equal_enumeration() -> None:
    """Interleaved rows of the generated problems whose PP·VPP passes the block count (some edge-rank stage must
    be empty) or nears it: the staircase is the enumerated one over the family, value for value, proved."""
    checked = 0
    for text in GENERATED:
        problem = load_problem_text(text)
        model = AdditiveTime(problem)
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        usable = usable_mb(problem)
        n = problem.model.num_layers
        for row in [r for r in enumerate_rows(problem) if r.vpp > 1 and r.pp * r.vpp >= n - 1][:4]:
            c = row_costs(problem, row, model)
            ours = row_staircase(c, counts, usable)
            assert ours.proved
            scored = []
            for layout in row_layouts(row, counts):
                per_rank = rank_counts(layout, row.pp, counts)
                if all(c.stage_memory(s, k) <= usable for s, k in enumerate(per_rank)):
                    scored.append(c.objectives(per_rank))
            assert [(q.time_units, q.memory_units) for q in ours.points] == [scored[i] for i in nondominated(scored)]
            checked += 1
    assert checked >= 10


def test_llama_405b_takes_its_published_layout() -> None:
    """TP 8, PP 16, CP 2, VPP 8 on 126 blocks (128 virtual stages, the run Meta published): the best cut leaves
    the first stage to the embedding and the last to the loss, is faster than any cut of VPP 6 (the best VPP
    with a block on every stage, the front's head before), and is emitted as a layout string of that shape."""
    problem = load_problem_text(LLAMA_405B)
    model = CalibratedStageTimes(problem)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    usable = usable_mb(problem)
    rows = {r.vpp: r for r in enumerate_rows(problem)
            if (r.tp, r.pp, r.cp, r.mbs, r.recompute, r.rank_order) == (8, 16, 2, 1, "none", "tp-cp-ep-dp-pp")}
    published = best_cut(row_costs(problem, rows[8], model), counts, usable)
    assert published is not None and published.layout == (0, *([1] * 126), 0)
    before = best_cut(row_costs(problem, rows[6], model), counts, usable)
    assert before is not None and published.time_units < before.time_units
    assert published.memory_units < before.memory_units
    assert layout_string(problem, published.layout) == "E|(t|)*126,L"


def test_v4_pro_8192_leaves_last_rank_stages_empty() -> None:
    """DeepSeek-V4-Pro on the bundled 8,192 GPUs, TP1 PP16 CP4 EP64 VPP4 with full recompute: 64 virtual stages
    over 61 blocks, the row of the probe that dominated most of the bundled front before this family (empty
    stages 0, 31 and 63). The row's staircase is proved, its fastest cut is at least as fast and as lean as the
    probe's, and it lightens the last rank (head, loss and MTP) below the VPP blocks every middle rank holds."""
    problem = load_problem("problems/deepseek-v4-pro-8192.yaml")
    model = CalibratedStageTimes(problem)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    row = next(r for r in enumerate_rows(problem) if (r.tp, r.pp, r.cp, r.ep, r.vpp, r.recompute)
               == (1, 16, 4, 64, 4, "full"))
    c = row_costs(problem, row, model)
    stairs = row_staircase(c, counts, usable_mb(problem))
    assert stairs.proved and stairs.points
    probe = c.objectives(rank_counts((0, *([1] * 30), 0, *([1] * 31), 0), 16, counts))
    head = stairs.points[0]
    assert head.time_units <= probe[0] and head.memory_units <= probe[1]
    held = [sum(head.layout[r::16]) for r in range(16)]
    assert min(held[1:-1]) >= 4 and held[-1] < 4
