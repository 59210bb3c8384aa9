"""The stage cuts of one row: how to cut the real block sequence into PP·VPP contiguous virtual
stages, with the heaviest rank of every stage within usable HBM, trading step time against peak
memory. The row's Pareto staircase is what it offers the master program (solver/search/program.py).

1F1B rows are solved exactly by a min-max dynamic program over contiguous cuts. Interleaved rows
(VPP > 1), whose ranks sum non-contiguous virtual stages, are solved exactly by branch and bound over
the cut (solver/search/interleaved.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from parasol.constraints.physics.schedule import pipeline_time_scaled
from parasol.solver.search.costs import (
    MEMORY_UNIT_MB,
    MICROSECONDS,
    NO_STAGE,
    TIME_UNIT_S,
    RowCosts,
    edge_terms,
    in_flight_memory,
    interval_sums,
)
from parasol.solver.search.interleaved import InterleavedCuts


@dataclass(frozen=True)
class CutPoint:
    """One non-dominated cut of a row: its objective values and the blocks per virtual stage."""

    time_units: int
    memory_units: int
    layout: tuple[int, ...]


@dataclass(frozen=True)
class Staircase:
    """A row's non-dominated cuts, best step time first."""

    points: tuple[CutPoint, ...]
    proved: bool = True
    """Whether every step is proved the best under its cap (interleaved searches can run out of budget)."""


