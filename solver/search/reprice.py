"""One price: every step of a row's staircase re-priced exactly as `explain` prints it, before the master
program sees it.

The cut searches (solver/search/cuts.py) rank cuts by linear stage tables: per-kind microseconds and
whole MB per term. The printed step time also carries per-step terms that depend on the cut (the
slowest rank's exposed gradient reduction and optimizer step, the pipeline sends hidden behind the
slowest stage), and the printed memory is the ledger's exact bytes. Each step is therefore priced again
with the step-time model's own `price` over the ranks the cut makes (StageTimeModel.cut_step_times_s)
and the ledger's byte tables (RowCosts.stage_bytes); the master optimises those values, so the front it
returns is non-dominated under the values it prints. Every row keeps its steps (none is dropped here
except a step another step of the same row now dominates), so no row is lost to the re-pricing.
"""

from __future__ import annotations

import math

import numpy as np

from parasol.constraints.physics.step_time import EpOption
from parasol.problems.mapping import Mapping
from parasol.solver.search.costs import (
    MB,
    MEMORY_UNIT_MB,
    MICROSECONDS,
    TIME_UNIT_S,
    RowCosts,
    StageTimeModel,
    memoised_floor,
    memory_floor_ratio,
    most_blocks,
    whole_block_memory_floor,
)
from parasol.solver.search.cuts import CutPoint, Staircase, cuts_rank_counts


def time_units(seconds: float) -> int:
    """Step seconds in the program's units (0.1 ms), rounded up (to 1e-6 of a unit, so float noise in
    the last digit does not add a unit)."""
    return math.ceil(round(seconds / TIME_UNIT_S, 6))


