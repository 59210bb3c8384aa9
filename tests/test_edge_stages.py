"""Empty edge stages (problems/empty_stages.py): interleaved rows of a one-kind block sequence may leave the first
virtual stage to the embedding and the last to the loss, as Megatron's layout `E|…|L` allows and Llama 3 405B
ran (arXiv:2407.21783 section 3.3.2: PP 16, interleaved, one block fewer on the first and last stage). The
exact cut search covers that family (checked against enumeration), the space lists PP·VPP up to the block
count plus two for such sequences only, and the answer is emitted as a layout Megatron accepts."""

from __future__ import annotations

import math

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.empty_stages import least_piece, least_rank_blocks, most_stages, open_edges
from parasol.problems.loader import load_problem_text
from parasol.solver.outputs.emit import layout_string
from parasol.solver.search.brute_force import compositions, row_layouts
from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
from parasol.solver.search.cuts import best_cut, rank_counts, row_staircase
from parasol.solver.search.dominance import nondominated
from parasol.solver.search.space import enumerate_rows
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


def test_open_compositions_count_every_cut_with_empty_edges() -> None:
    """Open: every cut whose middle stages hold a block and whose two edge stages hold any number, once each
    (stars and bars: C(n + 1, parts − 1) of them), and the closed family is the part with no empty edge."""
    for total, parts in ((5, 3), (7, 4), (6, 8), (4, 6)):
        open_ = list(compositions(total, parts, True))
        assert len(open_) == len(set(open_)) == (math.comb(total + 1, parts - 1) if parts - 2 <= total else 0)
        assert all(sum(c) == total and min(c[1:-1], default=1) >= 1 for c in open_)
        closed = list(compositions(total, parts))
        assert closed == [c for c in open_ if c[0] and c[-1]]
    assert list(compositions(3, 5, True)) == [(0, 1, 1, 1, 0)]
    assert [least_piece(s, 4, True) for s in range(4)] == [0, 1, 1, 0]
    assert [least_piece(s, 4, False) for s in range(4)] == [1, 1, 1, 1]


def test_most_stages_by_kinds_and_schedule() -> None:
    """Two more virtual stages than blocks for interleaved rows of one kind of block; 1F1B rows and sequences of
    several kinds keep a block on every stage; the floors' least blocks per rank (one per virtual stage) is one
    fewer on the first and last rank where their edge stage may be empty."""
    assert most_stages(126, 1, 8) == 128 and open_edges(1, 2)
    assert most_stages(126, 1, 1) == 126 and not open_edges(1, 1)
    assert most_stages(61, 3, 4) == 61 and not open_edges(2, 4)
    assert least_rank_blocks(8, 1, 16).tolist() == [7, *([8] * 14), 7]
    assert least_rank_blocks(4, 3, 8) == 4 and least_rank_blocks(1, 1, 8) == 1


def test_space_lists_rows_up_to_two_stages_past_the_blocks() -> None:
    """The generated one-kind problems list interleaved rows past their block count and none beyond it plus two
    (Llama 3.1 405B's 128 virtual stages on 126 blocks: test_llama_405b_takes_its_published_layout)."""
    found = set()
    for text in GENERATED:
        problem = load_problem_text(text)
        if len(block_kinds(problem)) != 1:
            continue
        n = problem.model.num_layers
        for row in enumerate_rows(problem):
            assert row.pp * row.vpp <= n + (2 if row.vpp > 1 else 0)
            found.add(row.pp * row.vpp - n)
    assert max(found) >= 1


def test_rows_past_the_blocks_equal_enumeration() -> None:
    """Every interleaved row of the generated one-kind problems whose PP·VPP passes the block count (some edge
    stage must be empty) or reaches it: the staircase is the enumerated one over the open family, value for
    value, proved."""
    checked = 0
    for text in GENERATED:
        problem = load_problem_text(text)
        if len(block_kinds(problem)) != 1:
            continue
        model = AdditiveTime(problem)
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        usable = usable_mb(problem)
        n = problem.model.num_layers
        for row in [r for r in enumerate_rows(problem) if r.vpp > 1 and r.pp * r.vpp >= n - 1][:6]:
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
    assert checked >= 6


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
