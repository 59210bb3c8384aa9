"""Exact stage cuts of interleaved rows (VPP > 1): a relaxation over per-rank kind totals, a layout search
that realises its optimum, and a branch and bound over the cut itself where that fails.

Pipeline rank r runs virtual stages r, r + PP, …, so a rank sums VPP non-contiguous pieces of the block
sequence and no contiguous DP applies. Step time depends on the cut only through the slowest rank
(Σ of rank times is the same for every cut, constraints/physics/schedule.py), and a rank's time and
memory depend only on how many blocks of each kind it holds. RankTotals's DP over the ranks' running
kind totals gives a lower bound on every question (least slowest time under a memory cap, least peak
memory under a time bound); when `realise` finds a layout whose ranks hold exactly the relaxed cut's
totals, that cut is the answer, proved. With one kind of block that always happens. Every search here covers
the same family of cuts (empty_stages.py: the first and last rank's virtual stages may hold no block, every
other stage at least one; InterleavedCuts.least). With several kinds (where
the exact front and round programs of fronts.py and rounds.py decline), the ordered search lists the
relaxed cuts up to rising levels of value and lays each out exactly, least value first: the first laid out
is the answer, proved (`InterleavedCuts.ordered_cut`). Where it lists too many or a layout search runs
long, a depth-first search places the virtual stages in order and drops a
partial cut as soon as a rank is over the time or memory bound, or the ranks still to be served
cannot take the remaining blocks' time or memory (both sums are admissible: a block adds at least its
static memory and the floor of its activation share to any rank). Partial cuts proved impossible
are remembered per bound, so tightening a bound reuses them. Every bound the search answers "no"
to is a proof, so the cuts it returns are the best under each memory cap of the whole family.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from parasol.problems.derived import default_layout
from parasol.problems.empty_stages import edge_rank, open_stages, stage_least
from parasol.solver.search.costs import MEMORY_UNIT_MB, MICROSECONDS, TIME_UNIT_S, RowCosts
from parasol.solver.search.cut_program import UNBOUNDED, Undecided, cut_within
from parasol.solver.search.fronts import Declined, FrontProgram
from parasol.solver.search.layered import LayersSpent, layered_layout
from parasol.solver.search.rounds import RoundProgram

FIRST_BUDGET = 300
"""Partial cuts the first, unbounded search may visit before the relaxation is asked whether any cut
fits at all (it answers "none" far faster when memory is tight)."""
NODE_BUDGET = 2_000
"""Partial cuts one bounded search may visit before the question goes to the CP-SAT cut program."""
RELAXATION_FIRST = 30_000
"""Round-program states (RoundProgram.states) past which the relaxation is asked first, until it first fails to
settle one of the row's questions (InterleavedCuts.relaxation_asked_first): long programs (PP 2 below
DeepSeek-V4's lead-in at VPP 8-16) where its optimum mostly has a layout."""
REALISE_BUDGET = 2_000
"""Partial layouts the search for a layout with given per-rank kind counts may visit before giving up
(then the branch and bound answers instead)."""


ORDERED_CUTS = 5_000
"""Relaxed cuts one level of the ordered search (InterleavedCuts.ordered_cut) may realise; past it the searches
below answer."""
ORDERED_REALISE_BUDGET = 300
"""Partial layouts one exact realisation of the ordered search visits depth first (most find their layout or
prove there is none within it) before the layered search (layered.py) decides it: on Nemotron-H 8B's
PP 4 VPP 8 rows the questions past it take the depth-first search up to 1.3 s, the layered one 0.1 s. The
questions a 30 s search asks, replayed with budgets of 1,000 / 300 / 100 partial layouts: Nemotron-H 8B on 256
H100 (2,232) 9.7 / 9.1 / 10.0 s, Nemotron-3 Nano on 256 (2,608) 14.4 / 11.4 / 11.2 s, Nemotron-3 Super on 1,024
(106) 2.4 / 1.7 s at 1,000 / 300, the same answers."""
ORDERED_FIRST_STEP = 400
"""The ordered search's second level lies 1/400 of the relaxed optimum above it (the first is that optimum)."""
ORDERED_CELLS = 30_000_000
"""Running totals × rank vectors past which the ordered search does not count a level's relaxed cuts (about
0.3 s of counting)."""
ORDERED_HALVINGS = 8
"""Times the ordered search may halve its step past a level that holds too many relaxed cuts."""


class OutOfBudget(Exception):
    """The search spent its budget of partial cuts (or reached its deadline) without finding a cut or
    proving there is none."""


CHUNK_CELLS = 1 << 21
"""Cells (rank vectors × running-total states) one step of the relaxation's dynamic program reads at once."""
DEADLINE_EVERY = 64
"""Partial cuts between two looks at the clock."""


@dataclass(frozen=True)
class _Blocks:
    """Per-block prefix sums of one row's cost tables: time, static and activation MB, kind bit."""

    time: tuple[int, ...]
    static: tuple[int, ...]
    act: tuple[int, ...]
    bit: tuple[int, ...]
    lean: tuple[int, ...]
    """Suffix sums of the least memory a block adds to any rank (static + ⌊f_min·activation⌋)."""


def _by_unevenness(pos: int, low: int, top: int, blocks: int, rounds: int) -> Iterator[tuple[int, ...]]:
    """The ends low…top of a piece from `pos`, grouped by unevenness |(end − pos)·rounds − blocks|, least
    first, each group in increasing order (what sorting by (unevenness, end) and grouping gives): walking
    down from the largest end at or below the even share and up from the one above it."""
    even = pos + blocks // rounds
    down, up = min(even, top), max(even + 1, low)
    while down >= low or up <= top:
        below = blocks - (down - pos) * rounds if down >= low else None
        above = (up - pos) * rounds - blocks if up <= top else None
        if above is None or (below is not None and below < above):
            yield (down,)
            down -= 1
        elif below is None or above < below:
            yield (up,)
            up += 1
        else:
            yield (down, up)
            down, up = down - 1, up + 1