def memory_units(nbytes: int) -> int:
    """Peak bytes in the program's units (10 MB), rounded up."""
    return -(-nbytes // (MEMORY_UNIT_MB * MB))


def non_dominated(points: list[CutPoint]) -> tuple[CutPoint, ...]:
    """The points no other point beats on both objectives, best step time first (ties: least memory,
    then layout)."""
    kept: list[CutPoint] = []
    for q in sorted(points, key=lambda q: (q.time_units, q.memory_units, q.layout)):
        if not kept or q.memory_units < kept[-1].memory_units:
            kept.append(q)
    return tuple(kept)


def exact_staircase(c: RowCosts, mapping: Mapping, staircase: Staircase, counts: np.ndarray,
                    time_model: StageTimeModel) -> Staircase:
    """The staircase's steps at their printed step time and peak memory (`mapping`: the row's)."""
    if not staircase.points:
        return staircase
    per_rank = cuts_rank_counts([q.layout for q in staircase.points], c.row.pp, counts)
    seconds = time_model.cut_step_times_s(mapping, c.derived, per_rank)
    peaks = c.ranks_bytes(per_rank).max(axis=1).tolist()
    points = [CutPoint(time_units(float(t)), memory_units(peak), q.layout)
              for q, t, peak in zip(staircase.points, seconds, peaks, strict=True)]
    return Staircase(non_dominated(points), staircase.proved)


def memory_floor_bytes(c: RowCosts, counts: np.ndarray, open_edges: bool | None = None) -> int:
    """Peak bytes no cut of the row goes below, as the ledger prints them: costs.memory_floor_mb's weighted
    means of the ranks over the ledger's exact bytes, rounded up (`open_edges`: costs.memory_floor_ratio's)."""
    num, den = memory_floor_ratio(c, counts[0, counts.shape[0] - 1], True, open_edges)
    return -(-num // den)


def memory_floor_units(c: RowCosts, counts: np.ndarray) -> int:
    """Peak-memory units no cut of the row goes below: the larger of memory_means_units and the whole-block
    bound's (costs.whole_block_memory_floor), once per row table, in-flight shares and `counts`
    (costs.memoised_floor; the entry holds `counts`, so the identity it is kept by stays its own)."""
    return memoised_floor(c, ("units", id(counts)), lambda: (counts, _memory_floor_units(c, counts)))[1]


def _memory_floor_units(c: RowCosts, counts: np.ndarray) -> int:
    """memory_floor_units, computed."""
    unit = MEMORY_UNIT_MB * MB
    return max(memory_means_units(c, counts), whole_block_memory_floor(c, counts[0, counts.shape[0] - 1], unit))


def memory_means_units(c: RowCosts, counts: np.ndarray, open_edges: bool | None = None) -> int:
    """memory_floor_bytes in the program's units: memory_floor_units less its whole-block bound, never above it
    and for a fraction of its cost, so a row it already shows beaten is dropped before that bound is computed.
    Once per row table, in-flight shares, `counts` and `open_edges` (costs.memory_floor_ratio's), as
    memory_floor_units."""
    return memoised_floor(c, ("means units", id(counts), open_edges),
                          lambda: (counts, memory_units(memory_floor_bytes(c, counts, open_edges))))[1]


def units_below(seconds: float) -> int:
    """A floor's seconds in the program's units, rounded down with room for float noise: never above the
    units of a step it bounds."""
    return math.floor(seconds / TIME_UNIT_S * (1 - 1e-9))


def floor_point(c: RowCosts, mapping: Mapping, counts: np.ndarray, time_model: StageTimeModel,
                usable: int | None = None, ep_options: tuple[EpOption, ...] | None = None) -> tuple[int, int]:
    """(step time, peak memory) units no cut of the row goes below, as printed: step_floor_units and
    memory_floor_units (`usable`: the MB every cut keeps each rank within, None: no such bound; `ep_options`:
    the dispatchers and backends the row may take, None: any)."""
    return step_floor_units(c, mapping, counts, time_model, usable, ep_options), memory_floor_units(c, counts)


def step_floor_units(c: RowCosts, mapping: Mapping, counts: np.ndarray, time_model: StageTimeModel,
                     usable: int | None = None, ep_options: tuple[EpOption, ...] | None = None) -> int:
    """Step-time units no cut of the row goes below under any of `ep_options` (None: any dispatcher): the
    step-time model's floor (StageTimeModel.step_floor_s), with each rank holding at most the blocks its memory
    allows within `usable` MB (costs.most_blocks; None: any number)."""
    most = None if usable is None else _most_blocks(c, counts, usable)
    return units_below(time_model.step_floor_s(mapping, c.derived, counts[0, counts.shape[0] - 1], most,
                                               ep_options))


def tail_floor_units(c: RowCosts, mapping: Mapping, counts: np.ndarray, time_model: StageTimeModel, slowest_us: int,
                     ep_options: tuple[EpOption, ...] | None = None) -> int | None:
    """Step-time units, as printed, no cut of the row goes below whose slowest rank takes at least `slowest_us` by
    the row's linear tables (every cut within a memory cap, when `slowest_us` is the least any takes: the steps a
    staircase has left, cuts.InterleavedStairs). A rank's stage seconds are at least the step-time model's lines
    a_r + Σ_k b_rk·n_k (CalibratedStageTimes.stage_floor_lines), and its linear µs are e_r + Σ_k t_k·n_k (edge_time_us,
    kind_time_us): with β ≤ b_rk / t_k for every rank and kind (0 ≤ β ≤ 1), a_r + Σ b_rk·n_k ≥ β·(e_r + Σ t_k·n_k)
    − (β·e_r − a_r), so the slowest rank's stage seconds are at least β·slowest_us − max_r (β·e_r − a_r), and the
    step floor grows with them (StageTimeModel.step_floor_s's slowest_s). None for a model without those lines (a
    test's) or a kind the linear tables price at no time whose line falls with blocks."""
    lines = getattr(time_model, "stage_floor_lines", None)
    if lines is None:
        return None
    totals = counts[0, counts.shape[0] - 1]
    least, per_block = (x * MICROSECONDS for x in lines(mapping, c.derived, totals, ep_options))
    slopes = np.array(c.kind_time_us, dtype=float)[totals > 0]
    if per_block.shape[1] != len(slopes) or (per_block[:, slopes <= 0] < 0).any():
        return None
    priced = slopes > 0
    beta = min(1.0, max(0.0, float((per_block[:, priced] / slopes[priced]).min(initial=1.0))))
    slowest = (beta * slowest_us - float((beta * np.array(c.edge_time_us, dtype=float) - least).max())) / MICROSECONDS
    return units_below(time_model.step_floor_s(mapping, c.derived, totals, None, ep_options, slowest_s=slowest))


def _most_blocks(c: RowCosts, counts: np.ndarray, usable: int) -> np.ndarray | None:
    """costs.most_blocks of the row's blocks within `usable` MB, once per row table, in-flight shares, `usable`
    and `counts` (costs.memoised_floor, as memory_floor_units: the rows of a table that differ in rank order or
    in what the memory tables do not read share it)."""
    return memoised_floor(c, ("most", usable, id(counts)),
                          lambda: (counts, most_blocks(c, counts[0, counts.shape[0] - 1], usable)))[1]


def compute_floor_units(per_microbatch_s: float, stretch: float) -> int:
    """step_floor_units from the step-time model's compute floor: the compute seconds of one microbatch over
    every block (StageTimeModel.compute_per_microbatch_s) times the pipeline's even stretch
    (schedule.even_stretch of the row's PP, VPP and microbatches). Never above step_floor_units, for a
    fraction of its cost, so a row it shows beaten is skipped before step_floor_units."""
    return units_below(per_microbatch_s * stretch * (1 - 1e-9))


def exposed_floor_units(c: RowCosts, mapping: Mapping, counts: np.ndarray, time_model: StageTimeModel,
                        ep_options: tuple[EpOption, ...] | None = None) -> int:
    """step_floor_units from the step-time model's exposed floor (StageTimeModel.exposed_floor_s: the least rank
    floor and exposed-exchange seconds under `ep_options`, spread evenly, with the data-parallel exposure and
    pipeline sends the step floor adds at that stage): between compute_floor_units and step_floor_units."""
    return units_below(time_model.exposed_floor_s(mapping, c.derived, counts[0, counts.shape[0] - 1], ep_options)
                       * (1 - 1e-9))
