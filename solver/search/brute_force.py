"""The brute-force reference of `solve`: enumerate every row, judge it with the Python rules, try every
cut (every way to cut the blocks into PP·VPP stages of at least one block, interleaved rows included,
whose first and last rank's stages may also be empty: empty_stages.py; one per distinct holding of the
ranks, which is all a cut's values and rules read) under every
option the row may choose (callers pass one row per dispatcher and CP communication type,
space.choice_variants; each under the memory saving it is kept with, fitting_saving), and keep the
non-dominated points of the two front objectives (step time × peak memory by default).
Tests compare its front with the CP-SAT master's on small problems.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

from parasol.constraints.core.base import Constraint
from parasol.constraints.evaluate import evaluate
from parasol.problems.empty_stages import stage_least
from parasol.problems.loader import Problem
from parasol.problems.schema import Objective
from parasol.solver.search.costs import RowCosts, row_costs
from parasol.solver.search.cuts import cuts_rank_counts
from parasol.solver.search.dominance import nondominated
from parasol.solver.search.objectives import DEFAULT_OBJECTIVES, SCALES, row_units
from parasol.solver.search.program import choice_rules, judged_rules, program_rules
from parasol.solver.search.savings import NONE, open_savings, row_problem, with_saving
from parasol.solver.search.space import Row


@dataclass(frozen=True)
class RefPoint:
    """A (row, layout) with its objective values in the solver's units: step time, peak memory and the
    two front objectives (by default the same two)."""

    row: Row
    layout: tuple[int, ...]
    time_units: int
    memory_units: int
    values: tuple[int, int]
    order: int = 0
    """The row's position in the search order (the solver's tie-break between equal points)."""


def front_of(points: list[RefPoint]) -> list[RefPoint]:
    """Points no other point beats on both front objectives (one per value pair: first in search order,
    then fastest, leanest, by layout)."""
    ordered = sorted(points, key=lambda q: (q.values, q.order, q.time_units, q.memory_units, q.layout))
    return [ordered[i] for i in nondominated([q.values for q in ordered])]


def compositions(total: int, parts: int, pp: int | None = None):
    """Every way to write `total` blocks as `parts` stages of at least one block, in order; given `pp`, every cut
    of the covered family of PP ranks (stage i on rank i mod PP; on an interleaved row the first and last rank's
    stages may also hold none: empty_stages.stage_least)."""
    least = stage_least(pp, parts // pp) if pp else (1,) * parts
    spare = total + parts - sum(least)
    for cuts in combinations(range(1, spare), parts - 1):
        edges = (0, *cuts, spare)
        yield tuple(edges[i + 1] - edges[i] - 1 + least[i] for i in range(parts))


def row_layouts(row: Row, counts: np.ndarray) -> list[tuple[int, ...]]:
    """One cut of the row's PP·VPP virtual stages per distinct holding (every rank's kind counts) over the block
    sequence whose interval counts are `counts`, the first in layout order, in layout order: a rank's time and
    memory, and so every rule on a cut, depend only on its holding, so these stand for every cut."""
    return holding_cuts(counts, row.pp, row.vpp)


def holding_cuts(counts: np.ndarray, pp: int, vpp: int) -> list[tuple[int, ...]]:
    """row_layouts' cuts: stage by stage over every partial cut at once, keeping one per (end block, holding so
    far), the first in layout order (a prefix first in order stays first whatever follows it)."""
    n, stages = counts.shape[0] - 1, pp * vpp
    least = stage_least(pp, vpp)
    place = np.cumprod(np.concatenate([[1], counts[0, n, :-1] + 1])).astype(np.int64)
    codes = counts @ place
    pos = np.zeros(1, dtype=np.int64)
    held = np.zeros((1, pp), dtype=np.int64)
    layout = np.zeros((1, 0), dtype=np.int64)
    for k in range(stages):
        low = np.full(len(pos), n) if k == stages - 1 else pos + least[k]
        count = np.maximum(n - sum(least[k + 1:]) - low + 1, 0)
        parent = np.repeat(np.arange(len(pos)), count)
        end = low[parent] + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        held, layout = held[parent], np.concatenate([layout[parent], (end - pos[parent])[:, None]], axis=1)
        held[:, k % pp] += codes[pos[parent], end]
        order = np.lexsort((*layout.T[::-1], *held.T[::-1], end))
        key = np.concatenate([end[:, None], held], axis=1)[order]
        first = order[np.concatenate(([True], (key[1:] != key[:-1]).any(axis=1)))]
        pos, held, layout = end[first], held[first], layout[first]
    return sorted(tuple(int(x) for x in row) for row in layout)


def row_points(c: RowCosts, counts: np.ndarray, usable: int, per_row: dict[Objective, int] | None = None,
               objectives: tuple[Objective, Objective] = DEFAULT_OBJECTIVES, order: int = 0,
               problem: Problem | None = None, cut_rules: tuple[Constraint, ...] = ()) -> list[RefPoint]:
    """Every non-dominated (layout, objectives) of one row, by enumeration; `per_row` holds the row's
    per-row objective values; `cut_rules` (judged on each layout of `problem`) must hold. Of the layouts with
    the same step time and peak memory only the first (in layout order) that meets them can be on the front
    (front_of breaks ties by layout), so the rules are judged in that order until one does."""
    row = c.row
    layouts = row_layouts(row, counts)
    chosen = row_problem(problem, row) if problem is not None else None
    by_price: dict[tuple[int, int], list[tuple[int, ...]]] = {}
    for lay, priced in zip(layouts, _rank_prices(c, layouts, counts, usable), strict=True):
        if priced is not None:
            by_price.setdefault(priced, []).append(lay)
    points = []
    for (t, m), alike in by_price.items():
        lay = next((lay for lay in sorted(alike)
                    if not cut_rules or evaluate(chosen, row.mapping(chosen, lay), cut_rules).feasible), None)
        if lay is not None:
            known = {Objective.step_time: t, Objective.peak_memory: m, **(per_row or {})}
            points.append(RefPoint(row, lay, t, m, (known[objectives[0]], known[objectives[1]]), order))
    return front_of(points)


def _distinct_ranks(layouts: list[tuple[int, ...]], pp: int, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct per-rank kind counts of `layouts` (cuts × ranks × kinds) and which of them each layout has:
    interleaved cuts that differ only in where a rank's blocks lie share them, so each is priced once."""
    held = cuts_rank_counts(layouts, pp, counts).reshape(len(layouts), -1)
    distinct, which = np.unique(held, axis=0, return_inverse=True)
    return distinct.reshape(len(distinct), pp, -1), which.ravel()


