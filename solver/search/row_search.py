"""The rows `solve` takes to the master program, found best first: every row waits by its screening floor,
and the waiting row with the least floor comes up next (RowSearch._next: rows without interleaving first
while a hybrid's interleaved questions stay open and fewer than `top` rows have steps), to be judged by its
dearer floors and its fit (it waits again by the higher floor they give), or settled and cut; a row whose
floor `top` rule-feasible rows already cut dominate is skipped (solver/search/prune.py's argument).

When a row comes up, every row with a lower floor has been cut or skipped, so it is judged against the
most rows it can be: a search the time limit cuts short has cut the most promising rows, and a search
that completes gives the answer one pass would, since a skipped row can never enter the answer,
whichever rows were cut before it.
"""

from __future__ import annotations

import heapq
import operator
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

from parasol.constraints.evaluate import holds
from parasol.constraints.physics.schedule import even_stretch
from parasol.constraints.rules.feature import SettingsRule
from parasol.problems.loader import Problem
from parasol.solver.search.choices import ep_options, settled
from parasol.solver.search.costs import (
    MEMORY_UNIT_MB,
    RowCosts,
    StageTimeModel,
    memory_key,
    replaced,
    rounding_slack_mb,
    row_costs,
)
from parasol.solver.search.cuts import InterleavedStairs, Staircase, row_staircase
from parasol.solver.search.program import (
    choice_rules,
    cut_admitted,
    judged_rules,
    program_rules,
    row_admitted,
)
from parasol.solver.search.prune import TopStaircase
from parasol.solver.search.reprice import (
    compute_floor_units,
    exact_staircase,
    exposed_floor_units,
    floor_point,
    memory_floor_units,
    memory_means_units,
    non_dominated,
    tail_floor_units,
)
from parasol.solver.search.savings import (
    NONE,
    FitCandidates,
    bare_memory_floor_any_vpp,
    fit_candidates,
    memory_floor_any_vpp,
    open_savings,
    quick_fit,
    resolve_fit,
    row_problem,
    time_model_for,
    with_saving,
    without_static,
)
from parasol.solver.search.space import CHOICE_FIELDS, Row

model_variant = operator.attrgetter("saving", *CHOICE_FIELDS)
"""What a row's step-time model reads of it besides its mapping (RowSearch.model_of): its saving and the options it
chooses."""

FOREIGN = 1 << 40
"""Where the indices of rows another search cut start among this one's dominators (RowSearch.exchange)."""

EXCHANGE_POPS = 64
"""Rows that come up (RowSearch.cut_waiting) between two exchanges with the peer, at most."""

ROW_SHARE = 0.1
"""Share of the time left that one row's cut search may take: a row whose exact interleaved cuts take long
(several block kinds the relaxation cannot lay out) returns the steps it found, unproved, and leaves the
rest of the limit to the rows after it."""


class _Screened(NamedTuple):
    """A row screened and waiting by its screening floor (its memory tables are built when it is judged)."""

    row: Row


class _Candidates(NamedTuple):
    """A row's fit candidates waiting to be cut; `exact`: they wait by their step floor (or no floors)."""

    candidates: FitCandidates
    exact: bool


class _Tail(NamedTuple):
    """The steps a cut row's interleaved staircase has left (cuts.InterleavedStairs), waiting by their floor: the
    step time no cut within the staircase's next memory cap goes below (reprice.tail_floor_units) and the row's
    memory floor. A row's later steps lie at ever longer step times, where the rows that beat them are cut later
    (its first step comes up by the row's step floor), so they wait until then: on DeepSeek-V4-Flash on 32,768
    GPUs the rows cut left 1,120 of their 1,446 steps to be beaten by rows cut after them."""

    index: int
    """The row's index among the rows cut."""
    stairs: InterleavedStairs


Waiting = _Screened | _Candidates | _Tail
"""What waits in the heaps: a row screened, a row's fit candidates, or the steps a cut row has left."""

Shared = list[tuple[int, Row, list[tuple[int, int]]]]
"""Rows one search cut, for its peer: (its index there, the row, its steps as (time, memory) units)."""


