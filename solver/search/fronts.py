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

import itertools
from dataclasses import dataclass

import numpy as np

INF = np.iinfo(np.int64).max
STATE_LIMIT = 4096
"""Most (front classes × start classes) combinations a row may have for this program to run; longer lead-ins
or periods leave the row to the relaxation and the branch and bound (interleaved.py)."""
MOVE_LIMIT = 200_000
"""Most (kind counts, end classes) combinations one rank's pieces may form for one entry; past it the
program declines the question (Declined) and the caller falls back."""


class Declined(Exception):
    """The program left the question open: a rank's move table would exceed MOVE_LIMIT, or the search's
    deadline passed."""


def _start_options(h: int, q: int, n: int, pp: int, rounds: int) -> list[list[int]]:
    """For rounds 1 … rounds−1, the classes round j may start at: it starts at least j·PP blocks in and leaves
    at least (rounds − j)·PP."""
    def of(p: int) -> int:
        return p if p < h else h + (p - h) % q

    return [sorted({of(p) for p in range(j * pp, n - (rounds - j) * pp + 1)}) for j in range(1, rounds)]


def states(h: int, q: int, n: int, pp: int, rounds: int) -> int:
    """An upper bound on the (front classes, start classes) combinations of the program: round 0's front
    takes any class, a later round's any class its start can reach."""
    size = h + q
    for options in _start_options(h, q, n, pp, rounds):
        size *= len(options) * (h + q if options and options[0] < h else q)
    return size


def period(seq: tuple[int, ...], pp: int, rounds: int) -> tuple[int, int]:
    """(h, q): the lead-in length and period with seq[i] == seq[i + q] for every i >= h, chosen for the fewest
    program states."""
    n = len(seq)
    best: tuple[int, int, int] | None = None
    for q in range(1, n + 1):
        h = n - q
        while h > 0 and seq[h - 1] == seq[h - 1 + q]:
            h -= 1
        cost = states(h, q, n, pp, rounds)
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


def classes(seq: tuple[int, ...], groups: int, pp: int, rounds: int) -> Classes:
    """The position classes of `seq` (group index per block) and their piece tables."""
    n = len(seq)
    h, q = period(seq, pp, rounds)
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


