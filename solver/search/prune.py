"""Dropping staircase steps the Pareto search can never return, before the master program is built.

The search lists whole fronts until `top` mappings are found; a front is the non-dominated steps of
the rows no earlier front used. A step p can only enter a front once every row holding a step that
dominates p (no worse on both objectives, better on one) has been used by an earlier front, and each
used row put at least one mapping in the answer. So if steps of `top` or more other rows that meet
every rule dominate p, the answer is complete before p could be listed: p is dropped, and the answer
is the same. Rows are checked against the rules in Python (the verdicts the master posts, tested to
agree), lazily and only as dominators.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable

import numpy as np

from parasol.solver.search.cuts import CutPoint, Staircase


def step_values(staircases: tuple[Staircase, ...], per_row: Callable[[int, CutPoint], tuple[int, int]]
                ) -> tuple[np.ndarray, np.ndarray]:
    """(row of every step, its two objective values as an (n, 2) array)."""
    rows = [i for i, st in enumerate(staircases) for _ in st.points]
    values = [per_row(i, q) for i, st in enumerate(staircases) for q in st.points]
    return np.array(rows, dtype=np.int64), np.array(values, dtype=np.int64).reshape(-1, 2)


WORTH_PRUNING = 500
"""Fewer steps than this go to the master as they are: it solves them in milliseconds, and the rule
checks pruning needs would cost more (measured on DeepSeek-V4-Pro, 8,192 and 131,072 GPUs)."""


def pruned(staircases: tuple[Staircase, ...], per_row: Callable[[int, CutPoint], tuple[int, int]], top: int,
           row_feasible: Callable[[int], bool]) -> tuple[Staircase, ...]:
    """The staircases without the steps that `top` other rule-feasible rows dominate."""
    if sum(len(st.points) for st in staircases) < WORTH_PRUNING:
        return staircases
    rows, values = step_values(staircases, per_row)
    feasible: dict[int, bool] = {}
    keep = np.ones(len(rows), dtype=bool)
    for k in range(len(rows)):
        v = values[k]
        dominating = (values[:, 0] <= v[0]) & (values[:, 1] <= v[1]) & ((values[:, 0] < v[0]) | (values[:, 1] < v[1]))
        others = np.unique(rows[dominating & (rows != rows[k])])
        if len(others) < top:
            continue
        found = 0
        for r in others.tolist():
            if r not in feasible:
                feasible[r] = row_feasible(r)
            found += feasible[r]
            if found >= top:
                keep[k] = False
                break
    out, k = [], 0
    for st in staircases:
        n = len(st.points)
        out.append(Staircase(tuple(q for q, kept in zip(st.points, keep[k:k + n], strict=True) if kept), st.proved))
        k += n
    return tuple(out)


def beaten(point: tuple[int, int], rows: np.ndarray, values: np.ndarray, top: int,
           row_feasible: Callable[[int], bool]) -> bool:
    """Whether steps of `top` rule-feasible rows (`rows` of steps with `values`) dominate `point`: then no
    step at or above it can enter the answer (the argument of `pruned`), so a row whose every cut lies
    at or above it (an admissible floor) need not be cut at all."""
    if not len(rows):
        return False
    dominating = (values[:, 0] <= point[0]) & (values[:, 1] <= point[1]) & (
        (values[:, 0] < point[0]) | (values[:, 1] < point[1]))
    if np.count_nonzero(dominating) < top:
        return False
    others = np.unique(rows[dominating])
    return len(others) >= top and sum(1 for r in others.tolist() if row_feasible(r)) >= top


NONE_BELOW = np.iinfo(np.int64).max
"""The time a staircase reads below its first step (no step there): above every step time."""


def _least_times(steps: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """A row's staircase from its steps: their memories in ascending order and, at each, the least time of
    the steps at or below it (the row's least time under memory m is at the last memory <= m)."""
    values = np.array(steps, dtype=np.int64).reshape(-1, 2)
    order = np.lexsort((values[:, 0], values[:, 1]))
    return values[order, 1], np.minimum.accumulate(values[order, 0])


def _on_grid(memories: np.ndarray, times: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A staircase (`memories` ascending, their least `times`) read at each memory of `grid`."""
    at = np.searchsorted(memories, grid, side="right") - 1
    read = np.full(len(grid), NONE_BELOW, dtype=np.int64)
    read[at >= 0] = times[at[at >= 0]]
    return read


class TopStaircase:
    """`beaten`'s answer in O(log n) a query: for the rule-feasible rows, the j-th least of their least times
    under each memory (j = 1..top, on the grid of their step memories), kept as rows arrive. A point
    (t, m) is beaten when the top-th is below t at m, or at most t at m - 1 (memories are integer units):
    top rows then hold a step that dominates it; it is not when the top-th exceeds t at m. The one case
    left (the top-th equals t at m, exceeds it at m - 1: a dominator may only tie the point on one
    objective) is `beaten`'s scan. Rows are judged by the rules lazily: a row arriving is judged only when
    its staircase lies below the top-th somewhere (else, feasible or not, it cannot move the top-th, now
    or later, as the top-th only falls); steps added to a row already counted rebuild the order."""

    def __init__(self, top: int, row_feasible: Callable[[int], bool]) -> None:
        self.top, self.row_feasible = top, row_feasible
        self._rows: list[int] = []
        self._values: list[tuple[int, int]] = []
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None
        self._steps: dict[int, list[tuple[int, int]]] = {}
        self._arrived: list[int] = []
        self._below: list[tuple[list[tuple[int, int]], int]] = []
        """New steps of counted rows below their least memory, with that memory, not yet counted (add)."""
        self._counted: list[int] = []
        self._judged: dict[int, bool] = {}
        self._grid = np.zeros(0, dtype=np.int64)
        self._least = np.full((max(top, 1), 0), NONE_BELOW, dtype=np.int64)
        self._grid_list: list[int] = []
        self._top_list: list[int] = []

    def add(self, row: int, steps: Iterable[tuple[int, int]]) -> None:
        """Steps (time, memory) of `row`, cut now (a row cut again adds its new steps to its old). New steps of a
        counted row that lie below its least memory, at no less than its time there, extend its staircase where
        it had no step (the next steps of a staircase, row_search.RowSearch's tails): they are counted at once,
        as a row of their own over those memories alone; any other new steps rebuild the order."""
        steps = list(steps)
        self._rows.extend(row for _ in steps)
        self._values.extend(steps)
        if steps and self._judged.get(row, False):
            memories, times = _least_times(self._steps[row])
            if max(m for _, m in steps) < memories[0] and min(t for t, _ in steps) >= times[0]:
                self._steps[row].extend(steps)
                self._below.append((steps, int(memories[0])))
                return
        self._steps.setdefault(row, []).extend(steps)
        self._arrived.append(row)

    def beaten(self, point: tuple[int, int]) -> bool:
        """Whether steps of `top` rule-feasible rows dominate `point` (exactly `beaten`'s answer)."""
        if self.top < 1:
            return self._scan(point)
        if self._arrived or self._below:
            self._take_arrived()
        t, m = point
        at = bisect_right(self._grid_list, m) - 1
        least = self._top_list[at] if at >= 0 else NONE_BELOW
        if least != t:
            return least < t
        below = bisect_right(self._grid_list, m - 1) - 1
        if below >= 0 and self._top_list[below] <= t:
            return True
        return self._scan(point)

    def least_beaten_memory(self, time_units: int) -> int | None:
        """The least memory m at which `top` rule-feasible rows hold steps faster than `time_units`: they then
        dominate every point (t, m') with t >= time_units and m' >= m (None where no memory is so)."""
        if self._arrived or self._below:
            self._take_arrived()
        at = bisect_left(self._top_list, True, key=lambda least: least < time_units)
        return self._grid_list[at] if at < len(self._grid_list) else None

    def _scan(self, point: tuple[int, int]) -> bool:
        """`beaten` over every step added."""
        if self._arrays is None or len(self._arrays[0]) != len(self._rows):
            self._arrays = (np.array(self._rows, dtype=np.int64),
                            np.array(self._values, dtype=np.int64).reshape(-1, 2))
        return beaten(point, *self._arrays, self.top, self.row_feasible)

    def _take_arrived(self) -> None:
        """Count the rows that arrived: rebuild the order if a counted row has new steps, then judge and count
        each other row whose staircase lies below the top-th somewhere."""
        arrived, self._arrived = self._arrived, []
        below, self._below = self._below, []
        if any(self._judged.get(r, False) for r in arrived):
            self._rebuild()
        else:
            for steps, above in below:
                self._count_times(*_least_times(steps), above)
        for r in dict.fromkeys(arrived):
            if r in self._judged:
                continue
            memories, times = _least_times(self._steps[r])
            if not len(memories) or not np.any(times < _on_grid(self._grid, self._least[-1], memories)):
                continue
            self._judged[r] = self.row_feasible(r)
            if self._judged[r]:
                self._count(r)
        self._grid_list, self._top_list = self._grid.tolist(), self._least[-1].tolist()

    def _rebuild(self) -> None:
        """The order over the counted rows anew (one of them has new steps)."""
        counted, self._counted = self._counted, []
        self._grid = np.zeros(0, dtype=np.int64)
        self._least = np.full((self._least.shape[0], 0), NONE_BELOW, dtype=np.int64)
        for r in counted:
            self._count(r)

    def _count(self, row: int) -> None:
        """Put a rule-feasible row's staircase into the order."""
        self._count_times(*_least_times(self._steps[row]))
        self._counted.append(row)

    def _count_times(self, memories: np.ndarray, times: np.ndarray, below: int | None = None) -> None:
        """Put a staircase (_least_times) into the order, at memories under `below` alone when given: the j-th least
        becomes the least of the j-th and the larger of the (j-1)-th and the staircase's time."""
        grid = np.union1d(self._grid, memories)
        if len(grid) != len(self._grid):
            at = np.searchsorted(self._grid, grid, side="right") - 1
            least = np.full((self._least.shape[0], len(grid)), NONE_BELOW, dtype=np.int64)
            least[:, at >= 0] = self._least[:, at[at >= 0]]
            self._grid, self._least = grid, least
        row_times = _on_grid(memories, times, self._grid)
        if below is not None:
            row_times[self._grid >= below] = NONE_BELOW
        above = np.empty_like(self._least)
        above[0] = np.iinfo(np.int64).min
        above[1:] = self._least[:-1]
        self._least = np.minimum(self._least, np.maximum(above, row_times))