class Peer(Protocol):
    """Another search of the same problem over other rows, running at the same time (solver/search/halves.py).
    The two exchange the rows they cut in lock step: each one's k-th exchange takes in what the other cut up to
    its (k − L)-th, for a fixed L, so what each search takes in, and when, depends only on the two searches' own
    sequences of rows, not on their pace: the rows each cuts, and its counts, are the same on every run."""

    cuts: int
    """Rows a search cuts between two exchanges, at most: the cuts take most of a search's time, so both
    searches reach an exchange at about the same time."""

    def exchange(self, cut: Shared) -> Shared:
        """Send the rows this search cut since the last exchange; the peer's of an exchange a fixed number
        before (none once the peer has ended)."""


class Found(NamedTuple):
    """What one RowSearch found, for another to take in (RowSearch.absorb): its cut rows with their cost tables
    (their memo dropped: it belongs to the search's own process) and staircases, the rule verdicts it asked
    (by row), the rows that fit and that were refused, the floors of the rows it left waiting, and how many
    of its rows it screened."""

    rows: list[Row]
    costs: list[RowCosts]
    staircases: list[Staircase]
    passes: dict[int, bool]
    fitting: int
    refused: int
    waiting_floors: list[tuple[int, int]]
    screened: int


def step_values(stairs: Staircase) -> list[tuple[int, int]]:
    """A staircase's steps as (time, memory) units: what dominators are kept and shared as."""
    return [(q.time_units, q.memory_units) for q in stairs.points]


def rows_pass_rules(problem: Problem, row: Row) -> bool:
    """Whether a row meets every rule the master posts and every rule judged per row, in Python (with an
    explicit cut, as every solver answer has; the CP-SAT postings agree, tests/test_agreement.py)."""
    mapping = row.mapping(problem, row.default_cut(problem))
    judged = row_problem(problem, row)
    return holds(judged, mapping, program_rules(problem) + judged_rules(problem, "row") + choice_rules(judged))


