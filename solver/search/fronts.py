"""Exact interleaved cuts of block sequences that repeat after a short lead-in (DeepSeek-V3: three dense
blocks, then MoE; DeepSeek-V4: two hash-routed blocks and one more, then two attention kinds alternating):
a dynamic program over the pipeline ranks whose state is where each round's front stands, by class.

Virtual stage k = r + j·PP is rank r's piece in round j; round j covers blocks p_j … p_{j+1} − 1 and its
pieces run in rank order. With kinds repeating with period q from block h on, a piece's kind counts
depend only on its length and on the class of its first block (the block itself before h, its residue
mod q from h on), and so does the class where it ends. Taking the ranks in order, the state is: blocks
placed so far, the class of each round's front, and the class each round j ≥ 1 starts at (guessed at
the start, checked where round j − 1 ends). A rank's time and memory depend only on its kind counts, so
the least largest rank cost over paths reaching a state is all the ranks after it need: the program is
exact, every cut it returns is a real one, and its value is the least over every cut, not a bound.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parasol.problems.empty_stages import least_rank_blocks

INF = np.iinfo(np.int64).max
STATE_LIMIT = 4096
"""Most (front classes × start classes) combinations a row may have for this program to run; longer lead-ins
or periods leave the row to the relaxation and the branch and bound (interleaved.py)."""
MOVE_LIMIT = 200_000
"""Most (kind counts, end classes) combinations one rank's pieces may form for one entry (and 16 times it
before a round's are merged); past it the program declines the question (Declined) and the caller falls
back."""
TABLES_KEPT = 4
"""Piece tables kept per entry (the latest bounds'); a question takes the smallest that holds its bounds."""
CELL_LIMIT = 1 << 23
"""Most cells (moves × blocks placed × start classes) one rank's step may read; past it the program declines."""


class Declined(Exception):
    """The program left the question open: a rank's move table would exceed MOVE_LIMIT, or the search's
    deadline passed."""


def _start_options(h: int, q: int, n: int, per_round: int, rounds: int) -> list[list[int]]:
    """For rounds 1 … rounds−1, the classes round j may start at: it starts at least j·per_round blocks in and
    leaves at least (rounds − j)·per_round (per_round: the fewest blocks a round holds, PP on a closed row, PP − 2
    where the edge ranks' stages may be empty)."""
    def of(p: int) -> int:
        return p if p < h else h + (p - h) % q

    return [sorted({of(p) for p in range(j * per_round, n - (rounds - j) * per_round + 1)}) for j in range(1, rounds)]


def states(h: int, q: int, n: int, per_round: int, rounds: int) -> int:
    """An upper bound on the (front classes, start classes) combinations of the program: round 0's front
    takes any class, a later round's any class its start can reach."""
    size = h + q
    for options in _start_options(h, q, n, per_round, rounds):
        size *= len(options) * (h + q if options and options[0] < h else q)
    return size


@functools.lru_cache(maxsize=256)
def period(seq: tuple[int, ...], per_round: int, rounds: int) -> tuple[int, int]:
    """(h, q): the lead-in length and period with seq[i] == seq[i + q] for every i >= h, chosen for the fewest
    program states (at least h + q, so longer periods cannot beat a count already found)."""
    n = len(seq)
    best: tuple[int, int, int] | None = None
    for q in range(1, n + 1):
        if best is not None and q > best[0]:
            break
        h = n - q
        while h > 0 and seq[h - 1] == seq[h - 1 + q]:
            h -= 1
        cost = states(h, q, n, per_round, rounds)
        if best is None or cost < best[0]:
            best = (cost, h, q)
    assert best is not None
    return best[1], best[2]


@dataclass(frozen=True)
class Classes:
    """Position classes of one block sequence: the lead-in's blocks one by one, then residues mod q."""

    h: int
    q: int
    content: np.ndarray
    """content[c, L]: blocks of each group in the L blocks from class c's first position (periodic past n)."""
    exit: np.ndarray
    """exit[c, L]: the class of the block L past class c's first position."""

    def of(self, position: int) -> int:
        """The class of a block position."""
        return position if position < self.h else self.h + (position - self.h) % self.q


def classes(seq: tuple[int, ...], groups: int, per_round: int, rounds: int) -> Classes:
    """The position classes of `seq` (group index per block) and their piece tables, for rounds of at least
    `per_round` blocks."""
    return classes_of(seq, groups, *period(seq, per_round, rounds))


def classes_of(seq: tuple[int, ...], groups: int, h: int, q: int) -> Classes:
    """The position classes of `seq` under lead-in h and period q (seq[i] == seq[i + q] for i >= h)."""
    n = len(seq)
    ext = list(seq)
    while len(ext) < 2 * n + h + q:
        ext.append(ext[len(ext) - q])
    prefix = np.zeros((len(ext) + 1, groups), dtype=np.int64)
    for i, g in enumerate(ext):
        prefix[i + 1] = prefix[i]
        prefix[i + 1, g] += 1
    count = h + q
    lengths = np.arange(n + 1)
    content = np.stack([prefix[c + lengths] - prefix[c] for c in range(count)])
    ends = np.arange(count)[:, None] + lengths[None, :]
    exit_ = np.where(ends < h, ends, h + (ends - h) % q)
    return Classes(h, q, content, exit_)


@dataclass(frozen=True)
class _Pieces:
    """One entry's rank pieces (FrontProgram._pieces), within the bounds they were built for."""

    slowest_us: int
    cap_mb: int
    ends: np.ndarray
    code: np.ndarray
    total: np.ndarray
    lengths: np.ndarray
    time: np.ndarray
    memory: np.ndarray
    """Per rank (rows) and piece set (columns), time µs and memory MB."""
    spread: np.ndarray
    """Per piece set, Σ |length · stages − n| over its pieces: how far from even it is."""
    empty: np.ndarray
    """Per piece set, whether one of its pieces holds no block (only an edge rank of an open row takes it)."""


@dataclass(frozen=True)
class Question:
    """One pass of the program: both bounds, which objective, and (for the evenness pass) the objective's
    least value found, within which the evenest cut is sought."""

    slowest_us: int
    cap_mb: int
    minimise_time: bool
    within: int | None


@dataclass(frozen=True)
class _Moves:
    """One rank's moves: from which front (index into the layer's keys), to which end fronts (code), how many
    blocks, at what objective, with which piece lengths (one per round)."""

    src: np.ndarray
    end: np.ndarray
    total: np.ndarray
    cost: np.ndarray
    lengths: np.ndarray


def least_then_evenest(answer: Callable[[Question], tuple[int, tuple[int, ...]] | None], slowest_us: int,
                       cap_mb: int, minimise_time: bool, alike: Callable[[int], int] | None,
                       value: Callable[[Question], int | None] | None = None) -> tuple[int, tuple[int, ...]] | None:
    """The exact programs' `least` contract on one program's `answer` to a Question: the least value and a
    cut with it, then (with `alike`) the evenest cut whose objective is at most `alike(least)`. With `value`
    (answer's value alone, without building its cut) the least is asked of it when the evenest cut follows."""
    question = Question(slowest_us, cap_mb, minimise_time, None)
    if alike is not None and value is not None:
        least = value(question)
        if least is None:
            return None
    else:
        found = answer(question)
        if found is None or alike is None:
            return found
        least = found[0]
    evenest = answer(Question(slowest_us, cap_mb, minimise_time, alike(least)))
    assert evenest is not None
    return least, evenest[1]


class FrontProgram:
    """The exact interleaved cut program of one row (InterleavedCuts supplies its costs and geometry)."""

    def __init__(self, cuts, groups: np.ndarray) -> None:  # noqa: ANN001 - InterleavedCuts (no cycle)
        self.cuts = cuts
        self.pp, self.vpp, self.n = cuts.pp, cuts.vpp, cuts.n
        self.relaxed = cuts.relaxed
        self.per_round = cuts.least_before[self.pp]
        """The fewest blocks one round holds (every stage's least, empty_stages.py)."""
        self.rank_least = np.broadcast_to(least_rank_blocks(self.vpp, self.pp), self.pp).tolist()
        """The fewest blocks each rank holds."""
        self.longest = self.n - cuts.least_before[-1] + max(self.rank_least)
        """The most blocks one rank may hold (the others holding their least)."""
        self.cl = classes(tuple(int(g) for g in groups), len(self.relaxed.groups), self.per_round, self.vpp)
        self.size = states(self.cl.h, self.cl.q, self.n, self.per_round, self.vpp)
        self.tables: dict[tuple[int, ...], list[_Pieces]] = {}
        self.radix = (self.cl.h + self.cl.q) ** np.arange(self.vpp, dtype=np.int64)

    @functools.cached_property
    def starts(self) -> list[tuple[int, ...]]:
        """Every combination of start classes of rounds 1 … VPP−1 (_start_options), listed when a question is
        first asked: only of a usable program, whose state bound (size) their count stays within; a row of
        many block kinds and rounds (Nemotron-3 Ultra) would list billions."""
        return list(itertools.product(*_start_options(self.cl.h, self.cl.q, self.n, self.per_round, self.vpp)))

    @property
    def usable(self) -> bool:
        """Whether the row's state space is small enough for this program."""
        return self.size <= STATE_LIMIT

    def _pieces(self, entry: tuple[int, ...], slowest_us: int, cap_mb: int) -> _Pieces:
        """Every way one rank takes a piece in each round from fronts at classes `entry` that some rank could
        hold within both bounds, one per (kind counts, end classes), the evenest; any looser bounds' table
        serves (costs grow with every block, so it holds these), filtered when asked, and a new one is built
        for the loosest bounds asked so far (questions mostly tighten)."""
        known = [t for t in self.tables.get(entry, []) if t.slowest_us >= slowest_us and t.cap_mb >= cap_mb]
        if known:
            return min(known, key=lambda t: len(t.total))
        slowest_us = max([slowest_us, *(t.slowest_us for t in self.tables.get(entry, []))])
        cap_mb = max([cap_mb, *(t.cap_mb for t in self.tables.get(entry, []))])
        cl, v, pp, longest = self.cl, self.vpp, self.pp, self.longest
        groups = cl.content.shape[2]
        span = np.arange(0 if self.cuts.open else 1, min(self.n, self.n - self.cuts.least_before[-1] + 1) + 1)
        vec = np.zeros((1, groups), dtype=np.int64)
        ends = np.zeros((1, 0), dtype=np.int64)
        lengths = np.zeros((1, 0), dtype=np.int64)
        for j in range(v):
            if len(vec) * len(span) > MOVE_LIMIT * 16:
                raise Declined
            add, out = cl.content[entry[j], span], cl.exit[entry[j], span]
            vec = (vec[:, None, :] + add[None, :, :]).reshape(-1, groups)
            ends = np.concatenate([np.repeat(ends, len(span), axis=0), np.tile(out, len(ends))[:, None]], axis=1)
            lengths = np.concatenate([np.repeat(lengths, len(span), axis=0), np.tile(span, len(lengths))[:, None]],
                                     axis=1)
            time, memory = self.relaxed.costs(vec)
            keep = (vec.sum(axis=1) <= longest) & ((time <= slowest_us) & (memory <= cap_mb)).any(axis=0)
            vec, ends, lengths = vec[keep], ends[keep], lengths[keep]
            evenest = np.argsort(np.abs(lengths * (pp * v) - self.n).sum(axis=1), kind="stable")
            vec, ends, lengths = vec[evenest], ends[evenest], lengths[evenest]
            empty = (lengths == 0).any(axis=1, keepdims=True)
            distinct = np.unique(np.concatenate([vec, ends, empty], axis=1), axis=0, return_index=True)[1]
            vec, ends, lengths = vec[distinct], ends[distinct], lengths[distinct]
            if len(vec) > MOVE_LIMIT:
                raise Declined
        code = ends @ self.radix
        time, memory = self.relaxed.costs(vec)
        spread = np.abs(lengths * (pp * v) - self.n).sum(axis=1)
        table = _Pieces(slowest_us, cap_mb, ends, code, vec.sum(axis=1), lengths, time, memory, spread,
                        (lengths == 0).any(axis=1))
        self.tables[entry] = [*self.tables.get(entry, [])[-(TABLES_KEPT - 1):], table]
        return table

    def _code(self, fronts: tuple[int, ...]) -> int:
        """The code of a tuple of front classes (mixed radix h + q)."""
        return int(np.array(fronts, dtype=np.int64) @ self.radix)

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        """Front-class tuples (rows) of codes."""
        return (codes[:, None] // self.radix[None, :]) % (self.cl.h + self.cl.q)

    def _moves(self, r: int, keys: np.ndarray, question: Question) -> _Moves:
        """Rank r's moves from the fronts coded `keys` within the question's bounds: for each (front, end
        fronts, blocks taken), the least score (the objective, or with `within` set the pieces' spread among
        moves whose objective is within it) and the piece lengths that have it."""
        parts = []
        edge = self.rank_least[r] == 0
        for i, entry in enumerate(self._decode(keys).tolist()):
            t = self._pieces(tuple(entry), question.slowest_us, question.cap_mb)
            objective = t.time[r] if question.minimise_time else t.memory[r]
            fit = (t.time[r] <= question.slowest_us) & (t.memory[r] <= question.cap_mb)
            if not edge:
                fit &= ~t.empty
            if question.within is not None:
                fit &= objective <= question.within
            ok = np.flatnonzero(fit)
            if len(ok):
                score = objective[ok] if question.within is None else t.spread[ok]
                parts.append((np.full(len(ok), i), t.code[ok], t.total[ok], score, t.lengths[ok]))
        if not parts:
            return _Moves(*(np.zeros(0, dtype=np.int64) for _ in range(4)), np.zeros((0, self.vpp), dtype=np.int64))
        src, end, total, cost, lengths = (np.concatenate(x) for x in zip(*parts, strict=True))
        group = (src * (int(end.max()) + 1) + end) * (self.n + 1) + total
        order = np.lexsort((cost, group))
        first = order[np.unique(group[order], return_index=True)[1]]
        return _Moves(src[first], end[first], total[first], cost[first], lengths[first])

    def least(self, slowest_us: int, cap_mb: int, minimise_time: bool,
              alike: Callable[[int], int] | None = None) -> tuple[int, tuple[int, ...]] | None:
        """The least slowest-rank time (µs; or with `minimise_time` False the least peak rank memory, MB) over
        every cut with each rank within `slowest_us` and `cap_mb`, and a cut that has it; with `alike`, the
        evenest cut (least total distance of its stages from n / stages blocks) whose objective is at most
        `alike(least)` instead (the caller's rounding: a cut it cannot tell from the least's). None when no
        cut is within both. Raises Declined past the deadline or when a step would read more than CELL_LIMIT
        cells."""
        return least_then_evenest(self._program, slowest_us, cap_mb, minimise_time, alike)

    def _program(self, question: Question) -> tuple[int, tuple[int, ...]] | None:
        """The dynamic program over the ranks: the least largest rank objective (`within` None) or the least
        total spread of moves within `within`, and a cut that has it. A layer holds, per front key, the
        blocks placed (a window lo … lo + width − 1 of them: the ranks after must still find at least VPP
        blocks each and at most what they can hold) and the start classes."""
        v, n, cl, pp = self.vpp, self.n, self.cl, self.pp
        add = question.within is not None
        gn = len(self.starts)
        longest = self.longest
        after = [sum(self.rank_least[r + 1:]) for r in range(pp)]
        first = np.array([self._code((cl.of(0), *g)) for g in self.starts], dtype=np.int64)
        keys = np.unique(first)
        values = np.full((len(keys), 1, gn), INF, dtype=np.int64)
        values[np.searchsorted(keys, first), 0, np.arange(gn)] = 0
        lo = 0
        layers: list[tuple[np.ndarray, np.ndarray, int, _Moves]] = []
        for r in range(pp):
            if self.cuts.late():
                raise Declined
            live = (values < INF).any(axis=(1, 2))
            keys, values = keys[live], values[live]
            moves = self._moves(r, keys, question)
            layers.append((keys, values, lo, moves))
            if not len(moves.src):
                return None
            width = values.shape[1]
            least, most = int(moves.total.min()), int(moves.total.max())
            new_lo = max(lo + least, n - (pp - r - 1) * longest)
            new_hi = min(lo + width - 1 + most, n - after[r])
            if new_hi < new_lo:
                return None
            if len(moves.src) * (new_hi - new_lo + 1) * gn > CELL_LIMIT:
                raise Declined
            spread = most - least
            padded = np.concatenate([np.full((len(keys), spread + new_hi - new_lo + 1, gn), INF, dtype=np.int64),
                                     values, np.full((len(keys), spread + new_hi - new_lo + 1, gn), INF,
                                                     dtype=np.int64)], axis=1)
            at = np.arange(new_lo, new_hi + 1)[None, :] - moves.total[:, None] - lo + spread + new_hi - new_lo + 1
            came = padded[moves.src[:, None], at]
            cost = moves.cost[:, None, None]
            reached = np.where(came < INF, came + cost, INF) if add else np.maximum(came, cost)
            keys, slot = np.unique(moves.end, return_inverse=True)
            order = np.argsort(slot, kind="stable")
            starts = np.flatnonzero(np.concatenate(([True], np.diff(slot[order]) != 0)))
            values = np.minimum.reduceat(reached[order], starts, axis=0)
            lo = new_lo
            held = np.flatnonzero((values < INF).any(axis=(0, 2)))
            if not len(held):
                return None
            values = values[:, held[0]:held[-1] + 1]
            lo += int(held[0])
        if not lo <= n < lo + values.shape[1]:
            return None
        fronts = self._decode(keys)
        starts_ = np.array(self.starts, dtype=np.int64).reshape(gn, v - 1)
        closed = (fronts[:, None, : v - 1] == starts_[None, :, :]).all(axis=2)
        finals = np.where(closed, values[:, n - lo, :], INF)
        value = int(finals.min())
        if value >= INF:
            return None
        key, gi = np.unravel_index(int(np.argmin(finals)), finals.shape)
        return value, self._trace(value, int(keys[key]), int(gi), layers, add)

    def _trace(self, value: int, code: int, gi: int, layers: list, add: bool) -> tuple[int, ...]:
        """A cut of `value`, each rank, last first, taking a move that leaves a state of the value still owed
        (the value itself for a largest objective; less the move's score for a total)."""
        placed, pieces = self.n, []
        for keys, values, lo, moves in reversed(layers):
            at = placed - moves.total - lo
            ok = (moves.end == code) & (at >= 0) & (at < values.shape[1])
            before = np.full(len(ok), INF, dtype=np.int64)
            before[ok] = values[moves.src[ok], at[ok], gi]
            if add:
                ok &= (before < INF) & (before + moves.cost == value)
            else:
                ok &= (before <= value) & (moves.cost <= value)
            t = int(np.flatnonzero(ok)[0])
            pieces.append(moves.lengths[t])
            placed -= int(moves.total[t])
            code = int(keys[moves.src[t]])
            if add:
                value = int(before[t])
        pieces.reverse()
        return tuple(int(pieces[k % self.pp][k // self.pp]) for k in range(self.pp * self.vpp))
