"""The stage cuts of one row: how to cut the real block sequence into PP·VPP contiguous virtual
stages, with the heaviest rank of every stage within usable HBM, trading step time against peak
memory. The row's Pareto staircase is what it offers the master program (solver/search/program.py).

1F1B rows are solved exactly by a min-max dynamic program over contiguous cuts. Interleaved rows
(VPP > 1), whose ranks sum non-contiguous virtual stages, search a family of edge-trimmed layouts
(interleaved_layouts) exhaustively.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from parasol.constraints.physics.schedule import pipeline_time_scaled
from parasol.problems.derived import default_layout, stage_of_virtual
from parasol.solver.search.costs import MEMORY_UNIT_MB, MICROSECONDS, TIME_UNIT_S, RowCosts, stage_matrices
from parasol.solver.search.dominance import nondominated


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


def dp_staircase(c: RowCosts, counts: np.ndarray, usable: int) -> Staircase:
    """1F1B (VPP 1): the exact staircase by a min-max dynamic program over contiguous cuts. Step time
    depends on the cut only through the slowest stage (Σ t_s is the same for every cut), so each step
    is: least slowest-stage time under a memory cap, then least peak memory at that step time."""
    pp = c.row.pp
    blocks = counts.shape[0] - 1
    mats = [stage_matrices(c, s, counts) for s in range(pp)]
    inf = np.iinfo(np.int64).max
    unit = round(TIME_UNIT_S * MICROSECONDS)
    totals = [int(x) for x in counts[0, blocks]]
    stage_sum = sum(c.edge_time_us) + sum(t * n for t, n in zip(c.kind_time_us, totals, strict=True))

    def step_us(slowest: int) -> int:
        return c.constant_time_us + pipeline_time_scaled(stage_sum, slowest, c.microbatches, 1)

    base, slope = step_us(0), step_us(1) - step_us(0)
    points: list[CutPoint] = []
    cap = usable
    while cap >= 0:
        fastest = min_max_cut([np.where(mem <= cap, t, inf) for t, mem in mats], blocks)
        if fastest is None:
            break
        time_units = -(-step_us(fastest[0]) // unit)
        limit = (time_units * unit - base) // slope if slope else inf
        leanest = min_max_cut([np.where((mem <= cap) & (t <= limit), mem, inf) for t, mem in mats], blocks)
        assert leanest is not None
        memory_units = -(-leanest[0] // MEMORY_UNIT_MB)
        points.append(CutPoint(time_units, memory_units, leanest[1]))
        cap = (memory_units - 1) * MEMORY_UNIT_MB
    return Staircase(tuple(points))


def rank_counts(layout: tuple[int, ...], pp: int, counts: np.ndarray) -> list[tuple[int, ...]]:
    """Blocks of each kind per pipeline rank for a virtual-stage layout (derived.stage_of_virtual)."""
    per_rank = np.zeros((pp, counts.shape[2]), dtype=np.int64)
    start = 0
    for k, n in enumerate(layout):
        per_rank[stage_of_virtual(k, pp)] += counts[start, start + n]
        start += n
    return [tuple(int(x) for x in row) for row in per_rank]


EDGE_TRIM = 3
"""Interleaved cuts give the first and last virtual stages up to this many blocks fewer than the
balanced share (or one more): room for the embedding, head, loss and MTP they also hold."""


@lru_cache(maxsize=256)
def interleaved_layouts(blocks: int, stages: int) -> tuple[tuple[int, ...], ...]:
    """The cuts tried for interleaved rows (VPP > 1): the first virtual stage (which also holds the
    embedding) and the last (head, loss, MTP) take a and b blocks, from EDGE_TRIM below the balanced
    share (at least 1) to one above it, and the middle stages split the rest as evenly as
    derived.default_layout does; the balanced layout itself first (at most 26 cuts). A rank sums non-contiguous virtual stages, so no contiguous DP applies, and a
    CP-SAT cut program took 1-70 s per row (DeepSeek-V4-Pro, 1,024 GPUs): this family is searched
    exhaustively instead, by solve and by the brute-force reference alike."""
    balanced = default_layout(blocks, stages)
    if stages < 3:
        return (balanced,)
    share = blocks // stages
    out = [balanced]
    sizes = range(max(1, share - EDGE_TRIM), share + 2)
    for a in sizes:
        for b in sizes:
            middle = blocks - a - b
            if middle < stages - 2:
                continue
            layout = (a, *default_layout(middle, stages - 2), b)
            if layout not in out:
                out.append(layout)
    return tuple(out)


def interleaved_staircase(c: RowCosts, counts: np.ndarray, usable: int) -> Staircase:
    """Interleaved (VPP > 1): the non-dominated (step time, peak memory) cuts among
    interleaved_layouts, fastest first (ties: leaner, then the smaller layout, as the brute force)."""
    blocks = counts.shape[0] - 1
    scored = []
    for layout in interleaved_layouts(blocks, c.row.pp * c.row.vpp):
        per_rank = rank_counts(layout, c.row.pp, counts)
        if all(c.stage_memory(s, n) <= usable for s, n in enumerate(per_rank)):
            scored.append((*c.objectives(per_rank), layout))
    scored.sort()
    front = nondominated([(time_units, memory_units) for time_units, memory_units, _ in scored])
    return Staircase(tuple(CutPoint(*scored[i]) for i in front))


def some_cut_fits(c: RowCosts, counts: np.ndarray, usable: int) -> bool:
    """Whether any cut keeps every rank within usable memory: the min-max DP for 1F1B, the
    interleaved family for interleaved rows. Reads memory only, so it runs before any time is priced."""
    blocks = counts.shape[0] - 1
    if c.row.vpp > 1:
        return any(all(c.stage_memory(s, n) <= usable for s, n in enumerate(rank_counts(layout, c.row.pp, counts)))
                   for layout in interleaved_layouts(blocks, c.row.pp * c.row.vpp))
    inf = np.iinfo(np.int64).max
    memory = [stage_matrices(c, s, counts)[1] for s in range(c.row.pp)]
    return min_max_cut([np.where(m <= usable, m, inf) for m in memory], blocks) is not None


def row_staircase(c: RowCosts, counts: np.ndarray, usable: int) -> Staircase:
    """A row's staircase: the exact DP for 1F1B, the searched family for interleaved schedules."""
    if c.row.vpp == 1:
        return dp_staircase(c, counts, usable)
    return interleaved_staircase(c, counts, usable)


def min_max_cut(stage_costs: list[np.ndarray], blocks: int) -> tuple[int, tuple[int, ...]] | None:
    """Least possible largest stage cost over contiguous cuts with >= 1 block per stage (exact DP)."""
    inf = np.iinfo(np.int64).max
    best = np.full(blocks + 1, inf, dtype=np.int64)
    best[0] = 0
    choice = []
    valid = np.triu(np.ones((blocks + 1, blocks + 1), dtype=bool), k=1)
    for cost in stage_costs:
        cand = np.where(valid & (best[:, None] < inf), np.maximum(best[:, None], cost), inf)
        choice.append(np.argmin(cand, axis=0))
        best = cand.min(axis=0)
    if best[blocks] >= inf:
        return None
    layout, j = [], blocks
    for arg in reversed(choice):
        i = int(arg[j])
        layout.append(j - i)
        j = i
    return int(best[blocks]), tuple(reversed(layout))