class RowSearch:
    """The rows cut so far (their options settled, cost tables and exact staircases), the rows screened and
    waiting, by floor, and the steps of the rows a peer search beside it cut (solver/search/halves.py)."""

    def __init__(self, problem: Problem, time_model: StageTimeModel, counts: np.ndarray, usable: int, top: int,
                 floors: bool) -> None:
        self.problem, self.counts, self.usable, self.top, self.floors = problem, counts, usable, top, floors
        self.savings = open_savings(problem)
        self.models: dict[str, StageTimeModel] = {NONE: time_model}
        self.row_rules, self.cut_rules = judged_rules(problem, "row"), judged_rules(problem, "cut")
        self.posted_rules = tuple(r for r in program_rules(problem) if not isinstance(r, SettingsRule))
        """The posted rules _refused asks: not the settings rules, which read only the options and the recompute
        choice, so that rule_domains' recompute questions settle them for every row listed."""
        self.refused = 0
        """Rows that came up to be cut and break a rule the master posts (_refused): never cut."""
        self.rows: list[Row] = []
        self.costs: list[RowCosts] = []
        self.staircases: list[Staircase] = []
        self.fitting = 0
        self._waiting: list[tuple[int, int, int, Waiting]] = []
        """Heap of interleaved rows (VPP > 1) as (time floor, memory floor, order queued, row): flat, so the heap
        compares whole numbers."""
        self._plain: list[tuple[int, int, int, Waiting]] = []
        """The same heap of the rows without interleaving (VPP 1), whose cuts are quick (_next)."""
        self._cut_short = False
        """Whether an interleaved row's fit or cut search was left open (budget or its share of the time; _next)."""
        self._stepped = 0
        """Rows cut here with at least one step (_next)."""
        self._queued = 0
        self._passes: dict[int, bool] = {}
        self._steps = TopStaircase(top, self.feasible_row)
        self._totals = counts[0, counts.shape[0] - 1]
        self._per_microbatch: dict[tuple, float] = {}
        self._stretches: dict[tuple[int, ...], float] = {}
        self._exchanges: dict[tuple, float] = {}
        self._any_vpp_floors: dict[tuple, list[int]] = {}
        self._bare_floors: dict[tuple, int] = {}
        """Per memory_key, the memory floor no saving goes below at any VPP (_bare_floor)."""
        self._absorbed_waiting: list[tuple[int, int]] = []
        """Floors of rows another search left waiting (absorb)."""
        self.peer: Peer | None = None
        """The search running beside this one over other rows, if any (exchange)."""
        self.unshared: Shared = []
        """Rows cut here since the last exchange with the peer, and later steps of rows cut before (_extend)."""
        self.cut_since = 0
        """Rows cut here since the last exchange (the peer's `cuts` counts these, not later steps)."""
        self._popped = 0
        """Rows come up since the last exchange (those cut since are `unshared`)."""
        self._foreign: dict[int, Row] = {}
        """The peer's cut rows, by their index among the dominators (FOREIGN + its index there)."""

    def model_of(self, row: Row) -> StageTimeModel:
        """The step-time model of a row: its saving's, under the dispatcher and CP type it chose."""
        if row.saving not in self.models:
            self.models[row.saving] = time_model_for(self.models[NONE], with_saving(self.problem, row.saving))
        return self.models[row.saving].for_problem(row_problem(self.problem, row))

    def feasible_row(self, i: int) -> bool:
        """Whether cut row i (or the peer's, FOREIGN and up) meets every rule (judged once, when it first
        dominates)."""
        if i not in self._passes:
            self._passes[i] = rows_pass_rules(self.problem, self.rows[i] if i < FOREIGN else self._foreign[i])
        return self._passes[i]

    def exchange(self) -> None:
        """Give the peer the rows cut here since the last exchange and take in the rows it cut as dominators:
        their steps beat rows here as this search's own do, since the rows both searches cut all go to the
        master program. Every EXCHANGE_POPS rows come up or the peer's `cuts` cut, whichever is first."""
        if self.peer is None or (self._popped < EXCHANGE_POPS and self.cut_since < self.peer.cuts):
            return
        cut, self.unshared, self._popped, self.cut_since = self.unshared, [], 0, 0
        for index, row, steps in self.peer.exchange(cut):
            self._foreign[FOREIGN + index] = row
            self._steps.add(FOREIGN + index, steps)

    def _share(self, i: int, steps: Staircase | None = None) -> None:
        """Keep steps of cut row i for the next exchange with the peer, if any: its whole staircase when it is
        cut (counted in cut_since), or `steps` found later (_extend), which ride along."""
        if self.peer is not None:
            self.unshared.append((i, self.rows[i], step_values(self.staircases[i] if steps is None else steps)))
            self.cut_since += steps is None

    @property
    def _dominators(self) -> int:
        """Rows whose steps beat others here: cut here or by the peer."""
        return len(self.rows) + len(self._foreign)

    def screen(self, row: Row) -> None:
        """Let the row wait by its screening floor (_screen_floor: the same under every saving, with no memory
        floor yet); its memory tables, dearer floors and fit are judged when it comes up (_judge), by then
        against every row cut with a lower floor. Without floors, its fit candidates are found now and it
        waits at once to be cut."""
        if not self.floors:
            candidates = fit_candidates(self.problem, row, self.savings, self.counts, self.usable)
            if candidates.rows and not self._refused(row):
                self._wait((0, 0), candidates, True)
            return
        heapq.heappush(self._heap_of(row), (self._screen_floor(row), 0, self._queued, _Screened(row)))
        self._queued += 1

    def _heap_of(self, row: Row) -> list[tuple[int, int, int, Waiting]]:
        """The heap a row waits in: _plain without interleaving, _waiting with it."""
        return self._plain if row.vpp == 1 else self._waiting

    def _next(self) -> tuple[int, int, int, Waiting]:
        """The waiting row that comes up next: the least floor of both heaps, except that once an interleaved
        row's fit or cut search was left open, the rows without interleaving come first until `top` rows have
        steps. An interleaved row of a hybrid model can take seconds to cut (several block kinds, no exact
        program) and its fit may stay open, so a search the time limit stops would otherwise return nothing
        (Nemotron-3 Ultra on 6,144 H200: in 60 s, 36 fit questions of rows at PP 4-16 and VPP 6-16, 31 left
        open, and no row cut); a plain row's cut is a quick exact program. The order rows are cut in never
        changes a complete search's answer (module docstring)."""
        plain, interleaved = self._plain, self._waiting
        if plain and (not interleaved or (self._cut_short and self._stepped < self.top)
                      or plain[0] < interleaved[0]):
            return heapq.heappop(plain)
        return heapq.heappop(interleaved)

    def _compute_floor(self, row: Row) -> int:
        """The row's compute floor (reprice.compute_floor_units): its compute seconds per microbatch spread over
        the pipeline (_per_microbatch_s, _stretch)."""
        return compute_floor_units(self._per_microbatch_s(row), self._stretch(row))

    def _screen_floor(self, row: Row) -> int:
        """The compute floor with the exposed EP and CP seconds no option the row may take goes below
        (choices.ep_options) added to its seconds per microbatch (StageTimeModel.exchange_floor_s, which reads the
        grid, rank order and MBS): never above the exposed floor (reprice.exposed_floor_units, whose rank floor is
        at least the compute). Each part is kept per what it reads and the row's saving and options, so screening
        every row costs look-ups, not pricings, and a row whose exchanges are long waits past the rows that beat
        it (DeepSeek-V3 on 2,048 GPUs judges 14,295 rows instead of 28,007)."""
        key = (row.tp, row.cp, row.ep, row.etp, row.pp, row.rank_order, row.mbs, model_variant(row))
        exchange = self._exchanges.get(key)
        if exchange is None:
            exchange = self._exchanges[key] = self.model_of(row).exchange_floor_s(
                row.mapping(self.problem), self._totals, ep_options(self.problem, row))
        return compute_floor_units(self._per_microbatch_s(row) + exchange, self._stretch(row))

    def _per_microbatch_s(self, row: Row) -> float:
        """The row's compute seconds per microbatch (StageTimeModel.compute_per_microbatch_s), priced once per what
        it reads (and the options the row chooses)."""
        key = (row.tp, row.cp, row.ep, row.etp, row.mbs, row.recompute, model_variant(row))
        per_microbatch = self._per_microbatch.get(key)
        if per_microbatch is None:
            per_microbatch = self._per_microbatch[key] = self.model_of(row).compute_per_microbatch_s(
                row.mapping(self.problem), row.derived(self.problem), self._totals)
        return per_microbatch

    def _stretch(self, row: Row) -> float:
        """The row's even stretch (schedule.even_stretch), once per PP, VPP and microbatch count."""
        spread = (row.pp, row.vpp, row.tp, row.cp, row.mbs)
        stretch = self._stretches.get(spread)
        if stretch is None:
            microbatches = row.derived(self.problem).num_microbatches
            stretch = self._stretches[spread] = even_stretch(row.pp, row.vpp, float(microbatches))
        return stretch

    def _beaten_at_any_vpp(self, row: Row, time_floor: int) -> bool:
        """Whether `top` rows cut so far beat the row's screening floor with the least memory floor its group has at
        every VPP and rank order under the row as it is and each saving it may take (savings.memory_floor_any_vpp):
        each of those floors priced once per group (costs.memory_key), and only while the least of the ones before
        is beaten (once the row as it is is beaten, the bare floor below every saving's is asked before the
        savings', _bare_floor), so most rows of a beaten group are dropped before their own tables and savings
        are built (_judge)."""
        if self._dominators < self.top:
            return False
        key = memory_key(row)
        floors = self._any_vpp_floors.setdefault(key, [])
        variants = (NONE, *self.savings)
        while not floors or self._beaten((time_floor, min(floors))):
            if len(floors) == len(variants):
                return True
            if len(floors) == 1 and self._beaten((time_floor, self._bare_floor(key, row))):
                return True
            floors.append(memory_floor_any_vpp(self.problem, row, variants[len(floors)], self.counts))
        return False

    def _bare_floor(self, key: tuple, row: Row) -> int:
        """The memory floor no saving of the row's group goes below at any VPP (savings.bare_memory_floor_any_vpp),
        once per group (`key`: its memory_key): asked when the row as it is is beaten, it drops the group at once
        when it is beaten too, before each saving's floor is priced (on the 5T MoE two thirds of those groups)."""
        floor = self._bare_floors.get(key)
        if floor is None:
            floor = self._bare_floors[key] = bare_memory_floor_any_vpp(self.problem, row, self.counts)
        return floor

    def _judge(self, screened: _Screened, time_floor: int) -> None:
        """Drop the row when `top` rows cut so far beat its floors or when no variant of it may fit
        (savings.fit_candidates); otherwise let it wait, by its least floor over the variants that may fit,
        to be cut. Cheaper floors that never exceed the next are judged first: with the screening floor, the
        memory of the row's own tables (whole where it fits as it is, savings.quick_fit, since it then tries no
        saving: on DeepSeek-V3 7,048 rows are dropped there instead of after their variants; else less their
        weights, gradients and optimizer state where savings are open: those only shrink them), then, once the
        variants are built, their least memory floor, each memory floor first without its whole-block bound
        (reprice.memory_means_units), then the compute and exposed-exchange floor (reprice.exposed_floor_units),
        by which the row waits: its step floor is priced only when it is about to be cut (cut_waiting)."""
        row = screened.row
        plain = row_costs(self.problem, row, None)
        judged = self._dominators >= self.top
        fits = not self.savings or quick_fit(plain, self.counts, self.usable)
        least = plain if fits else without_static(plain)
        if judged and (self._beaten((time_floor, memory_means_units(least, self.counts)))
                       or self._beaten((time_floor, memory_floor_units(least, self.counts)))):
            return
        candidates = fit_candidates(self.problem, row, self.savings, self.counts, self.usable, plain)
        if not candidates.rows:
            return
        if judged and self._beaten((time_floor, min(memory_means_units(c, self.counts) for c in candidates.costs))):
            return
        memory = min(memory_floor_units(c, self.counts) for c in candidates.costs)
        if judged and self._beaten((time_floor, memory)):
            return
        floor = (min(exposed_floor_units(c, v.mapping(self.problem), self.counts, self.model_of(v),
                                         ep_options(self.problem, v))
                     for v, c in zip(candidates.rows, candidates.costs, strict=True)), memory)
        if judged and self._beaten(floor):
            return
        self._wait(floor, candidates, False)

    def _wait(self, floor: tuple[int, int], candidates: FitCandidates, exact: bool) -> None:
        """Let fit candidates wait by `floor` to be cut (`exact`: floor is their step floor, or no floors)."""
        if candidates.settled:
            self.fitting += 1
        heapq.heappush(self._heap_of(candidates.rows[0]), (*floor, self._queued, _Candidates(candidates, exact)))
        self._queued += 1

    def unseen_floors(self, rows: tuple[Row, ...], deadline: float) -> list[tuple[int, int]] | None:
        """Floors of rows never screened: each one's compute floor (_compute_floor, the same under every saving:
        the savings move weights, gradients and optimizer state, not the compute) with no memory floor, the
        least per compute key (the floor scales with the pipeline's stretch alone within one). None past
        `deadline` (time.perf_counter()): then nothing bounds those rows."""
        least: dict[tuple, tuple[float, Row]] = {}
        gpus, batch = self.problem.gpus, self.problem.training.global_batch
        for row in rows:
            stretch = even_stretch(row.pp, row.vpp, batch * row.tp * row.pp * row.cp / (row.mbs * gpus))
            key = (row.tp, row.cp, row.ep, row.etp, row.mbs, row.recompute)
            if key not in least or stretch < least[key][0]:
                least[key] = (stretch, row)
        floors = []
        for _, row in least.values():
            if time.perf_counter() > deadline:
                return None
            floors.append((self._compute_floor(row), 0))
        return floors

    def _floor(self, row: Row, memory: RowCosts | None = None) -> tuple[int, int]:
        """The row's floor under its saving (reprice.floor_point, each rank holding what fits usable HBM;
        `memory`: its memory tables when known): it holds for every option it may choose."""
        memory = memory or row_costs(row_problem(self.problem, row), row, None)
        return floor_point(memory, row.mapping(self.problem), self.counts, self.model_of(row), self.usable,
                           ep_options(self.problem, row))

    def _beaten(self, floor: tuple[int, int]) -> bool:
        """Whether steps of `top` rule-feasible rows cut so far dominate `floor` (prune.beaten)."""
        return self._steps.beaten(floor)

    @property
    def waiting(self) -> int:
        """Rows screened and not yet cut or skipped (here or by a search absorbed)."""
        return len(self._waiting) + len(self._plain) + len(self._absorbed_waiting)

    def waiting_floors(self) -> list[tuple[int, int]]:
        """The floors of the rows screened and not yet cut or skipped (their least over the candidates)."""
        return [(time_floor, memory_floor) for time_floor, memory_floor, *_ in self._waiting + self._plain
                ] + self._absorbed_waiting

    def found(self, screened: int) -> Found:
        """What this search found, `screened` of its rows screened (absorb's argument)."""
        return Found(self.rows, [replaced(c, memo=None) for c in self.costs], self.staircases,
                     {i: passes for i, passes in self._passes.items() if i < FOREIGN}, self.fitting, self.refused,
                     self.waiting_floors(), screened)

    def absorb(self, other: Found) -> None:
        """Take in what another search of the problem found over other rows (Found), once both are over: its cut
        rows after these, its counts, and its waiting rows' floors (in_row_order then rebuilds the dominators)."""
        offset = len(self.rows)
        self.rows.extend(other.rows)
        self.costs.extend(other.costs)
        self.staircases.extend(other.staircases)
        self._passes.update((offset + i, passes) for i, passes in other.passes.items())
        self.fitting += other.fitting
        self.refused += other.refused
        self._absorbed_waiting.extend(other.waiting_floors)

    def in_row_order(self) -> None:
        """Put the cut rows in Row order, with their tables, staircases and rule verdicts: the master breaks ties
        between rows by their index (pareto.py), so the answer is the same whichever order, and in however many
        searches, the rows were cut. Only once the search is over: its dominators are rebuilt from the
        staircases as they now stand."""
        order = sorted(range(len(self.rows)), key=self.rows.__getitem__)
        self.rows = [self.rows[i] for i in order]
        self.costs = [self.costs[i] for i in order]
        self.staircases = [self.staircases[i] for i in order]
        self._passes = {new: self._passes[old] for new, old in enumerate(order) if old in self._passes}
        self._steps = TopStaircase(self.top, self.feasible_row)
        self._foreign.clear()
        for i, stairs in enumerate(self.staircases):
            self._steps.add(i, step_values(stairs))

    def floor_of(self, i: int) -> tuple[int, int]:
        """The floor of cut row i under the options it chose: no cut of it goes below."""
        return self._floor(self.rows[i])

    def cut_waiting(self, deadline: float) -> None:
        """Cut the waiting rows, least floor first, until `deadline` (time.perf_counter()). A screened row is
        dropped when its group's floor is beaten (_beaten_at_any_vpp), else judged (_judge) and waits again by
        the floor that judges it; a row's step floor (reprice.step_floor_units) is priced only when it comes up
        again, unless already beaten, and it waits again when that floor is higher. A row whose fit needs the cut
        search (savings.resolve_fit, dearer than the floor: 18 ms against 3 on DeepSeek-V4-Pro's interleaved rows)
        runs it after its floor, so a row its floor sends back and a later cut beats never runs it (there, 60 of
        the 69 rows that fitted); with several variants, the one that fits is priced once it is known."""
        while (self._waiting or self._plain) and time.perf_counter() <= deadline:
            self.exchange()
            self._popped += 1
            time_floor, memory_floor, _, waiting = self._next()
            floor = (time_floor, memory_floor)
            if self.floors and self._beaten(floor):
                continue
            if isinstance(waiting, _Screened):
                if not (self.floors and self._beaten_at_any_vpp(waiting.row, time_floor)):
                    self._judge(waiting, time_floor)
                continue
            if isinstance(waiting, _Tail):
                self._tail(waiting.index, waiting.stairs, _row_deadline(deadline), time_floor)
                continue
            candidates, exact = waiting
            if not exact and self._refused(candidates.rows[0]):
                continue
            if len(candidates.rows) == 1 and not exact:
                own = self._floor(candidates.rows[0], candidates.costs[0])
                if own > floor:
                    self._wait_again(own, candidates)
                    continue
                exact = True
            row_deadline = _row_deadline(deadline)
            if not candidates.settled:
                fitted, proved = resolve_fit(candidates, self.counts, self.usable, row_deadline)
                if fitted is None:
                    continue
                self._cut_short |= fitted.vpp > 1 and not proved
                self.fitting += 1
                tables = candidates.costs[candidates.rows.index(fitted)]
                resolved = FitCandidates((fitted,), True, (tables,))
                own = floor if exact else self._floor(fitted, tables)
                if own > floor:
                    self._wait_again(own, resolved)
                    continue
                candidates = resolved
            self._cut(candidates.rows[0], row_deadline)

    def _refused(self, row: Row) -> bool:
        """Whether the row breaks a rule the master posts (program.program_rules, on the problem's own options,
        as compile_program posts them; Python's verdicts agree, tests/test_agreement.py): the master could
        never choose it, so it is dropped before its step floor, fit search and cut, the dearest work a row
        takes. Rules that read only degrees drop their rows when they are listed (domains.meeting_degree_rules;
        before that, 315 of the 550 rows DeepSeek-V4-Flash on 32,768 GPUs cut broke them); this catches the
        rules that read more (less the settings rules: posted_rules). Asked once per row, when it first comes up
        to be cut: most rows are beaten before, and the rules cost a fraction of a cut."""
        mapping = row.mapping(self.problem, row.default_cut(self.problem))
        refused = bool(self.posted_rules) and not holds(self.problem, mapping, self.posted_rules)
        self.refused += refused
        return refused

    def _wait_again(self, floor: tuple[int, int], candidates: FitCandidates) -> None:
        """Let settled candidates wait again, by their step floor."""
        heapq.heappush(self._heap_of(candidates.rows[0]), (*floor, self._queued, _Candidates(candidates, True)))
        self._queued += 1

    def _cut(self, row: Row, deadline: float) -> None:
        """Settle the row's options, then cut each variant kept (choices.settled: one, unless none is no slower
        than every other): its staircase re-priced as printed and judged by the row rules (the cut search stops
        at `deadline`, unproved). With floors, an interleaved row's first step alone is found now, and the steps it
        has left wait (_tail)."""
        for chosen, c in settled(row_problem(self.problem, row), row, self.model_of(row)):
            i = len(self.rows)
            self.rows.append(chosen)
            self.costs.append(c)
            stairs = InterleavedStairs(c, self.counts, self.usable) if self.floors and chosen.vpp > 1 else None
            admitted = row_admitted(row_problem(self.problem, chosen), chosen, self.row_rules)
            if stairs is not None and stairs.stepwise and admitted:
                stairs.step(deadline)
                self.staircases.append(self._priced(chosen, c, stairs.staircase))
            else:
                whole = row_staircase(c, self.counts, self.usable, deadline) if stairs is None else stairs.rest(deadline)
                self.staircases.append(self._judged(chosen, c, whole, admitted))
                stairs = None
            self._steps.add(i, step_values(self.staircases[i]))
            self._share(i)
            self._stepped += bool(self.staircases[i].points)
            self._cut_short |= chosen.vpp > 1 and not self.staircases[i].proved
            if stairs is not None:
                self._tail(i, stairs, deadline)

    def _judged(self, chosen: Row, c: RowCosts, whole: Staircase, admitted: bool) -> Staircase:
        """A settled row's whole staircase judged by the rules (`admitted`: whether the row meets its row rules,
        program.row_admitted; else no step is kept) and re-priced as printed (_priced)."""
        return self._priced(chosen, c, whole) if admitted else Staircase((), whole.proved)

    def _priced(self, chosen: Row, c: RowCosts, stairs: Staircase) -> Staircase:
        """Steps of a settled row that meets the row rules (program.row_admitted) judged by the cut rules and
        re-priced as printed."""
        stairs = cut_admitted(row_problem(self.problem, chosen), chosen, stairs, self.cut_rules)
        return exact_staircase(c, chosen.mapping(self.problem), stairs, self.counts, self.model_of(chosen))

    def _tail(self, i: int, stairs: InterleavedStairs, deadline: float, due: int | None = None) -> None:
        """Go on with the steps cut row i's staircase has left. Every one is a cut within the staircase's next cap,
        so its step time is at least their floor (_tail_floor); where `top` rows cut already beat that floor at
        some memory (TopStaircase.least_beaten_memory), the steps whose exact memory lies there can never enter the
        answer (prune.py's argument), and the cap falls to the most any other can take in the tables (their exact
        memory plus costs.rounding_slack_mb), or the staircase ends (proved as far as it got) when the row's memory
        floor lies there too. Else the steps wait by their floor (_Tail), and when they come up (`due`: their
        floor then) and it has not risen, the next step is found. Where no floor is known by `deadline` (the relaxation
        cut off where the round program does not answer: InterleavedStairs.next_slowest_us), the steps are found now."""
        slack = None
        while not stairs.done:
            slowest = stairs.next_slowest_us(deadline)
            if stairs.done:
                return
            floor = None if slowest is None else self._tail_floor(i, slowest)
            if floor is None:
                self._extend(i, stairs, deadline, every=True)
                return
            beaten_from = self._steps.least_beaten_memory(floor[0])
            if beaten_from is not None:
                if beaten_from <= floor[1]:
                    return
                slack = rounding_slack_mb(self.costs[i], self._totals, self.usable) if slack is None else slack
                if slack is not None and (beaten_from - 1) * MEMORY_UNIT_MB + slack < stairs.cap:
                    stairs.lower_cap((beaten_from - 1) * MEMORY_UNIT_MB + slack)
                    continue
            if due is not None and floor[0] <= due:
                self._extend(i, stairs, deadline)
                due = None
                continue
            heapq.heappush(self._waiting, (*floor, self._queued, _Tail(i, stairs)))
            self._queued += 1
            return

    def _tail_floor(self, i: int, slowest_us: int) -> tuple[int, int] | None:
        """The floor of the steps cut row i has left, whose cuts' slowest rank takes at least `slowest_us` by its
        linear tables: (reprice.tail_floor_units, the row's memory floor); None where the step-time model gives
        no such floor."""
        row, c = self.rows[i], self.costs[i]
        time_floor = tail_floor_units(c, row.mapping(self.problem), self.counts, self.model_of(row), slowest_us,
                                      ep_options(self.problem, row))
        return None if time_floor is None else (time_floor, memory_floor_units(c, self.counts))

    def _extend(self, i: int, stairs: InterleavedStairs, deadline: float, every: bool = False) -> None:
        """Find the next step of cut row i's staircase (`every`: each step it has left; the search stops at
        `deadline`, unproved) and add them, judged and re-priced, to the row's steps (those no other of its steps
        dominates), its dominators and the peer's."""
        found = [stairs.step(deadline)]
        while every and not stairs.done:
            found.append(stairs.step(deadline))
        before = self.staircases[i]
        new = self._priced(self.rows[i], self.costs[i], Staircase(tuple(q for q in found if q is not None)))
        self.staircases[i] = Staircase(non_dominated([*before.points, *new.points]), stairs.proved)
        self._cut_short |= not stairs.proved
        if new.points:
            self._steps.add(i, step_values(new))
            self._share(i, new)

    def recut_unproved(self, deadline: float) -> None:
        """Search again, with all the time left to `deadline`, the cuts of rows whose cut search stopped at its
        share of the limit: the rows cut later may have left the time, so a complete
        search is proved at a load that would otherwise leave it `feasible`. The steps found before stay
        as dominators (each is a cut of the row)."""
        for i, stairs in enumerate(self.staircases):
            if stairs.proved or time.perf_counter() > deadline:
                continue
            row, c = self.rows[i], self.costs[i]
            again = self._judged(row, c, row_staircase(c, self.counts, self.usable, deadline),
                                 row_admitted(row_problem(self.problem, row), row, self.row_rules))
            self.staircases[i] = again
            self._steps.add(i, step_values(again))
            self._share(i)


def _row_deadline(deadline: float) -> float:
    """When one row's fit or cut search stops: its ROW_SHARE of the time left to `deadline`."""
    now = time.perf_counter()
    return min(deadline, now + ROW_SHARE * (deadline - now))


def search_rows(search: RowSearch, ordered: tuple[Row, ...], deadline: float,
                on_screened: Callable[[int], None] | None = None) -> int:
    """Screen `ordered` (each row waits by its screening floor) for at most half the time left, then cut the
    waiting rows, least floor first, until `deadline`; rows a round leaves unscreened are screened in the
    next. With every row screened and cut, the time left goes to the cut searches a row's share stopped.
    Returns how many rows were screened."""
    position = 0
    while (position < len(ordered) or search.waiting) and time.perf_counter() <= deadline:
        now = time.perf_counter()
        screen_until = now + (deadline - now) / 2
        first = position
        while position < len(ordered) and (position == first or time.perf_counter() <= screen_until):
            search.screen(ordered[position])
            position += 1
            if on_screened is not None:
                on_screened(position)
        search.cut_waiting(deadline)
    if position == len(ordered) and not search.waiting:
        search.recut_unproved(deadline)
    return position