def dp_staircase(c: RowCosts, counts: np.ndarray, usable: int) -> Staircase:
    """1F1B (VPP 1): the exact staircase by a min-max dynamic program over contiguous cuts. Step time
    depends on the cut only through the slowest stage (Σ t_s is the same for every cut), so each step
    is: least slowest-stage time under a memory cap, then least peak memory at that step time."""
    blocks = counts.shape[0] - 1
    if blocks < c.row.pp:
        return Staircase(())
    bands = stage_bands(c, counts)
    inf = NO_STAGE
    unit = round(TIME_UNIT_S * MICROSECONDS)
    totals = [int(x) for x in counts[0, blocks]]
    stage_sum = sum(c.edge_time_us) + sum(t * n for t, n in zip(c.kind_time_us, totals, strict=True))

    def step_us(slowest: int) -> int:
        return c.constant_time_us + pipeline_time_scaled(stage_sum, slowest, c.microbatches, 1)

    base, slope = step_us(0), step_us(1) - step_us(0)
    points: list[CutPoint] = []
    cap = usable
    while cap >= 0:
        within = bands.memory <= cap
        fastest = bands.least_max(np.where(within, bands.time, inf), trace=False)
        if fastest is None:
            break
        time_units = -(-step_us(fastest[0]) // unit)
        limit = (time_units * unit - base) // slope if slope else inf
        leanest = bands.least_max(np.where(within & (bands.time <= limit), bands.memory, inf))
        assert leanest is not None
        memory_units = -(-leanest[0] // MEMORY_UNIT_MB)
        points.append(CutPoint(time_units, memory_units, leanest[1]))
        cap = (memory_units - 1) * MEMORY_UNIT_MB
    return Staircase(tuple(points))


@dataclass(frozen=True)
class StageBands:
    """A 1F1B row's stage costs as least_max_cut reads them, in one flat array each, so a cap masks every
    stage at once: the first stage's costs holding blocks 0..j−1 (j = 0..B), each middle
    stage s's band (W × W, W = B − S + 1: starts s…s + W − 1, ends s + 1…s + W), and the last stage's costs
    holding blocks i..B−1 (i = 0..B). Needs B >= S."""

    time: np.ndarray
    memory: np.ndarray
    blocks: int
    stages: int

    def least_max(self, costs: np.ndarray, trace: bool = True) -> tuple[int, tuple[int, ...]] | None:
        """least_max_cut over `costs` (flat, as `time` and `memory` lie)."""
        return least_max_cut(costs, self.blocks, self.stages, trace)


def least_max_cut(costs: np.ndarray, blocks: int, stages: int, trace: bool = True) -> tuple[int, tuple[int, ...]] | None:
    """The least largest stage cost over every contiguous cut of `blocks` into `stages` (each holding a block)
    and the first cut of it (an empty cut without `trace`; PP 1: its one cut), None when no cut's cost is
    finite: `costs` are StageBands' (flat; B >= S). A middle stage's least values run over its band's starts
    alone (elsewhere no cut completes, so the least and the first of the least are those over whole matrices);
    the cut is traced back from each stage's least values, its start the first of the least into the end the
    stage after it chose."""
    edge = blocks + 1
    if stages == 1:
        value = int(costs[blocks])
        return None if value >= NO_STAGE else (value, (blocks,))
    width = blocks - stages + 1
    best, low = costs[:edge], 0
    middle = costs[edge:len(costs) - edge].reshape(max(stages - 2, 0), width, width)
    reached = []
    if stages > 2:
        best, low = best[1:1 + width], stages - 1
    for cost in middle:
        reached.append(best)
        best = np.minimum.reduce(np.maximum(best[:, None], cost), axis=0)
    ends = np.maximum(best, costs[len(costs) - edge + low:len(costs) - edge + low + len(best)])
    j = int(ends.argmin())
    value = int(ends[j])
    if value >= NO_STAGE:
        return None
    if not trace:
        return value, ()
    j += low
    layout = [blocks - j]
    for s in range(stages - 2, 0, -1):
        start = s + int(np.maximum(reached[s - 1], middle[s - 1][:, j - (s + 1)]).argmin())
        layout.append(j - start)
        j = start
    layout.append(j)
    return value, tuple(reversed(layout))


def stage_bands(c: RowCosts, counts: np.ndarray) -> StageBands:
    """The row's StageBands: of each stage's time and memory over every block interval, the entries that
    least_max_cut reads (tests/stage_tables.py builds the whole matrices), each stage's in-flight share applied
    to those alone (the interval sums and each distinct edge's terms once,
    costs.edge_terms)."""
    sums = interval_sums(c, counts)
    blocks, stages = counts.shape[0] - 1, c.row.pp
    windows = [(slice(0, 1), slice(None))]
    windows += [(_band(s, stages, blocks), _band(s + 1, stages, blocks)) for s in range(1, stages - 1)]
    if stages > 1:
        windows.append((slice(None), slice(blocks, blocks + 1)))
    sizes = [blocks + 1] + [(blocks - stages + 1) ** 2] * max(stages - 2, 0) + [blocks + 1] * (stages > 1)
    time, memory = np.empty(sum(sizes), dtype=np.int64), np.empty(sum(sizes), dtype=np.int64)
    by_edge: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    start = 0
    for s, ((rows, cols), size) in enumerate(zip(windows, sizes, strict=True)):
        stage_time, fixed, held = (x[rows, cols] for x in edge_terms(c, s, sums, by_edge))
        time[start:start + size] = stage_time.ravel()
        memory[start:start + size] = in_flight_memory(fixed, held, c.inflight[s], sums.none[rows, cols]).ravel()
        start += size
    return StageBands(time, memory, blocks, stages)


def _band(stage: int, stages: int, blocks: int) -> slice:
    """The ends a cut's first `stage` stages may have when all `stages` hold a block each: stage..blocks −
    (stages − stage). The middle stage `stage` starts at one of them and ends at one of the next stage's."""
    return slice(stage, blocks - (stages - stage) + 1)


def rank_counts(layout: tuple[int, ...], pp: int, counts: np.ndarray) -> list[tuple[int, ...]]:
    """Blocks of each kind per pipeline rank for a virtual-stage layout (derived.stage_of_virtual)."""
    return [tuple(row) for row in cuts_rank_counts([layout], pp, counts)[0].tolist()]


def cuts_rank_counts(layouts: list[tuple[int, ...]], pp: int, counts: np.ndarray) -> np.ndarray:
    """rank_counts of N layouts of PP·VPP virtual stages each, in one array (N × PP × kinds): virtual stage k
    runs on rank k mod PP (derived.stage_of_virtual), so stage k·PP + r adds to rank r."""
    cuts = np.array(layouts, dtype=np.int64).reshape(len(layouts), -1)
    ends = np.cumsum(cuts, axis=1)
    held = counts[ends - cuts, ends]
    return held.reshape(len(layouts), -1, pp, counts.shape[2]).sum(axis=1)


def interleaved_staircase(c: RowCosts, counts: np.ndarray, usable: int, deadline: float = math.inf) -> Staircase:
    """Interleaved (VPP > 1): the exact staircase by branch and bound over the cut
    (solver/search/interleaved.py): per memory cap the fastest cut, then the leanest at its step time.
    Past `deadline` (perf_counter) the steps found so far, unproved."""
    return InterleavedStairs(c, counts, usable).rest(deadline)


class InterleavedStairs:
    """An interleaved row's staircase built a step at a time (interleaved_staircase): under the current memory cap
    the fastest cut, then the leanest at its step time, the cap then falling below that step's memory. A search
    may stop between steps (row_search.RowSearch's tails: the steps left wait until no row they could beat is
    left uncut)."""

    def __init__(self, c: RowCosts, counts: np.ndarray, usable: int) -> None:
        self.search = InterleavedCuts(c, counts)
        self.points: list[CutPoint] = []
        self.cap = usable
        """The memory cap (MB) of the next step: every step left keeps each rank within it."""
        self.proved = True
        self.done = usable < 0

    def step(self, deadline: float = math.inf) -> CutPoint | None:
        """The next step (None, and done, when no cut is within the cap); past `deadline` (perf_counter) the
        staircase ends here, unproved."""
        self.search.deadline = deadline
        layout, exact = self.search.best(self.cap)
        self.proved = self.proved and exact
        if layout is None:
            self.done = True
            return None
        point = CutPoint(*self.search.units(layout), layout)
        self.points.append(point)
        self.cap = (point.memory_units - 1) * MEMORY_UNIT_MB
        if self.cap < 0:
            self.done = True
        elif self.search.late():
            self.proved, self.done = False, True
        return point

    def rest(self, deadline: float = math.inf) -> Staircase:
        """The whole staircase: every step left found now (past `deadline`, perf_counter, those found, unproved)."""
        while not self.done:
            self.step(deadline)
        return self.staircase

    @property
    def stepwise(self) -> bool:
        """Whether the staircase is worth building a step at a time, each step's floor known before its search
        (next_slowest_us): a row of two block kinds or more, whose steps each take a search; a row of one kind
        has its whole staircase from the relaxation at once, for less than its steps asked one by one."""
        return len(self.search.relaxed.groups) >= 2

    def lower_cap(self, cap_mb: int) -> None:
        """Skip the steps above `cap_mb` (the caller has shown they can never enter the answer): the next step is the
        fastest cut within it."""
        self.cap = min(self.cap, cap_mb)
        self.done = self.done or self.cap < 0

    def next_slowest_us(self, deadline: float = math.inf) -> int | None:
        """A slowest-rank time (µs, by the row's linear tables) that no cut within the next step's cap goes below
        (InterleavedCuts.slowest_floor: the least itself where the round program answers it, kept for that step;
        else the relaxation's); None where neither answers by `deadline` (perf_counter). With no cut within the cap
        the staircase is done."""
        self.search.deadline = deadline
        answered, slowest_us = self.search.slowest_floor(self.cap)
        if answered and slowest_us is None:
            self.done = True
        return slowest_us if answered else None

    @property
    def staircase(self) -> Staircase:
        """The steps found so far, best step time first."""
        return Staircase(tuple(self.points), self.proved)


def some_cut_fits(c: RowCosts, counts: np.ndarray, usable: int, deadline: float = math.inf) -> bool:
    """Whether any cut keeps every rank within usable memory (cut_fit; left open past `deadline`: then True,
    for the staircase to settle)."""
    return cut_fit(c, counts, usable, deadline) is not False


def cut_fit(c: RowCosts, counts: np.ndarray, usable: int, deadline: float = math.inf) -> bool | None:
    """Whether any cut keeps every rank within usable memory, None when the question is left open: the
    min-max DP for 1F1B (always answered), the branch and bound for interleaved rows (open when its budget or
    `deadline` runs out). Reads memory only, so it runs before any time is priced."""
    if c.row.vpp > 1:
        return InterleavedCuts(c, counts, deadline).fit(usable)
    if counts.shape[0] - 1 < c.row.pp:
        return False
    bands = stage_bands(c, counts)
    return bands.least_max(np.where(bands.memory <= usable, bands.memory, NO_STAGE), trace=False) is not None


def best_cut(c: RowCosts, counts: np.ndarray, cap_mb: int) -> CutPoint | None:
    """The best cut of one row (a mapping's degrees) under a memory cap in MB: least step time, then least
    peak memory, in the solver's units; None when no cut keeps every rank within the cap. Exact for
    every VPP (the first step of the row's staircase under that cap)."""
    if c.row.vpp == 1:
        points = dp_staircase(c, counts, cap_mb).points
        return points[0] if points else None
    search = InterleavedCuts(c, counts)
    layout = search.best(cap_mb)[0]
    return None if layout is None else CutPoint(*search.units(layout), layout)


def fastest_cut(c: RowCosts, counts: np.ndarray, cap_mb: int,
                proof_work: float | None = None) -> tuple[tuple[int, ...] | None, bool]:
    """A cut of least step time (solver units) keeping every rank within `cap_mb` (None when none does), and
    whether that is proved: the DP's for 1F1B (its least peak memory among the fastest too), the interleaved
    search's fastest for VPP > 1 (proved unless its budgets, or `proof_work` per CP-SAT question, ran out),
    without the pass best_cut adds for the leanest among the fastest, whose proofs that no leaner cut exists
    take most of a hybrid model's search (Nemotron-H 8B at PP16 VPP3: 1 s for the fastest, 27 s more for the
    leanest)."""
    if c.row.vpp == 1:
        point = best_cut(c, counts, cap_mb)
        return (None if point is None else point.layout), True
    return InterleavedCuts(c, counts, proof_work=proof_work).fastest(cap_mb)


def row_staircase(c: RowCosts, counts: np.ndarray, usable: int, deadline: float = math.inf) -> Staircase:
    """A row's exact staircase: the DP for 1F1B, the branch and bound for interleaved schedules (cut
    short and unproved past `deadline`, a perf_counter time)."""
    if c.row.vpp == 1:
        return dp_staircase(c, counts, usable)
    return interleaved_staircase(c, counts, usable, deadline)
