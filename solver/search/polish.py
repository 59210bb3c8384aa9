"""Polish: every cut the master returns moved to a local optimum of the printed price before it is explained.

The cut searches rank a row's cuts by its linear tables (RowCosts: per-kind microseconds on a typical rank, and
the per-step terms, exposed gradient reduction, optimizer step and pipeline sends, taken once at the default cut),
and reprice.exact_staircase then prices the cuts they return as `explain` prints them. The per-step terms follow
the heaviest rank of the actual cut, so a cut one block away can print faster at the same memory: session 51's
front probe (bench/front_probe.py) found DeepSeek-V4-Flash on 32,768 GPUs, PP16 CP8 EP128, printed at 1.9194 s
where moving one block gives 1.9166 s.

So each returned step is polished: of the cuts one block away (a block taken from a virtual stage above its least,
empty_stages.stage_least, and given to any other), the fastest, then leanest, then first that beats it on both
printed objectives replaces it, again and again, while the rules judged cut by cut still hold and every rank stays
within usable HBM; when no single move does, pairs of the best moves are tried (PAIRED_MOVES). A cut is priced in
full only when its pipeline time over its exact stage times, which its step never goes below, leaves it a chance.
A polished step only ever dominates the step it replaces, so every bound and floor that beat rows before still
holds; solve runs the master again until every step it returns is polished.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parasol.arrays import distinct_rows
from parasol.constraints.core.base import Constraint
from parasol.constraints.physics.schedule import pipeline_seconds
from parasol.problems.empty_stages import stage_least
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.solver.search.costs import TIME_UNIT_S, RowCosts, StageTimeModel
from parasol.solver.search.cuts import CutPoint, Staircase, cuts_rank_counts
from parasol.solver.search.pareto import Point
from parasol.solver.search.program import cut_passes
from parasol.solver.search.reprice import memory_units, non_dominated, time_units
from parasol.solver.search.savings import row_problem
from parasol.solver.search.space import Row, with_choices


def one_block_moves(layout: tuple[int, ...], least: tuple[int, ...]) -> np.ndarray:
    """Every layout one block away from `layout` (one per row): a block taken from a virtual stage holding more than
    its least and given to another, in the order (giving stage, taking stage)."""
    stages = len(layout)
    give, take = np.nonzero((np.array(layout) > np.array(least))[:, None] & ~np.eye(stages, dtype=bool))
    moves = np.tile(np.array(layout, dtype=np.int64), (len(give), 1))
    moves[np.arange(len(give)), give] -= 1
    moves[np.arange(len(give)), take] += 1
    return moves


def paired_moves(start: tuple[int, ...], moves: np.ndarray, least: tuple[int, ...]) -> np.ndarray:
    """Every layout two of `moves` (one-block moves of `start`, one per row) make together, each stage keeping its
    least, once each, in the order of the pairs (first move, second move)."""
    a, b = np.triu_indices(len(moves), k=1)
    base = np.array(start, dtype=np.int64)
    pairs = moves[a] + moves[b] - base
    pairs = pairs[(pairs >= np.array(least)).all(axis=1) & (pairs != base).any(axis=1)]
    return pairs[distinct_rows(pairs)[0]]


PAIRED_MOVES = 32
"""How many one-block moves polished_point pairs up when no single move beats the cut: those within the cut's
memory with the least pipeline time (ties: leanest, first move). A move that keeps every rank's blocks of each kind
keeps the price, yet two such moves together can trade kinds between ranks (DeepSeek-V4-Flash on 32,768 GPUs, PP8
VPP6 CP4 EP256: no single move beats 1.2999 s, a pair gives 1.2994 s by trading a block of one attention kind for
another between the first and last rank)."""


@dataclass(frozen=True)
class _Judged:
    """Candidate layouts (one per row of `layouts`) judged before their full price: peak-memory units, whether
    every rank fits, and the pipeline seconds of their exact stage times, which their step never goes below."""

    layouts: np.ndarray
    ranks: np.ndarray
    memory: np.ndarray
    fits: np.ndarray
    pipeline: np.ndarray


class _CutPrices:
    """A row's cuts at the printed price, each judged for fit and the cut rules (polished_point's context)."""

    def __init__(self, c: RowCosts, mapping: Mapping, counts: np.ndarray, time_model: StageTimeModel,
                 usable_bytes: float, allowed: Callable[[tuple[int, ...]], bool]) -> None:
        self.c, self.mapping, self.counts, self.time_model = c, mapping, counts, time_model
        self.usable_bytes, self.allowed = usable_bytes, allowed

    def judged(self, layouts: np.ndarray) -> _Judged:
        """`layouts` judged by their memory and their pipeline time (StageTimeModel.cut_stage_times_s), which cost
        a fraction of the full price: a layout whose pipeline time alone exceeds a step cannot beat it."""
        ranks = cuts_rank_counts(layouts, self.c.row.pp, self.counts)
        peaks = self.c.ranks_bytes(ranks).max(axis=1)
        stages = self.time_model.cut_stage_times_s(self.mapping, self.c.derived, ranks)
        pipeline = pipeline_seconds(stages, float(self.c.derived.num_microbatches), self.c.row.vpp)
        return _Judged(layouts, ranks, memory_units(peaks), peaks <= self.usable_bytes, pipeline)

    def first_better(self, judged: _Judged, than: CutPoint) -> CutPoint | None:
        """The fastest, then leanest, then first of the judged layouts that dominates `than` at the printed price
        (reprice's units) and passes the cut rules; only layouts that fit, within its memory and whose pipeline
        time does not exceed its step are priced in full (each distinct per-rank blocks once)."""
        within = judged.fits & (judged.memory <= than.memory_units)
        maybe = np.nonzero(within & (judged.pipeline <= than.time_units * TIME_UNIT_S * (1 + 1e-9)))[0]
        if not len(maybe):
            return None
        ranks = judged.ranks[maybe]
        first, same = distinct_rows(ranks.reshape(len(maybe), -1))
        seconds = self.time_model.cut_step_times_s(self.mapping, self.c.derived, ranks[first])
        steps = np.array([time_units(float(t)) for t in seconds], dtype=np.int64)[same]
        memory = judged.memory[maybe]
        beats = (steps <= than.time_units) & ((steps < than.time_units) | (memory < than.memory_units))
        for k in np.lexsort((maybe, memory, steps)).tolist():
            if not beats[k]:
                continue
            layout = tuple(int(n) for n in judged.layouts[maybe[k]])
            if self.allowed(layout):
                return CutPoint(int(steps[k]), int(memory[k]), layout)
        return None


def polished_point(c: RowCosts, mapping: Mapping, start: CutPoint, counts: np.ndarray, time_model: StageTimeModel,
                   usable_bytes: float, allowed: Callable[[tuple[int, ...]], bool],
                   deadline: float = math.inf) -> tuple[CutPoint, bool]:
    """(the cut reached from `start`, whether no move beats it): again and again, the fastest, then leanest, then
    first cut one block away (one_block_moves) that dominates the current one at the printed price, keeps every
    rank within `usable_bytes` and is `allowed` (the cut rules); when none is, the same among the pairs of the
    PAIRED_MOVES moves of least pipeline time (paired_moves). Stops at `deadline` (perf_counter) with the cut
    reached."""
    least = stage_least(c.row.pp, c.row.vpp)
    prices = _CutPrices(c, mapping, counts, time_model, usable_bytes, allowed)
    best = start
    while time.perf_counter() <= deadline:
        moves = one_block_moves(best.layout, least)
        if not len(moves):
            return best, True
        singles = prices.judged(moves)
        chosen = prices.first_better(singles, best)
        if chosen is None:
            within = np.nonzero(singles.fits & (singles.memory <= best.memory_units))[0]
            order = within[np.lexsort((within, singles.memory[within], singles.pipeline[within]))]
            pairs = paired_moves(best.layout, moves[order[:PAIRED_MOVES]], least)
            chosen = prices.first_better(prices.judged(pairs), best) if len(pairs) else None
        if chosen is None:
            return best, True
        best = chosen
    return best, False


def with_polished(stairs: Staircase, start: CutPoint, polished: CutPoint) -> Staircase:
    """The staircase with `polished` in place of its step `start` (steps it now dominates dropped)."""
    return Staircase(non_dominated([polished if q == start else q for q in stairs.points]), stairs.proved)


class CutPolisher:
    """Polishes the steps the master returns (polished_point), each (row, layout) once, and says whether every
    polish it was asked for ran to its end."""

    def __init__(self, problem: Problem, rows: tuple[Row, ...], costs: tuple[RowCosts, ...],
                 model_of: Callable[[Row], StageTimeModel], counts: np.ndarray,
                 cut_rules: tuple[Constraint, ...]) -> None:
        self.problem, self.rows, self.costs, self.model_of = problem, rows, costs, model_of
        self.counts, self.cut_rules = counts, cut_rules
        self.usable_bytes = problem.hardware.gpu.usable_hbm_bytes
        self.done: set[tuple[int, tuple[int, ...]]] = set()
        self.complete = True
        """False once a polish stopped at its deadline."""

    def polished(self, points: tuple[Point, ...], stairs: tuple[Staircase, ...],
                 deadline: float = math.inf) -> tuple[Staircase, ...] | None:
        """`stairs` with every step among `points` not polished before replaced by its polish; None when no step
        changed. A step that a polished step of its row now dominates has left the staircase with it
        (with_polished) and is not polished: the master, solved again over the changed staircases, no longer
        returns it. Past `deadline` (perf_counter) the steps left are not polished, and the polisher is
        incomplete, as it is when steps changed with no time left to solve the master again over them."""
        changed = list(stairs)
        for pt in points:
            key = (pt.row_index, pt.layout)
            if key in self.done or len(pt.layout) < 2:
                continue
            if time.perf_counter() > deadline:
                self.complete = False
                break
            start = next((q for q in changed[pt.row_index].points if q.layout == pt.layout), None)
            if start is None:
                continue
            self.done.add(key)
            better = self._polish(pt.row_index, start, deadline)
            if better != start:
                self.done.add((pt.row_index, better.layout))
                changed[pt.row_index] = with_polished(changed[pt.row_index], start, better)
        if changed == list(stairs):
            return None
        self.complete &= time.perf_counter() <= deadline
        return tuple(changed)

    def _polish(self, i: int, start: CutPoint, deadline: float) -> CutPoint:
        """polished_point of row i's step `start`, judged by the cut rules under the row's options."""
        row, c = self.rows[i], self.costs[i]
        judged = with_choices(row_problem(self.problem, row), row)
        point, finished = polished_point(c, row.mapping(self.problem), start, self.counts, self.model_of(row),
                                         self.usable_bytes,
                                         lambda layout: cut_passes(judged, row, layout, self.cut_rules), deadline)
        self.complete &= finished
        return point
