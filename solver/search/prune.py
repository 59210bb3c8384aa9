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

from collections.abc import Callable

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
