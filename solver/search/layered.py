"""Whether an interleaved cut holds exactly given kind counts on each pipeline rank, decided virtual stage by
virtual stage over every partial layout at once (numpy arrays, not one Python call per partial layout).

A partial layout after stage k is summed up, for what follows, by the block where stage k ends and what each
rank still needs: two partial layouts alike in both have the same completions, so one is kept. A state
survives while every rank's need can still be held by its remaining stages (the suffix tables of
interleaved.py: the need as intervals of the blocks ahead, each next one past the least the stages between
hold; fewer intervals on an edge rank, whose stages may be empty). The answer is exact: a layout when some state reaches the last block after the last stage, None
when none does. InterleavedCuts.realise_exactly asks it once its depth-first search has spent a small
budget: the hard questions, mostly proofs that no layout exists (Nemotron-H 8B's PP 4 VPP 8 rows: about
ten times faster than the depth-first search on those).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

STATES_BUDGET = 2_000_000
"""Most states (partial layouts kept, over all stages) one question may keep (about 2 s)."""
ROWS_BUDGET = 1 << 23
"""Most numbers (moves × ranks × kind groups) one stage's moves may hold at once (64 MB)."""
MOVES_BUDGET = 8_000_000
"""Most moves kept over all stages to read a layout back (each its state and end as int32: 64 MB)."""


class LayersSpent(Exception):
    """The search passed its budget of states or moves (or the deadline) without an answer."""


def layered_layout(prefix: np.ndarray, suffix: list[list[np.ndarray]], place: np.ndarray, least: tuple[int, ...],
                   targets: np.ndarray, late: Callable[[], bool]) -> tuple[int, ...] | None:
    """A layout (blocks per virtual stage, stage k holding at least least[k]) whose rank r holds exactly
    `targets[r]` (kind counts), or None when none has. `prefix[i]`: the kind counts of the first i blocks;
    `suffix[r][j][s]`: the codes (counts @ `place`) rank r's j stages can hold from block s on, as bits (bit c
    is bit c & 7 of byte c >> 3). Raises LayersSpent past the budgets (states, moves) or once `late()`."""
    n, stages = len(prefix) - 1, len(least)
    before = np.concatenate([[0], np.cumsum(least)]).astype(np.int64)
    radix = (targets + 1).ravel()
    stride = np.cumprod(np.concatenate([[1], radix[:-1]])).astype(np.int64)
    if float(np.prod(radix.astype(float))) * (n + 1) >= 2.0 ** 62:
        raise LayersSpent
    pos = np.zeros(1, dtype=np.int64)
    need = targets[None, :, :].astype(np.int64)
    chosen: list[np.ndarray] = []
    parents: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    kept = moved = 0
    for k in range(stages):
        if late():
            raise LayersSpent
        alive = _holdable(pos, need @ place, suffix, k, before, n)
        key = (need[alive].reshape(int(alive.sum()), len(radix)) @ stride) * (n + 1) + pos[alive]
        _, first = np.unique(key, return_index=True)
        pick = np.flatnonzero(alive)[first]
        chosen.append(pick)
        pos, need = pos[pick], need[pick]
        kept += len(pos)
        if not len(pos):
            return None
        if kept > STATES_BUDGET:
            raise LayersSpent
        parent, end, need = _moves(pos, need, prefix, k, least, before, n)
        moved += len(end)
        if moved > MOVES_BUDGET:
            raise LayersSpent
        parents.append(parent.astype(np.int32))
        ends.append(end.astype(np.int32))
        pos = end
    done = np.flatnonzero((pos == n) & (need == 0).all(axis=(1, 2)))
    if not len(done):
        return None
    return _traced(int(done[0]), chosen, parents, ends)


def _holdable(pos: np.ndarray, codes: np.ndarray, suffix: list[list[np.ndarray]], k: int, before: np.ndarray,
              n: int) -> np.ndarray:
    """Per state before stage k, whether every rank's need (`codes`) is held by its stages from k on over the
    blocks ahead, the first starting where its next stage can start at the earliest (past the least the
    stages before it hold)."""
    pp, stages = len(suffix), len(before) - 1
    alive = np.ones(len(pos), dtype=bool)
    for q in range(pp):
        ahead = (q - k) % pp
        left = 0 if k + ahead >= stages else (stages - 1 - k - ahead) // pp + 1
        code = codes[:, q]
        table = suffix[q][left]
        start = pos + int(before[min(k + ahead, stages)] - before[k])
        alive &= (table[np.minimum(start, n + 1), code >> 3] >> (code & 7)) & 1 == 1
    return alive


def _moves(pos: np.ndarray, need: np.ndarray, prefix: np.ndarray, k: int, least: tuple[int, ...], before: np.ndarray,
           n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every piece stage k may take from each state: (its state, where it ends, the ranks' needs after it). The
    rank's last stage takes exactly what it still needs; an earlier one holds at least its least and leaves
    each of the rank's later stages theirs."""
    pp, stages = need.shape[1], len(least)
    r = k % pp
    blocks = need[:, r].sum(axis=1)
    last = k + pp >= stages
    low = pos + blocks if last else pos + least[k]
    top = np.minimum(pos + blocks - sum(least[k + pp::pp]), n - int(before[-1] - before[k + 1]))
    count = np.maximum(top - low + 1, 0)
    total = int(count.sum())
    if total * need.shape[1] * need.shape[2] > ROWS_BUDGET:
        raise LayersSpent
    parent = np.repeat(np.arange(len(pos)), count)
    end = low[parent] + np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    rest = need[parent, r] - (prefix[end] - prefix[pos[parent]])
    fits = (rest >= 0).all(axis=1)
    parent, end = parent[fits], end[fits]
    after = need[parent]
    after[:, r] = rest[fits]
    return parent, end, after


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