def _rank_prices(c: RowCosts, layouts: list[tuple[int, ...]], counts: np.ndarray,
                 usable: int) -> list[tuple[int, int] | None]:
    """Per layout, its (step time, peak memory) when every rank fits `usable` MB, else None (_distinct_ranks)."""
    if not layouts:
        return []
    ranks, which = _distinct_ranks(layouts, c.row.pp, counts)
    fits = (c.ranks_memory(ranks) <= usable).all(axis=1).tolist()
    priced = [c.objectives([tuple(n) for n in flat]) if fit else None
              for flat, fit in zip(ranks.tolist(), fits, strict=True)]
    return [priced[i] for i in which.tolist()]


def fitting_saving(problem: Problem, row: Row, counts: np.ndarray, usable: int) -> str | None:
    """The saving a row is kept with, by enumeration of every holding (row_layouts): none when some cut fits as it is, else
    the first open saving under which one does (savings.py's rule), None when no cut fits under any."""
    layouts = row_layouts(row, counts)
    if not layouts:
        return None
    ranks = _distinct_ranks(layouts, row.pp, counts)[0]
    for saving in (NONE, *open_savings(problem)):
        c = row_costs(with_saving(problem, saving), replace(row, saving=saving), None)
        if (c.ranks_memory(ranks) <= usable).all(axis=1).any():
            return saving
    return None


def rule_feasible(problem: Problem, row: Row) -> bool:
    """Whether the row passes every rule the master posts and every rule on the options it chooses
    (Python verdicts under its options and saving, with an explicit layout as every solver answer has)."""
    layout = row.default_cut(problem)
    chosen = row_problem(problem, row)
    rules = program_rules(problem) + judged_rules(problem, "row") + choice_rules(chosen)
    return evaluate(chosen, row.mapping(chosen, layout), rules).feasible


def reference_front(problem: Problem, costs: tuple[RowCosts, ...], counts: np.ndarray, usable: int,
                    objectives: tuple[Objective, Objective] = DEFAULT_OBJECTIVES) -> list[RefPoint]:
    """The exact rank-1 front over `objectives` by enumeration."""
    points: list[RefPoint] = []
    for order, c in enumerate(costs):
        if rule_feasible(problem, c.row):
            per_row = {o: row_units(problem, c.row, o) for o in objectives if not SCALES[o].per_cut}
            points.extend(row_points(c, counts, usable, per_row, objectives, order, problem,
                                     judged_rules(problem, "cut")))
    return front_of(points)
