"""The front program (solver/search/fronts.py) on rows with several kinds of block: its least slowest-rank
time under a memory cap and least peak memory under a time bound are those of enumerating every
interleaved cut, on lead-in-then-periodic sequences (DeepSeek-V3's dense lead-in, DeepSeek-V4's
alternating attention) and on irregular ones, PP 2-4 and VPP 2-4; the staircases built on it are the
enumerated ones and proved."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from itertools import combinations, pairwise

import numpy as np
import pytest

from parasol.problems.empty_stages import least_piece, most_stages
from parasol.problems.loader import load_problem_text
from parasol.solver.search import fronts, rounds
from parasol.solver.search.costs import interval_counts, row_costs, usable_mb
from parasol.solver.search.cut_program import UNBOUNDED
from parasol.solver.search.cuts import rank_counts, row_staircase
from parasol.solver.search.dominance import nondominated
from parasol.solver.search.fronts import FrontProgram, classes, period
from parasol.solver.search.interleaved import InterleavedCuts
from parasol.solver.search.rounds import RoundProgram, lead_period, trail_exists
from parasol.solver.search.space import enumerate_rows
from tests.every_cut import distinct_cuts, distinct_holdings
from tests.test_interleaved_cuts import assert_no_local_move_beats
from tests.test_solve_reference import GENERATED, AdditiveTime

SEQUENCES = {
    "dense lead-in": "0001111111111",
    "v4 lead-in, alternating": "0012323232323",
    "alternating": "010101010101",
    "hybrid period 3": "1012012012012",
    "irregular": "0110201120",
}


def _sequence_counts(seq: str) -> np.ndarray:
    """The interval counts (costs.interval_counts) of a block sequence written one kind digit per block."""
    kinds = max(int(x) for x in seq) + 1
    prefix = [[0] for _ in range(kinds)]
    for x in seq:
        for k in range(kinds):
            prefix[k].append(prefix[k][-1] + (int(x) == k))
    return interval_counts(tuple(tuple(p) for p in prefix))


def _rows(seq: str, seed: int, shapes: tuple[tuple[int, int], ...] | None = None):  # noqa: ANN202
    """Rows of PP 2-4 and VPP 2-4 (or the (PP, VPP) `shapes`, a PP the problem lacks taken from another row)
    of a generated problem, with the kinds of `seq` given random costs (close times, so the per-rank balance
    decides), and the sequence's interval counts."""
    rng = random.Random(seed)
    kinds = max(int(x) for x in seq) + 1
    counts = _sequence_counts(seq)
    problem = load_problem_text(GENERATED[seed % 20], source="generated.yaml")
    model = AdditiveTime(problem)
    base = [r for r in enumerate_rows(problem) if r.vpp == 2 and r.pp in (2, 3, 4)]
    out = []
    for pp, vpp in shapes or tuple((pp, vpp) for pp in (2, 3, 4) for vpp in (2, 3, 4)):
        row = next((r for r in base if r.pp == pp), replace(base[0], pp=pp) if shapes else None)
        if row is None:
            continue
        stages = pp * vpp
        if stages > most_stages(len(seq), vpp) or math.comb(len(seq) - 1, stages - 1) > 3000:
            continue
        c = row_costs(problem, replace(row, vpp=vpp), model)
        time = rng.randint(1000, 5000)
        c = replace(c, kind_time_us=tuple(time + rng.randint(0, 40) for _ in range(kinds)),
                    kind_static=tuple(rng.randint(50, 400) for _ in range(kinds)),
                    kind_activation=tuple(rng.randint(10, 200) for _ in range(kinds)),
                    kind_peak=tuple(rng.choice([0, 0, 30, 90]) for _ in range(kinds)),
                    kind_moe=tuple(rng.random() < 0.5 for _ in range(kinds)))
        out.append((c, counts, usable_mb(problem)))
    return out


