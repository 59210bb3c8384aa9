"""Whether an interleaved cut holds exactly given kind counts on each pipeline rank, decided virtual stage by
virtual stage over every partial layout at once (numpy arrays, not one Python call per partial layout).

A partial layout after stage k is summed up, for what follows, by the block where stage k ends and what each
rank still needs: two partial layouts alike in both have the same completions, so one is kept. The needs of
every rank are packed into one integer per partial layout (_Needs), so a stage's moves copy that integer and
the ranks' suffix codes, not a table of counts per rank and kind, and a piece's end is bounded where it would
take more blocks of a kind than its rank needs (_Needs.stops) instead of being priced and dropped. A state
survives while every rank's need can still be held by its remaining stages (the suffix tables of
interleaved.py: the need as intervals of the blocks ahead, each next one past the least the stages between
hold; fewer intervals on an edge rank, whose stages may be empty). The answer is exact: a layout when some
state reaches the last block after the last stage, None when none does. InterleavedCuts.realise_exactly asks
it once its depth-first search has spent a small budget: the hard questions, mostly proofs that no layout
exists (Nemotron-H 8B's PP 4 VPP 8 rows: about ten times faster than the depth-first search on those).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

STATES_BUDGET = 2_000_000
"""Most states (partial layouts kept, over all stages) one question may keep (about 2 s)."""
MOVE_NUMBERS = 1 << 23
"""Most numbers one stage's moves may hold at once (each move its state, end, packed needs and every rank's
suffix code: PP + 3 numbers; 64 MB)."""
DIGIT_TABLE = 1 << 12
"""Most values of one rank's packed needs whose digits are tabled (_Needs.tables, built per question) rather
than divided out: a rank holding 13 blocks of three kinds has a few hundred."""
MOVES_BUDGET = 8_000_000
"""Most moves kept over all stages to read a layout back (each its state and end as int32: 64 MB)."""


class LayersSpent(Exception):
    """The search passed its budget of states or moves (or the deadline) without an answer."""


class _Needs:
    """What every rank still needs, packed into one integer per partial layout: rank r's count of kind group g
    is digit r·groups + g of a mixed-radix number whose digits run to the targets (radix targets + 1), so
    taking a piece from rank r's need subtracts the piece's packed counts (prefix_code), digit by digit."""

    def __init__(self, targets: np.ndarray, prefix: np.ndarray, place: np.ndarray) -> None:
        pp, groups = targets.shape
        radix = targets + 1
        stride = np.cumprod(np.concatenate([[1], radix.ravel()[:-1]])).astype(np.int64).reshape(pp, groups)
        self.first, self.span = stride[:, 0], radix.prod(axis=1)
        self.inner, self.radix = stride // stride[:, :1], radix
        self.start = int((targets * stride).sum())
        """The packed targets: every rank needing all of its counts."""
        self.start_codes = targets @ place
        self.prefix_code = (prefix @ stride.T).T.copy()
        """Per rank r, the packed counts of the first i blocks as rank r's digits."""
        self.prefix_place = prefix @ place
        self.prefix_kind = prefix.T.copy()
        """Per kind group, how many of the first i blocks are of it."""
        n, most = len(prefix) - 1, int(targets.max(initial=0)) + 1
        self.stops = [np.concatenate([np.flatnonzero(np.diff(prefix[:, g])), np.full(most, n)])
                      for g in range(groups)]
        """Per kind group, the blocks of that group in order, then n: a piece from block s holds at most d
        blocks of group g exactly when it ends at or before stops[g][prefix[s, g] + d]."""
        self.tables = [self._digits(np.arange(span), r) if span <= DIGIT_TABLE else None
                       for r, span in enumerate(self.span.tolist())]
        """Per rank, its needs by its own packed number (None past DIGIT_TABLE: computed then)."""

    def of_rank(self, packed: np.ndarray, r: int) -> np.ndarray:
        """Rank r's needs (partial layouts × kind groups) from the packed needs."""
        own = (packed // self.first[r]) % self.span[r]
        table = self.tables[r]
        return self._digits(own, r) if table is None else table[own]

    def _digits(self, own: np.ndarray, r: int) -> np.ndarray:
        """Rank r's needs from its own packed number (its digits)."""
        return (own[:, None] // self.inner[r]) % self.radix[r]


def layered_layout(prefix: np.ndarray, suffix: list[list[np.ndarray]], place: np.ndarray, least: tuple[int, ...],
                   targets: np.ndarray, late: Callable[[], bool]) -> tuple[int, ...] | None:
    """A layout (blocks per virtual stage, stage k holding at least least[k]) whose rank r holds exactly
    `targets[r]` (kind counts), or None when none has. `prefix[i]`: the kind counts of the first i blocks;
    `suffix[r][j][s]`: the codes (counts @ `place`) rank r's j stages can hold from block s on, as bits (bit c
    is bit c & 7 of byte c >> 3). Raises LayersSpent past the budgets (states, moves) or once `late()`."""
    n, stages = len(prefix) - 1, len(least)
    before = np.concatenate([[0], np.cumsum(least)]).astype(np.int64)
    if float(np.prod((targets + 1).astype(float))) * (n + 1) >= 2.0 ** 62:
        raise LayersSpent
    needs = _Needs(targets.astype(np.int64), prefix, place)
    pos = np.zeros(1, dtype=np.int64)
    packed = np.full(1, needs.start, dtype=np.int64)
    codes = needs.start_codes[:, None].astype(np.int64)
    chosen: list[np.ndarray] = []
    parents: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    kept = moved = 0
    for k in range(stages):
        if late():
            raise LayersSpent
        pick = np.unique(packed * (n + 1) + pos, return_index=True)[1]
        pick = pick[_holdable(pos[pick], codes[:, pick], suffix, k, before, n)]
        chosen.append(pick)
        pos, packed, codes = pos[pick], packed[pick], codes[:, pick]
        kept += len(pos)
        if not len(pos):
            return None
        if kept > STATES_BUDGET:
            raise LayersSpent
        parent, end, packed, codes = _moves(pos, packed, codes, needs, k, least, before, n)
        moved += len(end)
        if moved > MOVES_BUDGET:
            raise LayersSpent
        parents.append(parent.astype(np.int32))
        ends.append(end.astype(np.int32))
        pos = end
    done = np.flatnonzero((pos == n) & (packed == 0))
    if not len(done):
        return None
    return _traced(int(done[0]), chosen, parents, ends)


def _holdable(pos: np.ndarray, rank_codes: np.ndarray, suffix: list[list[np.ndarray]], k: int, before: np.ndarray,
              n: int) -> np.ndarray:
    """Per state before stage k, whether every rank's need (`rank_codes[r]`: its counts @ place) is held by its
    stages from k on over the blocks ahead, the first starting where its next stage can start at the earliest
    (past the least the stages before it hold)."""
    pp, stages = len(suffix), len(before) - 1
    alive = np.ones(len(pos), dtype=bool)
    for q in range(pp):
        ahead = (q - k) % pp
        left = 0 if k + ahead >= stages else (stages - 1 - k - ahead) // pp + 1
        code = rank_codes[q]
        table = suffix[q][left]
        start = np.minimum(pos + int(before[min(k + ahead, stages)] - before[k]), n + 1)
        alive &= ((table.ravel()[start * table.shape[1] + (code >> 3)] >> (code & 7)) & 1).astype(bool)
    return alive


def _moves(pos: np.ndarray, packed: np.ndarray, codes: np.ndarray, needs: _Needs, k: int, least: tuple[int, ...],
           before: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every piece stage k may take from each state: (its state, where it ends, the packed needs after it, the
    ranks' codes after it). The rank's last stage takes exactly what it still needs; an earlier one holds at
    least its least and leaves each of the rank's later stages theirs; no piece holds more of a kind than
    its rank needs."""
    pp, stages = len(codes), len(least)
    r = k % pp
    need = needs.of_rank(packed, r)
    blocks = need.sum(axis=1)
    low = pos + blocks if k + pp >= stages else pos + least[k]
    top = np.minimum(pos + blocks - sum(least[k + pp::pp]), n - int(before[-1] - before[k + 1]))
    for g, stops in enumerate(needs.stops):
        top = np.minimum(top, stops[needs.prefix_kind[g][pos] + need[:, g]])
    count = np.maximum(top - low + 1, 0)
    total = int(count.sum())
    if total * (pp + 3) > MOVE_NUMBERS:
        raise LayersSpent
    parent = np.repeat(np.arange(len(pos)), count)
    end = np.arange(total) + (low - (np.cumsum(count) - count))[parent]
    after = codes[:, parent]
    after[r] = (codes[r] + needs.prefix_place[pos])[parent] - needs.prefix_place[end]
    ahead = needs.prefix_code[r]
    return parent, end, (packed + ahead[pos])[parent] - ahead[end], after


def _traced(last: int, chosen: list[np.ndarray], parents: list[np.ndarray], ends: list[np.ndarray]) -> tuple[int, ...]:
    """The layout of the move `last` of the last stage, read back stage by stage through the states kept."""
    bounds = []
    move = last
    for k in range(len(ends) - 1, -1, -1):
        bounds.append(int(ends[k][move]))
        state = int(parents[k][move])
        move = int(chosen[k][state]) if k else 0
    bounds.append(0)
    bounds.reverse()
    return tuple(b - a for a, b in itertools.pairwise(bounds))