def _first_length(need: int, rounds: int, most: int, allowed: set[int], least: int = 1) -> int | None:
    """_realise_moves' first piece with one kind group, as a length: lengths from `least` up to `most` by
    unevenness |length · rounds − need| (_by_unevenness), the shorter of two alike first, the first that
    leaves a need in `allowed`; None when none does."""
    low = max(need if rounds == 1 else least, least)
    down, up = min(need // rounds, most), max(need // rounds + 1, low)
    while down >= low or up <= most:
        below = need - down * rounds if down >= low else None
        above = up * rounds - need if up <= most else None
        if above is None or (below is not None and below < above):
            alike, down = (down,), down - 1
        elif below is None or above < below:
            alike, up = (up,), up + 1
        else:
            alike, down, up = (down, up), down - 1, up + 1
        for length in alike:
            if need - length >= 0 and need - length in allowed:
                return length
    return None


@functools.lru_cache(maxsize=16)
def _block_kinds(raw: bytes, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The kind of each block of the sequence whose interval counts are `raw` (int64, `shape`): the same
    for every row of a problem, so read once."""
    counts = np.frombuffer(raw, dtype=np.int64).reshape(shape)
    blocks = shape[0] - 1
    return tuple(int(k) for k in np.argmax(counts[np.arange(blocks), np.arange(1, blocks + 1)], axis=1))


def _blocks(c: RowCosts, counts: np.ndarray) -> _Blocks:
    """Prefix tables of the block sequence under the row's per-kind costs."""
    blocks = counts.shape[0] - 1
    kinds = _block_kinds(np.ascontiguousarray(counts, dtype=np.int64).tobytes(), counts.shape)
    fmin = min(c.inflight)
    time, static, act, lean = [0], [0], [0], [0] * (blocks + 1)
    for k in kinds:
        time.append(time[-1] + c.kind_time_us[k])
        static.append(static[-1] + c.kind_static[k])
        act.append(act[-1] + c.kind_activation[k])
    least = [s + math.floor(fmin * a) for s, a in zip(c.kind_static, c.kind_activation, strict=True)]
    for i in range(blocks - 1, -1, -1):
        lean[i] = lean[i + 1] + least[kinds[i]]
    return _Blocks(tuple(time), tuple(static), tuple(act), tuple(1 << k for k in kinds), tuple(lean))


class InterleavedCuts:
    """The branch and bound of one interleaved row: which cuts keep every rank within a time and a
    memory bound, and the fastest and leanest such cuts."""

    def __init__(self, c: RowCosts, counts: np.ndarray, deadline: float = math.inf,
                 proof_work: float | None = None) -> None:
        self.c = c
        self.deadline = deadline
        """perf_counter time past which every open question is left unproved (OutOfBudget): a time limit
        that bounds the search's wall time; never reached, it changes nothing."""
        self.proof_work = proof_work
        """CP-SAT's deterministic work per cut question (cut_program.cut_within; None: CUT_PROOF_WORK): a
        question left open past it leaves the answer unproved, the same on every run."""
        self.pp, self.vpp = c.row.pp, c.row.vpp
        self.stages = self.pp * self.vpp
        self.n = counts.shape[0] - 1
        self.open = open_stages(self.vpp)
        """Whether the first and last rank's virtual stages may hold no block (empty_stages.py)."""
        self.least = stage_least(self.pp, self.vpp)
        """The fewest blocks each virtual stage holds."""
        self.least_before = (0, *itertools.accumulate(self.least))
        """least_before[k]: the fewest blocks stages 0…k−1 hold together."""
        self.b = _blocks(c, counts)
        kinds = len(c.kind_static)
        self.peak_of = [max([0] + [c.kind_peak[k] for k in range(kinds) if mask >> k & 1]) for mask in range(1 << kinds)]
        self.moe_bits = sum(1 << k for k in range(kinds) if c.kind_moe[k])
        self.failed: dict[tuple, list[tuple[int, int]]] = {}
        self.total_us = sum(c.edge_time_us) + self.b.time[-1]
        self.unit = round(TIME_UNIT_S * MICROSECONDS)
        self.relaxed = RankTotals(self, counts)
        self.relaxation_settles = True
        """Whether the relaxation has settled every question `settle` asked it before the round program (False
        from its first failure: at DeepSeek-V4-Flash's PP 4, VPP 12 its optimum mostly has no layout, 260 of 323
        questions, while at PP 2 below V4's lead-in it settles every one)."""
        merged = self.relaxed.counts
        self.prefix = [tuple(int(x) for x in merged[0, :, q]) for q in range(merged.shape[2])]
        """Blocks of each of the relaxation's kinds (RankTotals.groups) among the first i, i = 0..n."""
        self._fastest_times: dict[int, int | None] = {}
        """fastest_time's answers by cap."""
        self._relaxed_floors: dict[int, int | None] = {}
        """slowest_floor's relaxation answers by cap."""

    def memory(self, r: int, static: int, act: int, mask: int) -> int:
        """MB of rank r holding blocks with these static and activation sums and kinds (RowCosts.stage_memory)."""
        c = self.c
        frac: Fraction = c.inflight[r]
        held = c.edge_activation[r] + act
        peak = max(c.edge_peak[r], self.peak_of[mask])
        moe = c.edge_moe[r] or bool(mask & self.moe_bits)
        return (c.edge_static[r] + static + -(-frac.numerator * held // frac.denominator) + peak
                + (c.dispatch_mb if moe else 0) + c.workspace_mb)

    def time_units(self, slowest_us: int) -> int:
        """The row's step time in solver units when its slowest rank takes `slowest_us` (RowCosts.objectives)."""
        v, c = self.vpp, self.c
        scaled = v * c.constant_time_us + self.total_us + (v * c.microbatches - 1) * slowest_us
        return -(-scaled // (v * self.unit))

    def slowest_within(self, time_units: int) -> int:
        """The largest slowest-rank time (µs) whose step time is at most `time_units`."""
        v, c = self.vpp, self.c
        return (time_units * v * self.unit - v * c.constant_time_us - self.total_us) // (v * c.microbatches - 1)

    def measure(self, layout: tuple[int, ...]) -> tuple[int, int]:
        """(slowest rank time µs, peak rank MB) of a layout."""
        ranks = [[0, 0, 0, 0] for _ in range(self.pp)]
        start = 0
        for k, size in enumerate(layout):
            st = ranks[k % self.pp]
            self._add(st, start, start + size)
            start += size
        times = [self.c.edge_time_us[r] + st[0] for r, st in enumerate(ranks)]
        return max(times), max(self.memory(r, st[1], st[2], st[3]) for r, st in enumerate(ranks))

    def fits_pair(self, r: int, s0: int, e0: int, s1: int, e1: int, slowest_us: int, cap_mb: int) -> bool:
        """Whether rank r holding blocks s0…e0−1 and s1…e1−1 stays within both bounds."""
        st = [0, 0, 0, 0]
        self._add(st, s0, e0)
        self._add(st, s1, e1)
        return self.c.edge_time_us[r] + st[0] <= slowest_us and self.memory(r, st[1], st[2], st[3]) <= cap_mb

    def fits_any(self, r: int, time: np.ndarray, static: np.ndarray, act: np.ndarray, mask: np.ndarray,
                 slowest_us: int, cap_mb: int) -> bool:
        """Whether rank r could hold alone any of these pieces (arrays of their sums and kind masks)."""
        c, frac = self.c, self.c.inflight[r]
        held = c.edge_activation[r] + act
        moe = ((mask & self.moe_bits) != 0) | c.edge_moe[r]
        memory = (c.edge_static[r] + static + -(-(held * frac.numerator) // frac.denominator)
                  + np.maximum(np.array(self.peak_of, dtype=np.int64)[mask], c.edge_peak[r])
                  + np.where(moe, c.dispatch_mb, 0) + c.workspace_mb)
        return bool(((c.edge_time_us[r] + time <= slowest_us) & (memory <= cap_mb)).any())

    def units(self, layout: tuple[int, ...]) -> tuple[int, int]:
        """(step time, peak memory) of a layout in the solver's units (RowCosts.objectives)."""
        slowest, peak = self.measure(layout)
        return self.time_units(slowest), -(-peak // MEMORY_UNIT_MB)

    def _add(self, st: list[int], i: int, j: int) -> None:
        b = self.b
        st[0] += b.time[j] - b.time[i]
        st[1] += b.static[j] - b.static[i]
        st[2] += b.act[j] - b.act[i]
        for x in b.bit[i:j]:
            st[3] |= x

    def realise(self, targets: list[np.ndarray], sums: list[set[int]]) -> tuple[int, ...] | None:
        """A layout whose ranks hold exactly `targets` (blocks of each kind per rank), every virtual stage
        holding at least its least (InterleavedCuts.least); None when the search finds none within REALISE_BUDGET
        partial layouts. Stages are placed
        in order, a rank's pieces nearest its even share of what it still needs, and only pieces that leave
        it a need some j intervals can hold (`sums[j]`: codes, RankTotals.decomposable) for its j stages left.
        Answered once per targets for every row alike (_layout_for)."""
        return self._layout_for(targets, sums, False)

    def realise_exactly(self, targets: np.ndarray, sums: list[set[int]]) -> tuple[int, ...] | None:
        """realise's search as a proof: a layout whose ranks hold exactly `targets`, or None when none has;
        raises OutOfBudget when the layered search passes its budgets (or the deadline) without either, never
        answering None for a search it stopped."""
        return self._layout_for(targets, sums, True)

    def _layout_for(self, targets: list[np.ndarray] | np.ndarray, sums: list[set[int]],
                    exact: bool) -> tuple[int, ...] | None:
        """realise's (or, `exact`, realise_exactly's) answer, searched once per targets among every row whose
        block sequence, kind grouping, PP and VPP are these (_layouts; a budget spent is kept too, a deadline
        reached is not). The answer depends on nothing else: `sums` only prunes pieces whose remainder no rank
        could hold, and every remainder of a path is within the targets, which the asking row's rank holds
        within its bounds (costs grow with every block), so each row's sums keep the same paths."""
        store = _layouts(self.relaxed.key, self.pp, self.vpp, exact)
        left = [tuple(int(x) for x in t) for t in targets]
        key = tuple(left)
        if key not in store:
            try:
                store[key] = self._exact_layout(left, sums) if exact else self._realise(left, sums)
            except OutOfBudget:
                if not self.late():
                    store[key] = SPENT
                raise
        found = store[key]
        if found is SPENT:
            raise OutOfBudget
        return found

    def _exact_layout(self, left: list[tuple[int, ...]], sums: list[set[int]]) -> tuple[int, ...] | None:
        """realise_exactly's search: depth first within ORDERED_REALISE_BUDGET partial layouts (its layout is the
        evenest-first one realise would print), then the layered search over every partial layout at once."""
        try:
            return self._realise(list(left), sums, ORDERED_REALISE_BUDGET, True)
        except OutOfBudget:
            if self.late():
                raise
        try:
            return layered_layout(np.array(self._prefix_codes[0], dtype=np.int64),
                                  [self._suffix_arrays[self._edge(r)] for r in range(self.pp)],
                                  self.relaxed.place.astype(np.int64), self.least,
                                  np.array(left, dtype=np.int64), self.late)
        except LayersSpent as e:
            raise OutOfBudget from e

    @functools.cached_property
    def _suffix_arrays(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """_suffix and _edge_suffix as arrays (start block × bytes), one per number of intervals, for the layered
        search."""
        return tuple([np.frombuffer(b"".join(row), dtype=np.uint8).reshape(self.n + 2, -1) for row in table]
                     for table in (self._suffix, self._edge_suffix))

    def _realise(self, left: list[tuple[int, ...]], sums: list[set[int]], budget: int | None = None,
                 exact: bool = False) -> tuple[int, ...] | None:
        """realise's search, from the ranks' needs `left` (changed as it goes), within `budget` partial layouts
        (None: REALISE_BUDGET; past it: None, or OutOfBudget when `exact`, which also drops a partial layout as
        soon as a rank's remaining counts are not a sum of its remaining stages' intervals, _suffix_holds); with
        one kind group, not `exact`, its first path first (_counts_path), the search's answer whenever that
        path reaches the last block."""
        budget = REALISE_BUDGET if budget is None else budget
        if len(self.relaxed.groups) == 1 and not exact:
            first = self._counts_path([t[0] for t in left], sums)
            if first is not None:
                return first
        place = [int(x) for x in self.relaxed.place]
        at, coded = self._prefix_codes
        codes = [sum(x * w for x, w in zip(t, place, strict=True)) for t in left]
        layout: list[int] = []
        failed: set[tuple] = set()
        nodes = [0]
        edge = self._edge_sums(sums)

        def go(k: int, pos: int) -> bool:
            if k == self.stages:
                return pos == self.n
            nodes[0] += 1
            if nodes[0] > budget or (exact and nodes[0] % DEADLINE_EVERY == 0 and self.late()):
                if exact:
                    raise OutOfBudget
                return False
            if failed and (k, pos, tuple(left)) in failed:
                return False
            if exact and not self._suffix_holds(k, pos, codes):
                return False
            r, rounds = k % self.pp, self.vpp - k // self.pp
            need, code = left[r], codes[r]
            top = min(pos + sum(need) - self._rank_later(r, rounds), self.n - self._later(k))
            later = self._rank_suffix(r)[rounds - 1] if exact else None
            allowed = (edge if self._edge(r) else sums)[rounds - 1]
            for end, rest in self._realise_moves(pos, top, need, code, rounds, at, coded, allowed, self.least[k],
                                                 self._empty_at(k, sum(need), rounds)):
                remaining = code - coded[end] + coded[pos]
                if later is not None and not later[min(end + self._between(k), self.n + 1)][remaining >> 3] >> (remaining & 7) & 1:
                    continue
                left[r], codes[r] = rest, remaining
                layout.append(end - pos)
                if go(k + 1, end):
                    return True
                layout.pop()
                left[r], codes[r] = need, code
            failed.add((k, pos, tuple(left)))
            return False

        return tuple(layout) if go(0, 0) else None

    def _suffix_holds(self, k: int, pos: int, codes: list[int]) -> bool:
        """Whether every rank's remaining need (`codes`) is held by as many intervals of blocks pos… as it
        has virtual stages from stage k on (at most as many on an edge rank, whose stages may be empty), each
        starting past the least the stages before it hold (_suffix_sums)."""
        pp, n = self.pp, self.n
        for q, code in enumerate(codes):
            ahead = (q - k) % pp
            stages = 0 if k + ahead >= self.stages else (self.stages - 1 - k - ahead) // pp + 1
            start = pos + self.least_before[min(k + ahead, self.stages)] - self.least_before[k]
            if not self._rank_suffix(q)[stages][min(start, n + 1)][code >> 3] >> (code & 7) & 1:
                return False
        return True

    def _between(self, k: int) -> int:
        """The fewest blocks the virtual stages between stage k and its rank's next one hold."""
        return self.least_before[min(k + self.pp, self.stages)] - self.least_before[min(k + 1, self.stages)]

    def _edge(self, r: int) -> bool:
        """Whether rank r's virtual stages may hold no block (empty_stages.py)."""
        return self.open and edge_rank(r, self.pp)

    def _rank_suffix(self, r: int) -> tuple[tuple[bytes, ...], ...]:
        """_suffix as rank r reads it: an edge rank's j stages may hold fewer than j intervals."""
        return self._edge_suffix if self._edge(r) else self._suffix

    @functools.cached_property
    def _suffix(self) -> tuple[tuple[bytes, ...], ...]:
        """The sequence's _suffix_sums for this row's PP and VPP, each bit set as bytes (bit `code` is bit
        code & 7 of byte code >> 3: a test reads one byte, not the whole set)."""
        return tuple(tuple(_as_bytes(bits, self.relaxed.size) for bits in row) for row in self._suffix_bits)

    @functools.cached_property
    def _edge_suffix(self) -> tuple[tuple[bytes, ...], ...]:
        """_suffix with j intervals read as at most j (an edge rank's stages may be empty)."""
        rows = list(itertools.accumulate(self._suffix_bits, lambda held, row: tuple(map(operator.or_, held, row))))
        return tuple(tuple(_as_bytes(bits, self.relaxed.size) for bits in row) for row in rows)

    @functools.cached_property
    def _suffix_bits(self) -> tuple[tuple[int, ...], ...]:
        """_suffix_sums for this row: a rank's consecutive stages lie at least the least the stages between
        them hold apart (PP − 1 blocks on a closed row, PP − 3 past the edge ranks' stages on an open one)."""
        gap = min((self._between(k) for k in range(self.stages - self.pp)), default=self.pp - 1)
        return _suffix_sums(*self.relaxed.key, gap, self.vpp)

    def _counts_path(self, need: list[int], sums: list[set[int]]) -> tuple[int, ...] | None:
        """One kind group: the layout of realise's first path, each stage taking _realise_moves' first piece
        (a need is then a block count and a piece's code its length), or None when a stage has none or the
        path ends short of the last block (the search then backtracks)."""
        if self.stages > REALISE_BUDGET:
            return None
        layout: list[int] = []
        pos, edge = 0, self._edge_sums(sums)
        for k in range(self.stages):
            r, rounds = k % self.pp, self.vpp - k // self.pp
            most = min(need[r] - self._rank_later(r, rounds), self.n - self._later(k) - pos)
            allowed = (edge if self._edge(r) else sums)[rounds - 1]
            empty = self._empty_at(k, need[r], rounds)
            if empty == "first" and need[r] in allowed:
                length: int | None = 0
            else:
                length = _first_length(need[r], rounds, most, allowed, 1 if empty == "last" else self.least[k])
                if length is None and empty == "last" and need[r] in allowed:
                    length = 0
            if length is None:
                return None
            need[r] -= length
            layout.append(length)
            pos += length
        return tuple(layout) if pos == self.n else None

    @functools.cached_property
    def _prefix_codes(self) -> tuple[list[tuple[int, ...]], list[int]]:
        """Per block boundary i, the relaxation's kind counts among the first i blocks and their code
        (RankTotals.place): realise's pieces are differences of these."""
        at = list(zip(*self.prefix, strict=True))
        place = [int(x) for x in self.relaxed.place]
        return at, [sum(x * w for x, w in zip(v, place, strict=True)) for v in at]

    def _edge_sums(self, sums: list[set[int]]) -> list[set[int]]:
        """`sums` as an edge rank reads them: its stages may hold no block, so what it still needs over j stages
        may be a sum of fewer intervals."""
        if not self.open:
            return sums
        return list(itertools.accumulate(sums, operator.or_))

    def _later(self, k: int) -> int:
        """The fewest blocks the virtual stages after stage k hold together (empty_stages.stage_least)."""
        return self.least_before[-1] - self.least_before[k + 1]

    def _rank_later(self, r: int, rounds: int) -> int:
        """The fewest blocks rank r's virtual stages after its current one hold, `rounds` stages left to it."""
        return 0 if self._edge(r) else rounds - 1

    def _empty_at(self, k: int, blocks: int, rounds: int) -> str:
        """Where realise tries an empty piece at stage k of an edge rank that holds fewer blocks than it has
        stages left: "first" on the first rank, "last" on the last (after every other piece), so the first rank's
        empty stages come first and the last rank's last, the embedding and the loss keeping the outermost stages
        to themselves (`E|(t|)*126,L`, Llama 3 405B's published layout); "" where the evenest order decides."""
        if self.least[k] or blocks >= rounds or rounds == 1:
            return ""
        return "first" if k % self.pp == 0 else "last"

    @staticmethod
    def _realise_moves(pos: int, top: int, need: tuple[int, ...], code: int, rounds: int, at: list[tuple[int, ...]],
                       coded: list[int], allowed: set[int], least: int = 1,
                       empty: str = "") -> Iterator[tuple[int, tuple[int, ...]]]:
        """realise's pieces from block `pos` to an end at most `top` for a rank that still needs `need` (coded
        `code`) over `rounds` stages, in order: evenest size first, then nearest the rank's share by kind, the
        empty piece first or last as `empty` says (InterleavedCuts._empty_at); a piece qualifies when it holds at
        least `least` blocks, what it leaves is non-negative and its code is in `allowed`. Lazily, one size group
        at a time: the search mostly takes the first piece."""
        blocks = sum(need)
        low = max(pos + blocks if rounds == 1 else pos + least, pos + least)
        if empty:
            if empty == "first" and code in allowed:
                yield pos, need
            low = max(low, pos + 1)
        here, base = at[pos], coded[pos]
        for alike in _by_unevenness(pos, low, top, blocks, rounds):
            valid = []
            for end in alike:
                if code - coded[end] + base not in allowed:
                    continue
                rest = tuple(map(operator.add, map(operator.sub, need, at[end]), here))
                if min(rest) >= 0:
                    valid.append((end, rest))
            if len(valid) > 1:
                valid.sort(key=lambda move: (sum(abs((y - x) * rounds - y) for x, y in zip(move[1], need, strict=True)),
                                             move[0]))
            yield from valid
        if empty == "last" and code in allowed:
            yield pos, need

    @functools.cached_property
    def fronts(self) -> FrontProgram | None:
        """The exact front program of this row's block sequence when its state space is small enough."""
        program = FrontProgram(self, self.groups)
        return program if program.usable else None

    @functools.cached_property
    def rounds(self) -> RoundProgram | None:
        """The exact round program of this row when its block sequence repeats with a short period after its
        lead-in and the round counts and cases are few."""
        program = RoundProgram(self, self.groups)
        return program if program.usable else None

    @property
    def groups(self) -> np.ndarray:
        """The relaxation's kind group (RankTotals.groups) of every block, in sequence order."""
        return np.array([self.relaxed.pattern[bit.bit_length() - 1] for bit in self.b.bit], dtype=np.int64)

    def exact_least(self, slowest_us: int, cap_mb: int, minimise_time: bool) -> tuple[bool, tuple[int, ...] | None]:
        """The exact programs' answer: (True, cut of least slowest time, or peak memory, within both bounds),
        (True, None) when no cut is within both, (False, None) when the programs decline the question. The
        round program answers where it runs (it is the faster), else the front program. Only the leanest cut
        is printed (best), so only it is made the evenest of its memory unit."""
        def alike(value: int) -> int:
            """The largest peak memory in the same solver unit as `value`."""
            return min(cap_mb, -(-value // MEMORY_UNIT_MB) * MEMORY_UNIT_MB)

        for name in ("rounds", "fronts"):
            program = getattr(self, name)
            if program is None:
                continue
            try:
                found = program.least(slowest_us, cap_mb, minimise_time, None if minimise_time else alike)
            except Declined:
                continue
            return True, None if found is None else found[1]
        return False, None

    def settle(self, slowest_us: int, cap_mb: int, minimise_time: bool) -> tuple[bool, tuple[int, ...] | None]:
        """The exact answers that need no search (relaxed_cut's and exact_least's contract): with one kind of
        block the relaxation's (a layout always realises it), with several the exact programs' where they
        run (the relaxation's optimum often has no layout there; it is asked first where the round program
        is long, until it first fails to settle a question of the row: relaxation_asked_first), else the
        relaxation's when realised."""
        if len(self.relaxed.groups) > 1:
            if self.relaxation_asked_first:
                settled, layout = self.relaxed_cut(slowest_us, cap_mb, minimise_time)
                if settled:
                    return settled, layout
                self.relaxation_settles = False
            settled, layout = self.exact_least(slowest_us, cap_mb, minimise_time)
            if settled:
                return settled, layout
            settled, layout = self.relaxed_cut(slowest_us, cap_mb, minimise_time)
            if settled:
                return settled, layout
            return self.ordered_cut(slowest_us, cap_mb, minimise_time)
        return self.relaxed_cut(slowest_us, cap_mb, minimise_time)

    @property
    def relaxation_asked_first(self) -> bool:
        """Whether `settle` asks the relaxation before the round program: where the program is long
        (RELAXATION_FIRST states), while the relaxation has settled every question asked (relaxation_settles)."""
        return self.relaxation_settles and self.rounds is not None and self.rounds.states > RELAXATION_FIRST

    def ordered_cut(self, slowest_us: int, cap_mb: int, minimise_time: bool) -> tuple[bool, tuple[int, ...] | None]:
        """relaxed_cut's contract, answered exactly over the relaxation's cuts in order of value: every relaxed
        cut within both bounds at a value up to a level (RankTotals.within) is realised exactly
        (realise_exactly), least value first; the first that has a layout is a cut of least value, since
        every true cut's ranks hold a relaxed cut's counts and all of lesser value have none. The level starts
        at the relaxed optimum (ranks holding what their stages' places allow) and its step from the last
        doubles, up to the question's own bound (then (True, None): no cut is within both); a level holding
        more than ORDERED_CUTS relaxed cuts is moved halfway back, at most ORDERED_HALVINGS times. (False, None)
        when it still holds too many, or a realisation (or the relaxation) runs out of budget or the deadline."""
        try:
            found = self.relaxed.solve(slowest_us, cap_mb, minimise_time, placed=True)
        except OutOfBudget:
            return False, None
        if found is None:
            return True, None
        level, top = found[0], slowest_us if minimise_time else cap_mb
        sums = self.relaxed.decomposable(slowest_us, cap_mb)
        done, step, halved = -1, max(1, level // ORDERED_FIRST_STEP), 0
        while True:
            try:
                cuts = self.relaxed.within(level if minimise_time else slowest_us,
                                           cap_mb if minimise_time else level, minimise_time, ORDERED_CUTS)
            except OutOfBudget:
                return False, None
            if cuts is None:
                if level - done <= 1 or halved == ORDERED_HALVINGS:
                    return False, None
                level, step, halved = done + (level - done) // 2, max(1, step // 2), halved + 1
                continue
            held, value = cuts
            for i in np.lexsort((*held.T[::-1], value)):
                if value[i] <= done:
                    continue
                try:
                    layout = self.realise_exactly(self.relaxed.decode(held[i]), sums)
                except OutOfBudget:
                    return False, None
                if layout is not None:
                    return True, layout
            if level >= top:
                return True, None
            done, level, step = level, min(level + step, top), step * 2

    def relaxed_cut(self, slowest_us: int, cap_mb: int, minimise_time: bool) -> tuple[bool, tuple[int, ...] | None]:
        """The relaxation's answer when it settles the question: (True, None) when no relaxed cut is within
        both bounds (so no cut is); (True, cut) when a layout realises the ranks' counts of a relaxed cut of
        least slowest time (or peak memory), which no cut can beat; (False, None) otherwise (the deadline passed
        during the relaxation included)."""
        try:
            found = self.relaxed.solve(slowest_us, cap_mb, minimise_time)
        except OutOfBudget:
            return False, None
        if found is None:
            return True, None
        sums = self.relaxed.decomposable(slowest_us, cap_mb)
        for targets in found[1]:
            layout = self.realise(targets, sums)
            if layout is not None:
                return True, layout
        return False, None

    def find(self, slowest_us: int, cap_mb: int, budget: int = UNBOUNDED) -> tuple[int, ...] | None:
        """A cut with every rank within `slowest_us` (edges included) and `cap_mb`, or None if none exists;
        raises OutOfBudget after `budget` partial cuts without an answer."""
        ranks = [(0, 0, 0, 0)] * self.pp
        layout: list[int] = []
        self.nodes, self.budget = 0, budget
        return tuple(layout) if self._place(0, 0, ranks, layout, slowest_us, cap_mb) else None

    def late(self) -> bool:
        """Whether the deadline has passed."""
        return time.perf_counter() > self.deadline

    def decide(self, slowest_us: int, cap_mb: int) -> tuple[int, ...] | None:
        """find without a budget in effect: the branch and bound, then the CP-SAT cut program when the
        search runs out of budget; raises OutOfBudget only when both leave the question open (or the
        deadline has passed)."""
        if self.late():
            raise OutOfBudget
        try:
            return self.find(slowest_us, cap_mb, NODE_BUDGET if self.vpp != 2 else FIRST_BUDGET)
        except OutOfBudget:
            pass
        if self.late():
            raise OutOfBudget
        if self.vpp == 2:
            return two_chunk_cut(self, slowest_us, cap_mb)
        try:
            return cut_within(self, slowest_us, cap_mb, self.deadline, self.proof_work)
        except Undecided as e:
            raise OutOfBudget from e

    def _place(self, k: int, pos: int, ranks: list[tuple[int, int, int, int]], layout: list[int],
               slowest_us: int, cap_mb: int) -> bool:
        """Place virtual stage k from block `pos` on; True once every stage is placed (layout filled)."""
        if k == self.stages:
            return True
        self.nodes += 1
        if self.nodes > self.budget or (self.nodes % DEADLINE_EVERY == 0 and self.late()):
            raise OutOfBudget
        r, chunk = k % self.pp, k // self.pp
        last_round = chunk == self.vpp - 1
        open_ranks = range(r, self.pp) if last_round else range(self.pp)
        key = (k, pos, tuple(ranks[q] for q in open_ranks))
        for t, m in self.failed.get(key, ()):
            if t >= slowest_us and m >= cap_mb:
                return False
        b, c = self.b, self.c
        left = self.stages - k - 1
        least = self.least[k]
        t0, s0, a0, m0 = ranks[r]
        edge_t = c.edge_time_us[r]
        sizes = []
        mask = m0
        for j in range(pos + least, self.n - self._later(k) + 1):
            t = t0 + b.time[j] - b.time[pos]
            if edge_t + t > slowest_us:
                break
            if j > pos:
                mask |= b.bit[j - 1]
            state = (t, s0 + b.static[j] - b.static[pos], a0 + b.act[j] - b.act[pos], mask)
            if self.memory(r, state[1], state[2], state[3]) > cap_mb:
                break
            sizes.append(state)
        later = range(r + 1, self.pp) if last_round else range(self.pp)
        ideal = (self.n - pos) / (left + 1)
        order = sorted(range(len(sizes)), key=lambda i: (abs(i + least - ideal), i))
        for i in order:
            end = pos + least + i
            ranks[r] = sizes[i]
            if self._room(end, ranks, later, slowest_us, cap_mb):
                layout.append(least + i)
                if self._place(k + 1, end, ranks, layout, slowest_us, cap_mb):
                    ranks[r] = (t0, s0, a0, m0)
                    return True
                layout.pop()
        ranks[r] = (t0, s0, a0, m0)
        self.failed.setdefault(key, []).append((slowest_us, cap_mb))
        return False

    def _room(self, end: int, ranks: list[tuple[int, int, int, int]], later: range,
              slowest_us: int, cap_mb: int) -> bool:
        """Whether the ranks still to be served can take blocks end… in time and memory (admissible)."""
        if end == self.n:
            return True
        b, c = self.b, self.c
        open_ranks = list(later)
        if not open_ranks:
            return False
        if slowest_us < UNBOUNDED:
            spare = sum(slowest_us - c.edge_time_us[q] - ranks[q][0] for q in open_ranks)
            if spare < b.time[-1] - b.time[end]:
                return False
        room = sum(cap_mb - self.memory(q, *ranks[q][1:]) for q in open_ranks)
        return room >= b.lean[end]

    def _bisect(self, lo: int, best: tuple[int, ...], probe: Callable[[int], tuple[int, ...] | None],
                score: Callable[[tuple[int, ...]], int],
                least: Callable[[int], tuple[int, ...]] | None = None) -> tuple[tuple[int, ...], bool]:
        """Least score from `lo` (a proved lower bound) up to the incumbent `best`'s, by bisection with
        `probe(value)` finding a cut of score <= value or proving none; (cut, proved). When a probe runs
        out of budget, `least(hi)` (if given) returns a cut of least score at most hi at once."""
        hi = score(best)
        while lo < hi:
            mid = (lo + hi) // 2
            try:
                found = probe(mid)
            except OutOfBudget:
                if least is None:
                    return best, False
                try:
                    return least(hi), True
                except OutOfBudget:
                    return best, False
            if found is None:
                lo = mid + 1
            else:
                best, hi = found, score(found)
        return best, True

    def escalate(self, lowest_units: int, cap_mb: int) -> tuple[int, ...] | None:
        """A first cut within `cap_mb` when the quick search found none: time bounds from the relaxation's
        `lowest_units` up, the gap doubling (bounded pieces keep each question small), then no bound."""
        gap = 1
        while self.slowest_within(lowest_units + gap) < self.total_us:
            found = self.decide(self.slowest_within(lowest_units + gap), cap_mb)
            if found is not None:
                return found
            gap *= 2
        return self.decide(UNBOUNDED, cap_mb)

    def fit(self, cap_mb: int) -> bool | None:
        """Whether some cut keeps every rank within `cap_mb`, None when the question is left open (budget or
        deadline spent): the relaxation (no relaxed cut fits, or one it realises does), then `settle`'s fastest cut
        within the cap (one pass of the exact programs, whose time floors the staircase's first step reuses; the
        leanest would add an evenness pass), the quick search, then `decide`."""
        settled, layout = self.relaxed_cut(UNBOUNDED, cap_mb, False)
        if not settled:
            settled, layout = self.settle(UNBOUNDED, cap_mb, True)
        if settled:
            return layout is not None
        try:
            return self.find(UNBOUNDED, cap_mb, FIRST_BUDGET) is not None
        except OutOfBudget:
            pass
        try:
            return self.decide(UNBOUNDED, cap_mb) is not None
        except OutOfBudget:
            return None

    def fastest(self, cap_mb: int) -> tuple[tuple[int, ...] | None, bool]:
        """The cut of least step time (in solver units) with every rank within `cap_mb`, or None when no cut
        fits; and whether that is proved (the searches stayed within their budget). `settle` answers first
        (the relaxation and the exact programs); the searches run only when it does not."""
        settled, layout = self.settle(UNBOUNDED, cap_mb, True)
        if settled:
            return layout, True
        try:
            first = self.find(UNBOUNDED, cap_mb, FIRST_BUDGET)
            if first is None:
                return None, True
        except OutOfBudget:
            first = None
        try:
            bound = self.relaxed.fastest_us(cap_mb, self.measure(first)[0] if first else UNBOUNDED)
        except OutOfBudget:
            return first, False
        if bound is None:
            return first, True
        if self.vpp == 2:
            return self._fastest_two_chunk(cap_mb, bound, first)
        if first is None:
            try:
                first = self.escalate(self.time_units(bound), cap_mb)
            except OutOfBudget:
                return None, False
            if first is None:
                return None, True
        return self._bisect(self.time_units(bound), first,
                            lambda units: self.decide(self.slowest_within(units), cap_mb),
                            lambda cut: self.time_units(self.measure(cut)[0]))

    def _least_time_cut(self, ceiling_us: int, cap_mb: int) -> tuple[int, ...] | None:
        """VPP 2: a cut of least step time (solver units) within `ceiling_us` and `cap_mb`, by the exact
        two-chunk programs (two_chunk_least for the value, two_chunk_cut for a cut at it)."""
        found = two_chunk_least(self, ceiling_us, cap_mb, True)
        return None if found is None else found[1]

    def _fastest_two_chunk(self, cap_mb: int, bound: int, first: tuple[int, ...] | None
                           ) -> tuple[tuple[int, ...] | None, bool]:
        """fastest() for VPP 2: bisection with quick branch-and-bound probes while they answer within
        their budget, the exact two-chunk programs as soon as one does not."""
        try:
            if first is None:
                return self._least_time_cut(UNBOUNDED, cap_mb), True
        except OutOfBudget:
            return None, False

        def least(hi: int) -> tuple[int, ...]:
            cut = self._least_time_cut(self.slowest_within(hi), cap_mb)
            assert cut is not None
            return cut

        return self._bisect(self.time_units(bound), first,
                            lambda units: self.find(self.slowest_within(units), cap_mb, FIRST_BUDGET),
                            lambda cut: self.time_units(self.measure(cut)[0]), least)

    def leanest(self, slowest_us: int, cap_mb: int,
                incumbent: Callable[[], tuple[int, ...] | None]) -> tuple[tuple[int, ...] | None, bool]:
        """The cut of least peak memory (in solver units) with every rank within `slowest_us` and `cap_mb`,
        starting from a cut that meets both (`incumbent`, built only when the search needs it); and whether
        that is proved. None, unproved, when the incumbent could not be built within its search's budget or the
        deadline passed before the relaxation bounded the question."""
        settled, layout = self.settle(slowest_us, cap_mb, False)
        if settled:
            assert layout is not None
            return layout, True
        try:
            bound = self.relaxed.leanest_mb(slowest_us, cap_mb)
        except OutOfBudget:
            return None, False
        assert bound is not None
        start = incumbent()
        if start is None:
            return None, False
        if self.vpp != 2:
            return self._bisect(-(-bound // MEMORY_UNIT_MB), start,
                                lambda units: self.decide(slowest_us, units * MEMORY_UNIT_MB),
                                lambda cut: self.units(cut)[1])

        def least(hi: int) -> tuple[int, ...]:
            found = two_chunk_least(self, slowest_us, hi * MEMORY_UNIT_MB, False)
            assert found is not None
            return found[1]

        return self._bisect(-(-bound // MEMORY_UNIT_MB), start,
                            lambda units: self.find(slowest_us, units * MEMORY_UNIT_MB, FIRST_BUDGET),
                            lambda cut: self.units(cut)[1], least)

    def best(self, cap_mb: int) -> tuple[tuple[int, ...] | None, bool]:
        """The fastest cut within `cap_mb`, and among those the leanest (in solver units); whether proved. The
        fastest cut itself is built only when the leanest is searched from it (the round program gives its
        time alone); when its search then runs out of budget, none is found, unproved."""
        answered, fastest_us = self.fastest_time(cap_mb)
        if answered:
            if fastest_us is None:
                return None, True
            return self._leanest_at(fastest_us, cap_mb, lambda: self.fastest(cap_mb)[0], True)
        fastest, proved = self.fastest(cap_mb)
        if fastest is None:
            return None, proved
        return self._leanest_at(self.measure(fastest)[0], cap_mb, lambda: fastest, proved)

    def _leanest_at(self, fastest_us: int, cap_mb: int, incumbent: Callable[[], tuple[int, ...] | None],
                    proved: bool) -> tuple[tuple[int, ...] | None, bool]:
        """best's leanest cut within `cap_mb` at the step time of a slowest rank taking `fastest_us`."""
        lean, lean_proved = self.leanest(self.slowest_within(self.time_units(fastest_us)), cap_mb, incumbent)
        return lean, proved and lean_proved

    def fastest_time(self, cap_mb: int) -> tuple[bool, int | None]:
        """(True, the slowest-rank time (µs, by the linear tables) of the fastest cut within `cap_mb`, None when none
        fits) where `settle` would take fastest's answer from the round program and it answers; else (False, None).
        An answer is kept per cap: a staircase asks for its next cap's before it asks `best` there
        (row_search.RowSearch's tails)."""
        if cap_mb in self._fastest_times:
            return True, self._fastest_times[cap_mb]
        if len(self.relaxed.groups) < 2 or self.rounds is None or self.relaxation_asked_first:
            return False, None
        try:
            found = self.rounds.fastest_us(UNBOUNDED, cap_mb)
        except Declined:
            return False, None
        self._fastest_times[cap_mb] = found
        return True, found

    def slowest_floor(self, cap_mb: int) -> tuple[bool, int | None]:
        """(True, a slowest-rank time (µs, by the linear tables) that no cut within `cap_mb` goes below, None when no
        cut is within it) without a cut search: fastest_time's exact answer where the round program gives it, else
        the relaxation's least (RankTotals.fastest_us: every cut's ranks hold kind counts the relaxation allows, so
        none is faster, and none fits where no relaxed cut does), kept per cap; (False, None) when the relaxation is
        cut off by the deadline."""
        answered, found = self.fastest_time(cap_mb)
        if answered:
            return True, found
        if cap_mb not in self._relaxed_floors:
            try:
                self._relaxed_floors[cap_mb] = self.relaxed.fastest_us(cap_mb, UNBOUNDED)
            except OutOfBudget:
                return False, None
        return True, self._relaxed_floors[cap_mb]


SPENT = "spent"
"""_layouts' mark of a search that spent its budget of partial layouts (OutOfBudget again when asked)."""


@functools.lru_cache(maxsize=64)
def _layouts(key: tuple, pp: int, vpp: int,
             exact: bool) -> dict[tuple[tuple[int, ...], ...], tuple[int, ...] | str | None]:
    """The layout searches' answers (InterleavedCuts._layout_for) by the ranks' targets, shared by every row whose
    sequence tables (RankTotals.key), PP and VPP are these: rows apart in TP, CP, MBS or recompute ask for the
    same ranks' counts again and again (Nemotron-H 8B on 256 GPUs: 7,505 exact searches, 2,078 distinct)."""
    return {}


@functools.lru_cache(maxsize=32)
def _suffix_sums(raw: bytes, shape: tuple[int, ...], pattern: tuple[int, ...], gap: int,
                 rounds: int) -> tuple[tuple[int, ...], ...]:
    """Per j = 0..rounds and start block s = 0..n+1, the codes (RankTotals.place) of the kind counts j
    intervals of blocks s… hold, each next one starting `gap` blocks or more past the last one's end, as a
    bit set (bit `code`). With `gap` the least the other ranks' stages between two of a rank's own hold (PP − 1
    on a closed row, fewer where edge ranks' stages may be empty), a rank's remaining non-empty virtual stages
    are such intervals: realise_exactly prunes by them."""
    seq = _sequence(raw, shape, pattern)
    n = shape[0] - 1
    codes = (seq.counts @ seq.place).tolist()
    table = [tuple([1] * (n + 2))]
    for _ in range(rounds):
        last = table[-1]
        row = [0] * (n + 2)
        for start in range(n - 1, -1, -1):
            bits, here = row[start + 1], codes[start]
            for end in range(start + 1, n + 1):
                bits |= last[min(end + gap, n + 1)] << here[end]
            row[start] = bits
        table.append(tuple(row))
    return tuple(table)


@functools.lru_cache(maxsize=64)
def _rank_sums(raw: bytes, shape: tuple[int, ...], pattern: tuple[int, ...], least: tuple[int, ...], pp: int,
               rank: int) -> int:
    """The codes (RankTotals.place) of the kind counts pipeline rank `rank` can hold in some cut whose virtual
    stages hold at least `least` blocks each, as a bit set: sums of one interval per virtual stage of its, stage
    i holding at least its least, starting no earlier than the least the stages before it hold and ending early
    enough for the stages after it, the first stage starting at block 0, the last ending at the last block, and
    two stages of the rank at least the least of the stages between them apart."""
    seq = _sequence(raw, shape, pattern)
    n, stages = shape[0] - 1, len(least)
    before = (0, *itertools.accumulate(least))
    codes = (seq.counts @ seq.place).tolist()
    ends: list[int] = []
    for i in range(rank, stages, pp):
        starts = range(0, 1) if i == 0 else range(before[i], n - (before[-1] - before[i]) + 1)
        last_end = n - (before[-1] - before[i + 1])
        reach = [0] * (n + 1)
        if i < pp:
            for s in starts:
                reach[s] = 1
        else:
            gap, running = before[i] - before[i - pp + 1], 0
            for s in range(n + 1):
                if s - gap >= 0:
                    running |= ends[s - gap]
                reach[s] = running
        now = [0] * (n + 1)
        for s in starts:
            if reach[s]:
                for e in range(n if i == stages - 1 else s + least[i], last_end + 1):
                    now[e] |= reach[s] << codes[s][e]
        ends = now
    out = 0
    for bits in ends:
        out |= bits
    return out


@functools.lru_cache(maxsize=64)
def _rank_held(raw: bytes, shape: tuple[int, ...], pattern: tuple[int, ...], least: tuple[int, ...], pp: int,
               rank: int, size: int) -> np.ndarray:
    """_rank_sums as an array of `size` flags by code."""
    packed = np.frombuffer(_as_bytes(_rank_sums(raw, shape, pattern, least, pp, rank), size), dtype=np.uint8)
    return np.unpackbits(packed, bitorder="little")[:size].astype(bool)


def _as_bytes(bits: int, size: int) -> bytes:
    """A bit set over codes below `size` as bytes, bit `code` being bit code & 7 of byte code >> 3."""
    return bits.to_bytes(size // 8 + 1, "little")


@dataclass(frozen=True)
class _Sequence:
    """A block sequence's tables under a grouping of its kinds, shared by every row of a problem whose
    kinds group alike: interval counts, the mixed radix that codes count vectors (each digit up to twice
    the group's total), and every span (i, j) with its counts, code and distinct vector."""

    counts: np.ndarray
    total: np.ndarray
    radix: np.ndarray
    place: np.ndarray
    size: int
    spans: np.ndarray
    span_vectors: np.ndarray
    span_codes: np.ndarray
    span_kind: np.ndarray
    distinct: np.ndarray


@functools.lru_cache(maxsize=16)
def _sequence(raw: bytes, shape: tuple[int, ...], pattern: tuple[int, ...]) -> _Sequence:
    """The tables of the sequence whose interval counts are `raw` (int64, `shape`) with kind k counted in
    group pattern[k]."""
    counts = np.frombuffer(raw, dtype=np.int64).reshape(shape) @ np.array(
        [[g == q for q in range(max(pattern) + 1)] for g in pattern], dtype=np.int64)
    n = shape[0] - 1
    total = np.array(counts[0, n], dtype=np.int64)
    radix = 2 * (total + 1)
    place = np.cumprod(np.concatenate([[1], radix[:-1]])).astype(np.int64)
    upper = np.triu_indices(n + 1, k=1)
    spans = np.stack(upper, axis=1).astype(np.int64)
    span_vectors = counts[upper].astype(np.int64)
    span_codes = span_vectors @ place
    distinct, span_kind = np.unique(span_codes, return_inverse=True)
    return _Sequence(counts, total, radix, place, int(np.prod(radix)), spans, span_vectors, span_codes, span_kind,
                     (distinct[:, None] // place[None, :]) % radix[None, :])


class _CountRanges(NamedTuple):
    """One kind group: per rank its least count, how many counts from it it may hold, and their objective
    (ranks × counts, the int64 maximum past a rank's last)."""

    low: np.ndarray
    counts: np.ndarray
    cost: np.ndarray


EMPTY = np.zeros(1, dtype=np.int64)
"""The code of the empty piece (no block of any kind)."""


class RankTotals:
    """A relaxation of the interleaved cut that keeps what a rank can hold and drops where: every rank takes
    VPP block intervals of the sequence (as kind counts; the first rank's first one starts at block 0, the
    last rank's last one ends at the last block, and on an open row any of those two ranks' intervals may be
    empty, InterleavedCuts.open), and the ranks' counts add up to the model's. A dynamic
    program over the ranks' running kind totals gives the least slowest-rank time under a memory cap and
    the least peak memory under a time bound, both lower bounds of any true cut's."""

    def __init__(self, cuts: InterleavedCuts, counts: np.ndarray) -> None:
        self.cuts = cuts
        c = cuts.c
        priced = list(zip(c.kind_time_us, c.kind_static, c.kind_activation, c.kind_peak, c.kind_moe, strict=True))
        self.groups = list(dict.fromkeys(priced))
        """Kinds of equal cost on every count (time, static and activation MB, recompute peak, experts) are
        one kind here: a rank's time and memory depend only on how many it holds of each group."""
        pattern = tuple(self.groups.index(k) for k in priced)
        self.pattern = pattern
        """The group of each kind."""
        self.key = (np.ascontiguousarray(counts, dtype=np.int64).tobytes(), counts.shape, pattern)
        """What the sequence's tables are read from (_sequence, _suffix_sums)."""
        seq = _sequence(*self.key)
        self.counts, self.total, self.radix, self.place, self.size = seq.counts, seq.total, seq.radix, seq.place, seq.size
        self.spans, self.span_vectors, self.span_codes, self.span_kind, self.distinct = (
            seq.spans, seq.span_vectors, seq.span_codes, seq.span_kind, seq.distinct)
        bounds = (0, *itertools.accumulate(default_layout(cuts.n, cuts.pp, cuts.vpp)))
        self.even = np.zeros((cuts.pp, len(self.groups)), dtype=np.int64)
        """Blocks of each kind per rank in the default layout (derived.default_layout: the evenest)."""
        for k in range(cuts.stages):
            self.even[k % cuts.pp] += self.counts[bounds[k], bounds[k + 1]]
        self.kt, self.ks, self.ka, self.kp = (np.array([g[i] for g in self.groups], dtype=np.int64) for i in range(4))
        self.km = np.array([g[4] for g in self.groups], dtype=bool)
        self.cache: dict[tuple[int, int, str], np.ndarray] = {}
        self.fit_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.fit_codes: dict[tuple[int, int], np.ndarray] = {}
        self.grid: tuple[np.ndarray, np.ndarray, int] | None = None
        self.partial: dict[tuple[int, int], list[set[int]]] = {}
        """Per bounds, the codes of sums of j intervals some rank can hold, j = 0..VPP (_rank_vectors)."""
        self.priced: dict[tuple[int, int, str], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self.priced_bounds: dict[str, list[tuple[int, int]]] = {}
        """`priced`'s bounds per edge, in the order they were priced (_priced_key scans them)."""
        self.rising: dict[tuple[int, int, str], bool] = {}
        """Per `priced` key, whether its vectors are consecutive counts of one group whose costs never fall
        on the ranks of its edge (_count_ranges)."""
        self.edges = {"time": np.array(c.edge_time_us, dtype=np.int64), "act": np.array(c.edge_activation, dtype=np.int64),
                      "static": np.array(c.edge_static, dtype=np.int64), "peak": np.array(c.edge_peak, dtype=np.int64),
                      "moe": np.array(c.edge_moe, dtype=bool),
                      "num": np.array([f.numerator for f in c.inflight], dtype=np.int64),
                      "den": np.array([f.denominator for f in c.inflight], dtype=np.int64)}
        """Per-rank edge terms and in-flight fractions as arrays, for pricing vectors on every rank at once."""

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Kind-count vectors from their mixed-radix codes (vector @ place)."""
        return (codes[:, None] // self.place[None, :]) % self.radix[None, :]

    def _pieces(self, slowest_us: int, cap_mb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Codes of the span vectors some rank can hold alone within both bounds: every span, those
        starting at block 0, those ending at the last block."""
        key = (slowest_us, cap_mb)
        if key not in self.fit_cache:
            ok = np.zeros(len(self.distinct), dtype=bool)
            if len(self.distinct):
                time, memory = self.costs(self.distinct)
                ok = ((time <= slowest_us) & (memory <= cap_mb)).any(axis=0)
            fits = ok[self.span_kind]
            codes = self.span_codes
            self.fit_cache[key] = (np.unique(codes[fits]), np.unique(codes[fits & (self.spans[:, 0] == 0)]),
                                   np.unique(codes[fits & (self.spans[:, 1] == self.cuts.n)]))
        return self.fit_cache[key]

    def costs(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(time µs, memory MB) of every rank (rows) holding each of `vectors` (columns): RowCosts in bulk."""
        c, e = self.cuts.c, self.edges
        time = e["time"][:, None] + (vectors @ self.kt)[None, :]
        present = vectors > 0
        peak = np.where(present, self.kp[None, :], 0).max(axis=1) if len(self.kp) else np.zeros(len(vectors))
        moe = (present & self.km[None, :]).any(axis=1)
        held = e["act"][:, None] + (vectors @ self.ka)[None, :]
        memory = (e["static"][:, None] + (vectors @ self.ks)[None, :] + -(-(held * e["num"][:, None]) // e["den"][:, None])
                  + np.maximum(peak[None, :], e["peak"][:, None])
                  + np.where(moe[None, :] | e["moe"][:, None], c.dispatch_mb, 0) + c.workspace_mb)
        return time, memory

    @functools.cached_property
    def _grid_costs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(code, time µs, memory MB on every rank, column by code) of every kind-count vector up to the
        model's totals, priced once (costs): the vectors _rank_vectors sums are among them."""
        states = self._states()[0]
        codes = states @ self.place
        column = np.full(self.size, -1, dtype=np.int64)
        column[codes] = np.arange(len(codes))
        return (codes, *self.costs(states), column)

    def _fitting(self, slowest_us: int, cap_mb: int) -> np.ndarray:
        """By code, whether the vector is within the model's totals and some rank could hold it within both
        bounds (time and memory grow with every block)."""
        key = (slowest_us, cap_mb)
        if key not in self.fit_codes:
            codes, time, memory, _ = self._grid_costs
            table = np.zeros(self.size, dtype=bool)
            table[codes] = ((time <= slowest_us) & (memory <= cap_mb)).any(axis=0)
            self.fit_codes[key] = table
        return self.fit_codes[key]

    def _rank_vectors(self, slowest_us: int, cap_mb: int, edge: str) -> np.ndarray:
        """Kind counts some rank can hold: sums of VPP intervals within the bounds; edge "first": the first
        interval starts at block 0, "last": the last one ends at the last block, and on an open row any of an
        edge's intervals may be empty (InterleavedCuts.open). Summed as codes, in order."""
        key = (slowest_us, cap_mb, edge)
        if key not in self.cache:
            pieces, heads, tails = self._pieces(slowest_us, cap_mb)
            fitting = self._fitting(slowest_us, cap_mb)
            sums = np.zeros(1, dtype=np.int64)
            partial = self.partial.setdefault((slowest_us, cap_mb), [{0}]) if not edge else []
            for round_ in range(self.cuts.vpp):
                use = heads if edge == "first" and round_ == 0 else \
                    tails if edge == "last" and round_ == self.cuts.vpp - 1 else pieces
                if edge and self.cuts.open:
                    use = np.union1d(use, EMPTY)
                marked = np.zeros(self.size, dtype=bool)
                marked[sums[:, None] + use[None, :]] = True
                sums = np.flatnonzero(marked & fitting)
                if not edge:
                    partial.append(set(sums.tolist()))
            self.cache[key] = self.decode(sums)
        return self.cache[key]

    def decomposable(self, slowest_us: int, cap_mb: int) -> list[set[int]]:
        """For j = 0..VPP, the codes of the kind counts some rank within both bounds can hold as j intervals
        anywhere in the sequence (any looser bounds' sets serve: they contain these)."""
        key = next(((t, m) for t, m in self.partial if t >= slowest_us and m >= cap_mb), None)
        if key is None:
            self._rank_vectors(slowest_us, cap_mb, "")
            key = (slowest_us, cap_mb)
        return self.partial[key]

    def _states(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Every running-total state (kind counts up to the model's), its code in a padded array of the
        mixed radix (each coordinate shifted by total + 1, so subtracting any vector <= total stays in the
        array and lands in the padding, never on another state, when a coordinate goes negative), and
        the padded array's size."""
        if self.grid is None:
            shape = tuple(int(t) + 1 for t in self.total)
            states = np.indices(shape).reshape(len(shape), -1).T.astype(np.int64)
            self.grid = (states, (states + self.total + 1) @ self.place, self.size)
        return self.grid

    def _moves(self, r: int, slowest_us: int, cap_mb: int, minimise_time: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rank r's vectors within both bounds, as codes, the objective each costs on rank r, and their
        block counts. Costs grow with every block, so the vectors within tighter bounds are those of looser
        ones that fit them: any looser bounds' vectors already priced are filtered instead of summed again."""
        codes, blocks, time, memory = self._priced_for(r, slowest_us, cap_mb)
        ok = (time[r] <= slowest_us) & (memory[r] <= cap_mb)
        return codes[ok], (time[r] if minimise_time else memory[r])[ok], blocks[ok]

    def _priced_for(self, r: int, slowest_us: int, cap_mb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The vectors rank r's edge can hold within these bounds or the first looser ones already priced (_moves
        filters them by rank): their codes, block counts, and time and memory on every rank (rows)."""
        return self.priced[self._priced_key(r, slowest_us, cap_mb)]

    def _priced_key(self, r: int, slowest_us: int, cap_mb: int) -> tuple[int, int, str]:
        """_priced_for's key in `priced` (priced here when new): the first bounds priced for rank r's edge, in the
        order they were, at least as loose as these, else these."""
        edge = {0: "first", self.cuts.pp - 1: "last"}.get(r, "")
        bounds = self.priced_bounds.setdefault(edge, [])
        key = next(((t, m, edge) for t, m in bounds if t >= slowest_us and m >= cap_mb), (slowest_us, cap_mb, edge))
        if key not in self.priced:
            vectors = self._rank_vectors(*key)
            codes = vectors @ self.place
            _, time, memory, column = self._grid_costs
            self.priced[key] = (codes, vectors.sum(axis=1), time[:, column[codes]], memory[:, column[codes]])
            bounds.append(key[:2])
        return key

    def solve(self, slowest_us: int, cap_mb: int, minimise_time: bool,
              placed: bool = False) -> tuple[int, Iterator[list[np.ndarray]]] | None:
        """The relaxed least slowest time (or peak memory) with every rank within both bounds, and the
        ranks' kind counts of one or two relaxed cuts that have it (_trace), each traced when it is asked
        for; None when no relaxed cut is within both. `placed`: each rank holds only counts its virtual
        stages' places allow (_placed, as `within` lists them; several kind groups only). The
        first rank starts from no blocks and the last only has to reach the model's totals; a rank between
        takes only the states whose block count the ranks before can reach and the ranks after complete.
        With one kind group the ranks' counts are intervals (_count_ranges) and the same answer is read off
        their bounds (_solve_counts). Raises OutOfBudget past the deadline (InterleavedCuts.late): a rank's step
        over many running totals reads 10^8 cells and more (Nemotron-3 Ultra at PP 8, VPP 12: 2 s a question)."""
        ranges = self._count_ranges(slowest_us, cap_mb, minimise_time) if len(self.groups) == 1 else None
        if ranges is not None:
            return self._solve_counts(ranges)
        states, codes, size = self._states()
        shift, end = int((self.total + 1) @ self.place), int((2 * self.total + 1) @ self.place)
        inf = np.iinfo(np.int64).max
        pp, n = self.cuts.pp, self.cuts.n
        moves = [self._moves(r, slowest_us, cap_mb, minimise_time) for r in range(pp)]
        if placed:
            moves = [self._placed(r, move) for r, move in enumerate(moves)]
        if any(not len(m[0]) for m in moves):
            return None
        if pp > 2:
            held = states.sum(axis=1)
            most = np.cumsum([int(m[2].max()) for m in moves][::-1])[::-1].tolist() + [0]
            least = np.cumsum([int(m[2].min()) for m in moves][::-1])[::-1].tolist() + [0]
        layer = np.full(size, inf, dtype=np.int64)
        layer[shift] = 0
        layers = []
        for r, (move, cost, _) in enumerate(moves):
            if self.cuts.late():
                raise OutOfBudget
            layers.append(layer)
            nxt = np.full(size, inf, dtype=np.int64)
            if r == pp - 1:
                nxt[end] = np.maximum(layer[end - move], cost).min()
            elif r == 0:
                nxt[shift + move] = cost
            else:
                band = codes[(held >= max(least[0] - least[r + 1], n - most[r + 1]))
                             & (held <= min(most[0] - most[r + 1], n - least[r + 1]))]
                reached = np.full(len(band), inf, dtype=np.int64)
                step = max(1, CHUNK_CELLS // max(1, len(band)))
                for i in range(0, len(move), step):
                    if self.cuts.late():
                        raise OutOfBudget
                    came = layer[band[None, :] - move[i:i + step, None]]
                    np.minimum(reached, np.maximum(came, cost[i:i + step, None]).min(axis=0), out=reached)
                nxt[band] = reached
            layer = nxt
        value = int(layer[end])
        if value >= inf:
            return None
        return value, self._traces(value, layers, [m[:2] for m in moves])

    def _placed(self, r: int, moves: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """Rank r's moves (_moves' arrays) less the counts its virtual stages' places never give it (_rank_sums)."""
        keep = _rank_held(*self.key, self.cuts.least, self.cuts.pp, r, self.size)[moves[0]]
        return tuple(x[keep] for x in moves)

    def within(self, slowest_us: int, cap_mb: int, minimise_time: bool,
               most: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Every relaxed cut with each rank within both bounds and holding counts its virtual stages' places
        allow (_placed), when there are at most `most`: the ranks' vectors as codes (cuts × ranks) and the
        value each cut takes (its largest rank time, or peak memory); None when there are more, or when
        counting them would read more than ORDERED_CELLS cells; OutOfBudget past the deadline. The ways to
        reach each running total are counted forward (capped past `most`), then the cuts are read back from
        the model's totals."""
        states, codes, size = self._states()
        shift, end = int((self.total + 1) @ self.place), int((2 * self.total + 1) @ self.place)
        pp = self.cuts.pp
        moves = [self._placed(r, self._moves(r, slowest_us, cap_mb, minimise_time))[:2] for r in range(pp)]
        if any(not len(m[0]) for m in moves):
            return np.zeros((0, pp), dtype=np.int64), np.zeros(0, dtype=np.int64)
        if sum(len(move) for move, _ in moves[:-1]) * len(codes) > ORDERED_CELLS:
            return None
        ways = [np.zeros(size, dtype=np.int64)]
        ways[0][shift] = 1
        for r, (move, _) in enumerate(moves):
            at = np.array([end]) if r == pp - 1 else codes
            reached = np.zeros(len(at), dtype=np.int64)
            step = max(1, CHUNK_CELLS // max(1, len(at)))
            for i in range(0, len(move), step):
                if self.cuts.late():
                    raise OutOfBudget
                reached += ways[r][at[None, :] - move[i:i + step, None]].sum(axis=0)
                np.minimum(reached, most + 1, out=reached)
            layer = np.zeros(size, dtype=np.int64)
            layer[at] = reached
            ways.append(layer)
        if ways[pp][end] > most:
            return None
        held = np.zeros((1, 0), dtype=np.int64)
        value = np.zeros(1, dtype=np.int64)
        at = np.array([end])
        for r in range(pp - 1, -1, -1):
            move, cost = moves[r]
            came = at[:, None] - move[None, :]
            path, pick = np.nonzero(ways[r][came] > 0)
            held = np.concatenate([move[pick, None], held[path]], axis=1)
            value = np.maximum(value[path], cost[pick])
            at = came[path, pick]
        return held, value

    def _traces(self, value: int, layers: list[np.ndarray],
                moves: list[tuple[np.ndarray, np.ndarray]]) -> Iterator[list[np.ndarray]]:
        """solve's relaxed cuts of `value`: the one nearest the evenest layout, then the one nearest even
        shares when it differs (_trace)."""
        held_by: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        first = self._trace(value, layers, moves, True, held_by)
        yield first
        second = self._trace(value, layers, moves, False, held_by)
        if not all((a == b).all() for a, b in zip(first, second, strict=True)):
            yield second

    def _trace(self, value: int, layers: list[np.ndarray], moves: list[tuple[np.ndarray, np.ndarray]],
               even: bool, held_by: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
        """The ranks' kind counts of a relaxed cut of `value`, last rank first taken back: each rank takes
        the vector within `value` nearest what it holds in the evenest layout (`even`; the layout found
        then looks like the even one) or nearest its even share of what is left (balanced totals are the
        ones an interleaved layout most often realises). `held_by`: per rank and running total, the codes and
        vectors rank r may take there, shared by the two traces of one solve."""
        at = int((self.total + self.total + 1) @ self.place)
        left = self.total.copy()
        out = []
        for r in range(self.cuts.pp - 1, -1, -1):
            if (r, at) not in held_by:
                move, cost = moves[r]
                taken = move[(cost <= value) & (layers[r][at - move] <= value)]
                held_by[r, at] = (taken, self.decode(taken))
            taken, vectors = held_by[r, at]
            near = self.even[r] if even else left / (r + 1)
            pick = int(np.argmin(np.abs(vectors - near[None, :]).sum(axis=1)))
            out.append(vectors[pick])
            left = left - vectors[pick]
            at -= int(taken[pick])
        return out[::-1]

    def _count_ranges(self, slowest_us: int, cap_mb: int, minimise_time: bool) -> _CountRanges | None:
        """One kind group, PP > 1: each rank's block counts within both bounds (what _moves gives it), when they
        are an interval from the least count of its edge's vectors and the objective grows with the count;
        None when they are not (solve's dynamic program answers then)."""
        pp = self.cuts.pp
        if pp < 2:
            return None
        parts = [(0, 1), (1, pp - 1), (pp - 1, pp)]
        low, count, cost = [], [], []
        for a, b in parts:
            if a == b:
                continue
            key = self._priced_key(a, slowest_us, cap_mb)
            codes, _, time, memory = self.priced[key]
            if key not in self.rising:
                self.rising[key] = self._rising(codes, time[a:b], memory[a:b])
            if not self.rising[key]:
                return None
            ok = (time[a:b] <= slowest_us) & (memory[a:b] <= cap_mb)
            low.extend([int(codes[0]) if len(codes) else 0] * (b - a))
            count.append(ok.sum(axis=1))
            cost.append(np.where(ok, time[a:b] if minimise_time else memory[a:b], np.iinfo(np.int64).max))
        width = max(x.shape[1] for x in cost)
        if any(x.shape[1] < width for x in cost):
            cost = [np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=np.iinfo(np.int64).max)
                    for x in cost]
        return _CountRanges(np.array(low, dtype=np.int64), np.concatenate(count), np.concatenate(cost))

    @staticmethod
    def _rising(codes: np.ndarray, time: np.ndarray, memory: np.ndarray) -> bool:
        """Whether priced vectors of one group are consecutive counts whose time and memory never fall (so the
        counts a rank holds within any bounds are a prefix of them)."""
        if len(codes) and codes[-1] - codes[0] != len(codes) - 1:
            return False
        return bool((np.diff(time, axis=1) >= 0).all() and (np.diff(memory, axis=1) >= 0).all())

    def _solve_counts(self, ranges: _CountRanges) -> tuple[int, Iterator[list[np.ndarray]]] | None:
        """solve with one kind group over interval counts: the least value within which the ranks' counts reach
        the model's blocks. Rank r holds up to low_r − 1 + (its counts' objectives within v) blocks, so the
        value is the largest of every rank's least objective (each must hold some count) and the k-th least
        objective of all, k = n − Σ (low_r − 1); the traces are _trace's (_count_trace)."""
        n = self.cuts.n
        low, counts, cost = ranges
        if not counts.all() or int(low.sum()) > n or int((low + counts - 1).sum()) < n:
            return None
        k = n - int(low.sum()) + len(low)
        flat = cost.ravel()
        value = max(int(cost[:, 0].max()), int(np.partition(flat, k - 1)[k - 1]))
        top = low + (cost <= value).sum(axis=1) - 1
        return value, self._count_traces(low, top)

    def _count_traces(self, low: np.ndarray, top: np.ndarray) -> Iterator[list[np.ndarray]]:
        """_traces over interval counts low…top per rank: the trace nearest the evenest layout, then the one
        nearest even shares when it differs."""
        first = self._count_trace(low, top, True)
        yield [np.array([x], dtype=np.int64) for x in first]
        second = self._count_trace(low, top, False)
        if first != second:
            yield [np.array([x], dtype=np.int64) for x in second]

    def _count_trace(self, low: np.ndarray, top: np.ndarray, even: bool) -> list[int]:
        """_trace over interval counts: rank r, last first, takes the count nearest its target among those
        its range allows whose rest the ranks before can hold (between their least and largest counts);
        the lower of two equally near."""
        before_low = np.concatenate([[0], np.cumsum(low)]).tolist()
        before_top = np.concatenate([[0], np.cumsum(top)]).tolist()
        at, left = self.cuts.n, int(self.total[0])
        out = []
        for r in range(self.cuts.pp - 1, -1, -1):
            a, b = max(int(low[r]), at - before_top[r]), min(int(top[r]), at - before_low[r])
            near = int(self.even[r, 0]) if even else left / (r + 1)
            if near <= a:
                pick = a
            elif near >= b:
                pick = b
            else:
                floor = math.floor(near)
                pick = floor if near - floor <= floor + 1 - near else floor + 1
            out.append(pick)
            left -= pick
            at -= pick
        return out[::-1]

    def fastest_us(self, cap_mb: int, slowest_us: int) -> int | None:
        """A lower bound on the slowest rank's time of any cut within `cap_mb` and `slowest_us` (OutOfBudget past
        the deadline, as solve)."""
        found = self.solve(slowest_us, cap_mb, True)
        return None if found is None else found[0]

    def leanest_mb(self, slowest_us: int, cap_mb: int) -> int | None:
        """A lower bound on the peak memory of any cut within `slowest_us` and `cap_mb` (OutOfBudget past the
        deadline, as solve)."""
        found = self.solve(slowest_us, cap_mb, False)
        return None if found is None else found[0]


Piece = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""One chunk length over every start block: time (µs), static and activation memory (MB), kind bits."""


def _two_chunk_pieces(cuts: InterleavedCuts, slowest_us: int, cap_mb: int) -> list[Piece]:
    """The chunks of 0, 1, 2, ... blocks over every start (the list's index is the length), up to the first
    length no rank can hold alone within `slowest_us` and `cap_mb` (longer ones cannot fit either: costs grow
    with length)."""
    n, pp, b = cuts.n, cuts.pp, cuts.b
    size = n + 1
    tm, st, ac = (np.array(x, dtype=np.int64) for x in (b.time, b.static, b.act))
    bits = np.array(b.bit, dtype=np.int64)
    pieces: list[Piece] = []
    for length in range(min(n, n - cuts.least_before[-1] + 1) + 1):
        s = np.arange(0, size - length)
        mask = np.zeros(len(s), dtype=np.int64)
        for i in range(length):
            mask |= bits[s + i]
        piece = (tm[s + length] - tm[s], st[s + length] - st[s], ac[s + length] - ac[s], mask)
        if not any(cuts.fits_any(r, *piece, slowest_us, cap_mb) for r in range(pp)):
            break
        pieces.append(piece)
    return pieces


def _round_one_starts(cuts: InterleavedCuts) -> range:
    """VPP 2: the blocks round 1 may start at (each round holds at least its stages' least)."""
    return range(cuts.least_before[cuts.pp], cuts.n - (cuts.least_before[-1] - cuts.least_before[cuts.pp]) + 1)


def _pair_costs(cuts: InterleavedCuts, r: int, peak_of: np.ndarray, first: Piece,
                second: Piece) -> tuple[np.ndarray, np.ndarray]:
    """Time (µs) and memory (MB) of rank `r` holding a round-0 chunk of `first` and a round-1 chunk of
    `second`, for every pair of their starts (RowCosts.stage_time_us / stage_memory in bulk)."""
    c = cuts.c
    t0, s0, a0, m0 = first
    t1, s1, a1, m1 = second
    frac = c.inflight[r]
    time = c.edge_time_us[r] + t0[:, None] + t1[None, :]
    held = c.edge_activation[r] + a0[:, None] + a1[None, :]
    mask = m0[:, None] | m1[None, :]
    moe = ((mask & cuts.moe_bits) != 0) | c.edge_moe[r]
    memory = (c.edge_static[r] + s0[:, None] + s1[None, :] + -(-(held * frac.numerator) // frac.denominator)
              + np.maximum(peak_of[mask], c.edge_peak[r]) + np.where(moe, c.dispatch_mb, 0) + c.workspace_mb)
    return time, memory


Window = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
"""The [lo, hi) range of each state coordinate (round-1 start, round-0 end, round-1 end) any state reaches."""
Move = tuple[tuple[slice, ...], tuple[slice, ...], np.ndarray, np.ndarray, np.ndarray]
"""(source states, destination states, which chunk pairs are within the bounds, their time µs, memory MB)."""


def _live_window(reached: np.ndarray) -> Window | None:
    """The bounding box of the reached two-chunk states; None when no state is reached."""
    live = [np.flatnonzero(reached.any(axis=tuple(x for x in range(3) if x != d))) for d in range(3)]
    if not all(len(x) for x in live):
        return None
    (p_lo, p_hi), (lo0, hi0), (lo1, hi1) = ((int(x[0]), int(x[-1]) + 1) for x in live)
    return (p_lo, p_hi), (lo0, hi0), (lo1, hi1)


def _rank_moves(cuts: InterleavedCuts, r: int, pieces: list[Piece], peak_of: np.ndarray, window: Window,
                slowest_us: int, cap_mb: int) -> Iterator[Move]:
    """Every way rank `r` extends the states in `window` by a round-0 and a round-1 chunk, for the chunk
    lengths where some pair is within `slowest_us` and `cap_mb`: the reachability and the least-value
    passes differ only in what they carry along a move."""
    size = cuts.n + 1
    (p_lo, p_hi), (lo0, hi0), (lo1, hi1) = window
    for l0 in range(cuts.least[r], len(pieces)):
        first = pieces[l0]
        for l1 in range(cuts.least[r + cuts.pp], len(pieces)):
            second = pieces[l1]
            h0, h1 = min(hi0, size - l0), min(hi1, size - l1)
            if h0 <= lo0 or h1 <= lo1:
                continue
            time, memory = _pair_costs(cuts, r, peak_of, tuple(x[lo0:h0] for x in first),
                                       tuple(x[lo1:h1] for x in second))
            ok = (time <= slowest_us) & (memory <= cap_mb)
            if ok.any():
                yield ((slice(p_lo, p_hi), slice(lo0, h0), slice(lo1, h1)),
                       (slice(p_lo, p_hi), slice(lo0 + l0, h0 + l0), slice(lo1 + l1, h1 + l1)), ok, time, memory)


def two_chunk_cut(cuts: InterleavedCuts, slowest_us: int, cap_mb: int) -> tuple[int, ...] | None:
    """VPP 2, exactly: a cut with every rank within `slowest_us` and `cap_mb`, or None when none exists.
    Ranks are taken in order; the state is (where round 1 starts, where the rank's round-0 piece ends,
    where its round-1 piece ends), so a rank's two pieces are priced together; pieces longer than any
    rank can hold alone are never tried."""
    n, pp = cuts.n, cuts.pp
    size = n + 1
    pieces = _two_chunk_pieces(cuts, slowest_us, cap_mb)
    longest = len(pieces) - 1
    peak_of = np.array(cuts.peak_of, dtype=np.int64)
    start = np.zeros((size, size, size), dtype=bool)
    for p1 in _round_one_starts(cuts):
        start[p1, 0, p1] = True
    reach = [start]
    below = np.arange(size)[None, :, None] <= np.arange(size)[:, None, None]
    for r in range(pp):
        if cuts.late():
            raise OutOfBudget
        prev, nxt = reach[-1], np.zeros((size, size, size), dtype=bool)
        window = _live_window(prev)
        if window is None:
            return None
        for src, dst, ok, _, _ in _rank_moves(cuts, r, pieces, peak_of, window, slowest_us, cap_mb):
            nxt[dst] |= prev[src] & ok[None]
        nxt &= below
        reach.append(nxt)
    ends = [p1 for p1 in range(size) if reach[-1][p1, p1, n]]
    if not ends:
        return None
    p1, e0, e1 = ends[0], ends[0], n
    firsts, seconds = [], []
    for r in range(pp - 1, -1, -1):
        prev = reach[r]
        for l0 in range(cuts.least[r], min(longest, e0) + 1):
            l1 = next((l1 for l1 in range(cuts.least[r + pp], min(longest, e1) + 1) if prev[p1, e0 - l0, e1 - l1]
                       and cuts.fits_pair(r, e0 - l0, e0, e1 - l1, e1, slowest_us, cap_mb)), None)
            if l1 is not None:
                break
        firsts.append(l0)
        seconds.append(l1)
        e0, e1 = e0 - l0, e1 - l1
    return tuple(reversed(firsts)) + tuple(reversed(seconds))


def two_chunk_least(cuts: InterleavedCuts, slowest_us: int, cap_mb: int,
                    minimise_time: bool) -> tuple[int, tuple[int, ...]] | None:
    """VPP 2, exactly: the least slowest-rank time (µs) or, with `minimise_time` False, the least peak
    rank memory (MB) over every cut with each rank within `slowest_us` and `cap_mb`, and a cut that
    has it; None when no cut is within both. two_chunk_cut's dynamic program with the running maximum
    of the objective in each state instead of reachability, so one pass answers what a bisection over
    bounds would ask many times."""
    n, pp = cuts.n, cuts.pp
    size = n + 1
    inf = np.iinfo(np.int64).max
    pieces = _two_chunk_pieces(cuts, slowest_us, cap_mb)
    peak_of = np.array(cuts.peak_of, dtype=np.int64)
    best = np.full((size, size, size), inf, dtype=np.int64)
    for p1 in _round_one_starts(cuts):
        best[p1, 0, p1] = 0
    below = np.arange(size)[None, :, None] <= np.arange(size)[:, None, None]
    layers = [best]
    for r in range(pp):
        if cuts.late():
            raise OutOfBudget
        prev, nxt = best, np.full((size, size, size), inf, dtype=np.int64)
        window = _live_window(prev < inf)
        if window is None:
            return None
        for src, dst, ok, us, mb in _rank_moves(cuts, r, pieces, peak_of, window, slowest_us, cap_mb):
            cost = np.where(ok, us if minimise_time else mb, inf)
            np.minimum(nxt[dst], np.maximum(prev[src], cost[None]), out=nxt[dst])
        best = np.where(below, nxt, inf)
        layers.append(best)
    ends = [int(best[p1, p1, n]) for p1 in range(size)]
    least = min(ends)
    if least >= inf:
        return None
    time_bound, memory_bound = (least, cap_mb) if minimise_time else (slowest_us, least)
    p1 = ends.index(least)
    e0, e1 = p1, n
    firsts, seconds = [], []
    for r in range(pp - 1, -1, -1):
        prev = layers[r]
        step = next((l0, l1) for l0 in range(cuts.least[r], min(len(pieces) - 1, e0) + 1)
                    for l1 in range(cuts.least[r + pp], min(len(pieces) - 1, e1) + 1)
                    if prev[p1, e0 - l0, e1 - l1] <= least
                    and cuts.fits_pair(r, e0 - l0, e0, e1 - l1, e1, time_bound, memory_bound))
        firsts.append(step[0])
        seconds.append(step[1])
        e0, e1 = e0 - step[0], e1 - step[1]
    return least, tuple(reversed(firsts)) + tuple(reversed(seconds))