def test_period_finds_lead_in_and_period() -> None:
    """The lead-in and period chosen for the fewest states: DeepSeek-V3's and -V4's shapes, and one kind."""
    assert period((0, 0, 0) + (1,) * 20, 4, 3) == (3, 1)
    assert period((0, 0, 1) + (2, 3) * 12, 4, 3) == (3, 2)
    assert period((5,) * 30, 4, 4) == (0, 1)
    cl = classes((0, 0, 1) + (2, 3) * 12, 4, 4, 3)
    assert [cl.of(p) for p in range(8)] == [0, 1, 2, 3, 4, 3, 4, 3]
    assert cl.content[3, 3].tolist() == [0, 0, 2, 1] and cl.exit[3, 3] == 4


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_front_program_equals_enumeration(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Least slowest time under caps and least peak memory under time bounds, against every cut (the state limit
    raised and the cell limit lifted: an irregular sequence is all lead-in, still exact, only larger; rows past
    the raised limit, PP 2 at VPP 4 where every stage may be empty, are left to the other searches)."""
    monkeypatch.setattr(fronts, "STATE_LIMIT", 10_000)
    monkeypatch.setattr(fronts, "CELL_LIMIT", 1 << 30)
    checked = 0
    for seed, (c, counts, _) in enumerate(_rows(SEQUENCES[name], 3 + len(name))):
        cuts = InterleavedCuts(c, counts)
        program = cuts.fronts
        if program is not None:
            checked += _checks_against_every_cut(cuts, program, random.Random(seed), 4, evenest=False)
    assert checked >= 20


def _checks_against_every_cut(cuts: InterleavedCuts, program: FrontProgram | RoundProgram, rng: random.Random,
                              caps: int, evenest: bool) -> int:
    """Ask `program` for the least slowest time under memory caps (the least, the least − 1, `caps` sampled
    and none) and the least peak under time bounds, check each answer and its cut against every cut of the
    row (and, when `evenest`, that the leanest cut is the evenest of its memory unit); the questions asked."""
    holdings = distinct_holdings(cuts)
    measured = [cuts.measure(layout) for layout, _ in holdings]
    spreads = [(t, m, spread) for (t, m), (_, spread) in zip(measured, holdings, strict=True)]
    peaks = sorted({m for _, m in measured})
    times = sorted({t for t, _ in measured})
    checked = 0
    for cap in [peaks[0] - 1, peaks[0], *rng.sample(peaks, min(caps, len(peaks))), UNBOUNDED]:
        fitting = [t for t, m in measured if m <= cap]
        found = program.least(UNBOUNDED, cap, True)
        assert (found is None) == (not fitting)
        if found is None:
            continue
        assert found[0] == min(fitting) and sum(found[1]) == cuts.n and len(found[1]) == cuts.stages
        assert all(x >= least_piece(k, cuts.pp, True) for k, x in enumerate(found[1]))
        assert cuts.measure(found[1])[0] == found[0] and cuts.measure(found[1])[1] <= cap
        for bound in (found[0], rng.choice(times)):
            within = [m for t, m in measured if t <= bound and m <= cap]
            lean = program.least(bound, cap, False)
            assert (lean is None) == (not within)
            if lean is not None:
                assert lean[0] == min(within)
                assert cuts.measure(lean[1])[1] == lean[0] and cuts.measure(lean[1])[0] <= bound
                if evenest:
                    _assert_evenest(cuts, program, bound, cap, lean[0] + rng.choice([0, 0, 15, 60]), spreads)
            checked += 1
    return checked


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_several_kind_staircases_equal_enumeration(name: str) -> None:
    """The row staircase (relaxation, then the front program) is the enumerated one, proved."""
    rows = _rows(SEQUENCES[name], 11 + len(name))
    assert {c.row.vpp for c, _, _ in rows} >= {2, 3}
    for c, counts, usable in rows:
        ours = row_staircase(c, counts, usable)
        assert ours.proved
        scored = []
        for layout in distinct_cuts(InterleavedCuts(c, counts)):
            per_rank = rank_counts(layout, c.row.pp, counts)
            if all(c.stage_memory(s, n) <= usable for s, n in enumerate(per_rank)):
                scored.append(c.objectives(per_rank))
        assert [(q.time_units, q.memory_units) for q in ours.points] == [scored[i] for i in nondominated(scored)]
        for q in ours.points:
            assert (q.time_units, q.memory_units) == c.objectives(rank_counts(q.layout, c.row.pp, counts))


@pytest.mark.parametrize("vpp", [3, 4])
def test_v4_8192_front_program_cuts_resist_local_moves(vpp: int) -> None:
    """The bundled V4-Pro 8,192 problem's PP8 CP4 EP64 full-recompute row at VPP 3 and 4 (DeepSeek-V4's
    lead-in and alternating kinds, where the relaxation's optimum mostly has no layout): the front program
    runs, the staircase is proved, and no chain of random boundary moves from a step's cut dominates a step."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem
    from parasol.solver.search.costs import block_kinds, prefix_counts

    problem = load_problem("problems/deepseek-v4-pro-8192.yaml")
    model = CalibratedStageTimes(problem)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    usable = usable_mb(problem)
    row = next(r for r in enumerate_rows(problem)
               if (r.tp, r.pp, r.cp, r.ep, r.vpp, r.recompute) == (1, 8, 4, 64, vpp, "full"))
    c = row_costs(problem, row, model)
    assert InterleavedCuts(c, counts).fronts is not None
    assert_no_local_move_beats(c, counts, usable, random.Random(vpp), 200)


def _repeat(lead: str, period: str, blocks: int) -> str:
    """A block sequence of `blocks` kinds: the lead-in, then the period over and over."""
    return (lead + period * blocks)[:blocks]


ROUND_CASES = {
    "v4 PP4 VPP4": ("001", "23", 16, ((4, 4),)),
    "v4 PP4 VPP5": ("001", "23", 19, ((4, 5),)),
    "v4 PP4 VPP6": ("001", "23", 20, ((4, 6),)),
    "v4 PP3 VPP6": ("001", "23", 18, ((3, 6),)),
    "v4 PP3 VPP8": ("001", "23", 20, ((3, 8),)),
    "v4 PP4 VPP8": ("001", "23", 22, ((4, 8),)),
    "alternating PP2 VPP8": ("", "01", 19, ((2, 8),)),
    "period 3 PP2-4": ("1", "012", 19, ((2, 6), (3, 5), (4, 4))),
    "v4 PP2 VPP2-4, lead-in past PP": ("001", "23", 14, ((2, 2), (2, 3), (2, 4))),
    "longer lead-in PP2 VPP3": ("0001", "23", 14, ((2, 3),)),
}


@pytest.mark.parametrize("name", list(ROUND_CASES))
def test_round_program_equals_enumeration(name: str) -> None:
    """The round program (solver/search/rounds.py) on lead-in-then-periodic sequences, VPP 2-8 and PP 2-4
    (PP at least the lead-in, and below it: one case per round 0 ending inside the lead-in): least slowest
    time under caps, least peak memory under time bounds and the evenest cut are those of every
    interleaved cut, and the cuts it returns have them."""
    lead, period_, blocks, shapes = ROUND_CASES[name]
    checked = 0
    for seed in range(3):
        for c, counts, _ in _rows(_repeat(lead, period_, blocks), 5 + seed + len(name), shapes):
            cuts = InterleavedCuts(c, counts)
            program = RoundProgram(cuts, cuts.groups)
            assert program.usable
            checked += _checks_against_every_cut(cuts, program, random.Random(seed), 3, evenest=True)
    assert checked >= 12


def _assert_evenest(cuts: InterleavedCuts, program: RoundProgram, bound: int, cap: int, alike: int,
                    spreads: list[tuple[int, int, int]]) -> None:
    """The evenness pass: the cut returned has the least Σ |stage · stages − n| of every cut with each rank
    within `bound` and memory within min(cap, alike) (`spreads`: each holding's time, memory and least spread,
    tests/every_cut.distinct_holdings)."""
    def spread(layout: tuple[int, ...]) -> int:
        return sum(abs(x * cuts.stages - cuts.n) for x in layout)

    within = min(cap, alike)
    best = min(least for t, m, least in spreads if t <= bound and m <= within)
    _, even = program.least(bound, cap, False, lambda _: within)
    t, m = cuts.measure(even)
    assert t <= bound and m <= within and spread(even) == best


def test_lead_period_and_trails() -> None:
    """The round program's period: the one with the shortest lead-in; round chains as Euler trails."""
    assert lead_period((0, 0, 1) + (2, 3) * 12) == (3, 2)
    assert lead_period((0, 0, 1) + (2, 1) * 12) == (2, 2)
    assert lead_period((5,) * 30) == (0, 1)
    assert lead_period((0,) + (1, 2, 0) * 5) == (0, 3)
    assert trail_exists((2, 1, 0, 3), 2, 0)
    assert not trail_exists((2, 1, 0, 3), 2, 1)
    assert not trail_exists((0, 0, 0, 3), 2, 0)
    assert trail_exists((0, 1, 1, 2), 2, 0) and trail_exists((0, 1, 1, 2), 2, 1)
    assert not trail_exists((1, 2, 0, 0), 2, 0)


@pytest.mark.parametrize(("ep", "vpp"), [(64, 6), (128, 7)])
def test_v4_8192_round_program_cuts_resist_local_moves(ep: int, vpp: int) -> None:
    """The bundled V4-Pro 8,192 problem's PP8 CP4 full-recompute rows taken to VPP 6 and 7 (past the front
    program's states; PP 4 does not fit its memory): the round program runs, the staircase is proved, and
    no chain of random boundary moves from a step's cut dominates a step."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem
    from parasol.solver.search.costs import block_kinds, prefix_counts

    problem = load_problem("problems/deepseek-v4-pro-8192.yaml")
    model = CalibratedStageTimes(problem)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    usable = usable_mb(problem)
    row = next(r for r in enumerate_rows(problem)
               if (r.tp, r.pp, r.cp, r.ep, r.vpp, r.recompute) == (1, 8, 4, ep, 2, "full"))
    c = row_costs(problem, replace(row, vpp=vpp), model)
    cuts = InterleavedCuts(c, counts)
    assert cuts.fronts is None and cuts.rounds is not None
    assert_no_local_move_beats(c, counts, usable, random.Random(vpp), 200)


def _round_program(c, counts) -> RoundProgram:  # noqa: ANN001 - RowCosts, interval counts
    """A fresh round program of one row."""
    cuts = InterleavedCuts(c, counts)
    return RoundProgram(cuts, cuts.groups)


def _alike(cap: int) -> Callable[[int], int]:
    """An evenness pass's bound from the least peak, as InterleavedCuts.exact_least's (a coarser unit)."""
    return lambda least: min(cap, least + 10)


@pytest.mark.parametrize("name", list(ROUND_CASES))
def test_round_program_reuse_keeps_answers(name: str) -> None:
    """A round program asked a staircase's questions in turn (tighter caps: its time guesses from the floors
    of looser ones, widened where no cut is within them, later cases asked only below the first's answer,
    fastest_us's time alone) answers each exactly as a fresh program does, cut included."""
    lead, period_, blocks, shapes = ROUND_CASES[name]
    asked = 0
    for c, counts, _ in _rows(_repeat(lead, period_, blocks), 7 + len(name), shapes):
        shared = _round_program(c, counts)
        layouts = distinct_cuts(shared.cuts)
        peaks = sorted({shared.cuts.measure(layout)[1] for layout in layouts})
        for cap in sorted(peaks[::max(1, len(peaks) // 8)] + [peaks[0] - 1], reverse=True):
            found = shared.least(UNBOUNDED, cap, True)
            assert found == _round_program(c, counts).least(UNBOUNDED, cap, True)
            assert shared.fastest_us(UNBOUNDED, cap) == _round_program(c, counts).fastest_us(UNBOUNDED, cap)
            assert shared.fastest_us(UNBOUNDED, cap) == (None if found is None else found[0])
            if found is not None:
                lean = shared.least(found[0], cap, False, _alike(cap))
                assert lean == _round_program(c, counts).least(found[0], cap, False, _alike(cap))
                asked += 1
    assert asked >= 4


def test_a_time_question_past_its_first_guesses_keeps_its_answer() -> None:
    """Where no cut is within a staircase question's first time guess (its floor plus 1/64), the wider guesses
    (rounds.GUESS_SHARES) and then its own bound answer it exactly as a fresh program does, cut included; the
    round cases hold such questions at each stage."""
    widened: Counter[int] = Counter()
    for name, (lead, period_, blocks, shapes) in ROUND_CASES.items():
        for c, counts, _ in _rows(_repeat(lead, period_, blocks), 7 + len(name), shapes):
            shared = _round_program(c, counts)
            peaks = sorted({shared.cuts.measure(layout)[1] for layout in distinct_cuts(shared.cuts)})
            for cap in sorted(peaks[::max(1, len(peaks) // 8)] + [peaks[0] - 1], reverse=True):
                floors = len(shared.floors)
                found = shared.least(UNBOUNDED, cap, True)
                misses = len(shared.floors) - floors - 1
                if misses:
                    widened[misses] += 1
                    assert found == _round_program(c, counts).least(UNBOUNDED, cap, True), (name, cap)
    assert {1, 2, 3} <= widened.keys(), widened


@pytest.mark.parametrize(("least", "closing"), [(1, False), (0, False), (0, True)])
def test_round_geometry_widened_in_steps_keeps_one_expansions_moves(least: int, closing: bool) -> None:
    """A geometry whose states gain their longer moves as questions widen its reach holds the moves, in the same
    order, that expanding every state once at the final reach gives (the traced cut reads that order, so the
    answer never depends on which questions came first)."""
    seq = (0, 0, 1) + (2, 1) * 9
    h, q = lead_period(seq)
    stepped, once = (rounds._Geometry(seq, 3, 3, 3, h, q, (9, len(seq)), least, 16, closing) for _ in range(2))
    states = np.arange(stepped.classes * len(stepped.comps))
    for most in (3, 5, 9, 16):
        stepped._widen(most)
        stepped._expanded(states[::2] if most < 9 else states)
    once._widen(16)
    once._expanded(states)
    assert stepped.reach == once.reach == 16 and stepped.joined.src.size > 0
    assert np.array_equal(stepped.joined.src, once.joined.src)
    assert np.array_equal(stepped.joined.rows, once.joined.rows)
    assert all(np.array_equal(a, b) for a, b in zip(stepped.by_blocks, once.by_blocks, strict=True))


def test_merged_moves_land_where_sorting_every_move_puts_them() -> None:
    """New moves inserted among a geometry's sorted moves (rounds._merged) land where sorting them all by destination,
    source, move index and periods puts them, whether one int64 key orders them or, past its range (a geometry
    of 2^40 states), every move is sorted again."""
    rng = np.random.default_rng(5)
    states = 40
    picked = rng.choice(states * states * 30 * 4, 900, replace=False)
    dst, rest = np.divmod(picked, states * 30 * 4)
    src, rest = np.divmod(rest, 30 * 4)
    index, periods = np.divmod(rest, 4)
    rows = np.stack([dst, rng.integers(0, 9, 900), rng.integers(0, 99, 900), index, periods, rng.integers(0, 7, 900)])
    order = np.lexsort((rows[4], rows[3], src, rows[0]))
    old = order[np.isin(order, np.arange(600))]
    joined = rounds._Joined(src[old], rows[:, old], np.zeros(len(old), dtype=np.int64))
    for geometry_states in (states, 1 << 40):
        merged_src, merged_rows = rounds._merged(joined, src[600:], rows[:, 600:], geometry_states)
        assert np.array_equal(merged_src, src[order]) and np.array_equal(merged_rows, rows[:, order])


def test_best_finds_nothing_unproved_when_the_fastest_cut_runs_out_of_budget() -> None:
    """Where the round program gives the fastest cut's time but tracing that cut then runs out of budget (a
    fuzzed solve at --time-limit 0.3 met it: `fastest` returned no cut and the leanest search iterated None),
    `best` returns no cut, unproved, so the row's staircase says it was cut short."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem
    from parasol.solver.search.costs import block_kinds, prefix_counts

    problem = load_problem("problems/deepseek-v4-pro-8192.yaml")
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    usable = usable_mb(problem)
    row = next(r for r in enumerate_rows(problem) if (r.tp, r.pp, r.cp, r.ep, r.recompute) == (1, 8, 4, 64, "full"))
    c = row_costs(problem, replace(row, vpp=3), CalibratedStageTimes(problem))
    whole, cut_short = InterleavedCuts(c, counts), InterleavedCuts(c, counts)
    answered, fastest_us = cut_short.fastest_time(usable)
    assert answered and fastest_us is not None
    layout, proved = whole.best(usable)
    assert layout is not None and proved
    cut_short.fastest = lambda cap_mb: (None, False)
    cut_short.settle = lambda slowest_us, cap_mb, fastest: (False, None)
    assert cut_short.best(usable) == (None, False)


def test_front_program_of_a_row_too_large_lists_no_start_classes() -> None:
    """A row of many rounds over an irregular sequence (Nemotron-3 Ultra's hybrid blocks at VPP 8) has more
    start-class combinations than memory holds: the program is judged unusable from its state bound alone,
    without listing them (listing them once took 22 GB and the machine's memory)."""
    rng = random.Random(7)
    seq = "".join(rng.choice("0012") for _ in range(108))
    counts = _sequence_counts(seq)
    problem = load_problem_text(GENERATED[0], source="generated.yaml")
    row = next(r for r in enumerate_rows(problem) if r.vpp == 2 and r.pp > 1)
    c = row_costs(problem, replace(row, pp=4, vpp=8), AdditiveTime(problem))
    c = replace(c, kind_time_us=(1000, 1100, 900), kind_static=(100, 200, 150), kind_activation=(20, 30, 25),
                kind_peak=(0, 30, 0), kind_moe=(False, True, False))
    cuts = InterleavedCuts(c, counts)
    program = FrontProgram(cuts, cuts.groups)
    h, q = program.cl.h, program.cl.q
    assert math.prod(len(o) for o in fronts._start_options(h, q, len(seq), 4, 8)) > 10**12
    assert not program.usable and "starts" not in vars(program)
    assert cuts.fronts is None


def test_round_openings_are_counted_before_they_are_listed() -> None:
    """The round-0 openings inside a lead-in number C(h − 1, PP): listed when at most the limit asks (the same
    list the compositions give), None past it without listing (a 100-block lead-in at PP 2 has 4,851; at
    PP 8, 1.6e11, which listing once ran out of memory on)."""
    for pp in range(1, 6):
        for h in range(12):
            listed = [parts for total in range(pp, h) for parts in (
                tuple(b - a for a, b in pairwise((0, *cut, total))) for cut in combinations(range(1, total), pp - 1))]
            assert len(listed) == math.comb(max(h - 1, 0), pp)
            assert rounds._openings(pp, h, 10**6) == listed
            assert (rounds._openings(pp, h, 8) is None) == (len(listed) > 8)
    assert rounds._openings(8, 100, 8) is None and rounds._openings(2, 100, 4851) is not None