class FrontProgram:
    """The exact interleaved cut program of one row (InterleavedCuts supplies its costs and geometry)."""

    def __init__(self, cuts, groups: np.ndarray) -> None:  # noqa: ANN001 - InterleavedCuts (no cycle)
        self.cuts = cuts
        self.pp, self.vpp, self.n = cuts.pp, cuts.vpp, cuts.n
        self.relaxed = cuts.relaxed
        self.cl = classes(tuple(int(g) for g in groups), len(self.relaxed.groups), self.pp, self.vpp)
        self.starts = list(itertools.product(*_start_options(self.cl.h, self.cl.q, self.n, self.pp, self.vpp)))
        self.size = states(self.cl.h, self.cl.q, self.n, self.pp, self.vpp)
        self.tables: dict[tuple[int, ...], _Pieces] = {}

    @property
    def usable(self) -> bool:
        """Whether the row's state space is small enough for this program."""
        return self.size <= STATE_LIMIT

    def _pieces(self, entry: tuple[int, ...], slowest_us: int, cap_mb: int) -> _Pieces:
        """Every way one rank takes a piece in each round from fronts at classes `entry` that some rank could
        hold within both bounds, one per (kind counts, end classes); any looser bounds' table serves (costs
        grow with every block, so it holds these), filtered when asked."""
        known = self.tables.get(entry)
        if known is not None and known.slowest_us >= slowest_us and known.cap_mb >= cap_mb:
            return known
        cl, v, pp = self.cl, self.vpp, self.pp
        longest = self.n - pp * v + v
        groups = cl.content.shape[2]
        span = np.arange(1, self.n - pp * v + 2)
        vec = np.zeros((1, groups), dtype=np.int64)
        ends = np.zeros((1, 0), dtype=np.int64)
        lengths = np.zeros((1, 0), dtype=np.int64)
        for j in range(v):
            add, out = cl.content[entry[j], span], cl.exit[entry[j], span]
            vec = (vec[:, None, :] + add[None, :, :]).reshape(-1, groups)
            ends = np.concatenate([np.repeat(ends, len(span), axis=0), np.tile(out, len(ends))[:, None]], axis=1)
            lengths = np.concatenate([np.repeat(lengths, len(span), axis=0), np.tile(span, len(lengths))[:, None]],
                                     axis=1)
            time, memory = self._all_costs(vec)
            keep = (vec.sum(axis=1) <= longest) & ((time <= slowest_us) & (memory <= cap_mb)).any(axis=0)
            vec, ends, lengths = vec[keep], ends[keep], lengths[keep]
            distinct = np.unique(np.concatenate([vec, ends], axis=1), axis=0, return_index=True)[1]
            vec, ends, lengths = vec[distinct], ends[distinct], lengths[distinct]
            if len(vec) > MOVE_LIMIT:
                raise Declined
        code = ends @ (self.cl.h + self.cl.q) ** np.arange(v, dtype=np.int64)
        time, memory = self._all_costs(vec)
        table = _Pieces(slowest_us, cap_mb, ends, code, vec.sum(axis=1), lengths, time, memory)
        self.tables[entry] = table
        return table

    def _all_costs(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(time µs, memory MB) of every rank (rows) holding each of `vectors` (columns)."""
        return self.relaxed.costs(vectors)

    def _moves(self, r: int, entry: tuple[int, ...], slowest_us: int, cap_mb: int,
               minimise_time: bool) -> dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]:
        """Rank r's pieces from fronts at classes `entry`, within both bounds: per end-class tuple, the least
        objective per total length (INF where none) and the piece lengths that have it."""
        t = self._pieces(entry, slowest_us, cap_mb)
        ok = np.flatnonzero((t.time[r] <= slowest_us) & (t.memory[r] <= cap_mb))
        cost = (t.time[r] if minimise_time else t.memory[r])[ok]
        key = t.code[ok] * (self.n + 1) + t.total[ok]
        order = np.lexsort((cost, key))
        chosen = ok[order[np.unique(key[order], return_index=True)[1]]]
        out: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        for code in np.unique(t.code[chosen]).tolist():
            mine = chosen[t.code[chosen] == code]
            least = np.full(self.n + 1, INF, dtype=np.int64)
            pick = np.zeros((self.n + 1, self.vpp), dtype=np.int64)
            least[t.total[mine]] = (t.time[r] if minimise_time else t.memory[r])[mine]
            pick[t.total[mine]] = t.lengths[mine]
            out[tuple(t.ends[mine[0]].tolist())] = (least, pick)
        return out

    def least(self, slowest_us: int, cap_mb: int, minimise_time: bool) -> tuple[int, tuple[int, ...]] | None:
        """The least slowest-rank time (µs; or with `minimise_time` False the least peak rank memory, MB) over
        every cut with each rank within `slowest_us` and `cap_mb`, and a cut that has it; None when no cut is
        within both. Raises Declined past the deadline or when a rank's moves exceed MOVE_LIMIT."""
        v, n, cl = self.vpp, self.n, self.cl
        gn = len(self.starts)
        layer: dict[tuple[int, ...], np.ndarray] = {}
        for gi, g in enumerate(self.starts):
            front = (cl.of(0), *g)
            layer.setdefault(front, np.full((gn, n + 1), INF, dtype=np.int64))[gi, 0] = 0
        layers, tables = [], []
        index = np.arange(n + 1)
        for r in range(self.pp):
            if self.cuts.late():
                raise Declined
            nxt: dict[tuple[int, ...], np.ndarray] = {}
            moves = {}
            for front, values in layer.items():
                if (values >= INF).all():
                    continue
                moves[front] = self._moves(r, front, slowest_us, cap_mb, minimise_time)
                for end, (cost, _) in moves[front].items():
                    lens = np.flatnonzero(cost < INF)
                    src = index[:, None] - lens[None, :]
                    came = np.where(src[None] >= 0, values[:, np.maximum(src, 0)], INF)
                    best = np.maximum(came, cost[lens][None, None, :]).min(axis=2)
                    target = nxt.setdefault(end, np.full((gn, n + 1), INF, dtype=np.int64))
                    np.minimum(target, best, out=target)
            layers.append(layer)
            tables.append(moves)
            layer = nxt
        closing = [(front, gi) for front in layer for gi, g in enumerate(self.starts)
                   if all(front[j] == g[j] for j in range(v - 1))]
        finals = [int(layer[f][gi, n]) for f, gi in closing]
        if not finals or min(finals) >= INF:
            return None
        value = min(finals)
        front, gi = closing[finals.index(value)]
        return value, self._trace(value, front, gi, layers, tables)

    def _trace(self, value: int, front: tuple[int, ...], gi: int, layers: list, tables: list) -> tuple[int, ...]:
        """A cut of `value`: each rank, last first, takes a move within `value` from a state within it."""
        placed, pieces = self.n, []
        for r in range(self.pp - 1, -1, -1):
            step = next((prev, int(length), pick[length]) for prev, ends in tables[r].items()
                        for length, (cost, pick) in ((x, ends[front]) for x in range(1, placed + 1) if front in ends)
                        if cost[length] <= value and layers[r][prev][gi, placed - length] <= value)
            front, length, lengths = step
            pieces.append(lengths)
            placed -= length
        pieces.reverse()
        return tuple(int(pieces[k % self.pp][k // self.pp]) for k in range(self.pp * self.vpp))
