"""Row keys of integer arrays, one home for every layer that groups equal rows: the cut searches' moves and
expansions, the polish's candidate cuts, the step-time model's distinct rank holdings."""

from __future__ import annotations

import math

import numpy as np


def row_codes(rows: np.ndarray) -> np.ndarray:
    """One integer per row of int64 `rows`, equal exactly for equal rows (a mixed radix over the columns' largest
    values); the rows themselves, viewed whole, when a value is negative or the radix passes int64."""
    radix = rows.max(axis=0, initial=0) + 1
    if rows.min(initial=0) < 0 or math.prod(int(x) for x in radix) >= 1 << 62:
        return np.ascontiguousarray(rows).view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    return rows @ np.cumprod(np.concatenate([[1], radix[:-1]])).astype(np.int64)


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each distinct row of `rows` first occurs, in that order; each row's place among the distinct ones):
    np.unique(axis=0)'s answer in first-seen order, keyed by row_codes."""
    _, first, inverse = np.unique(row_codes(np.asarray(rows, dtype=np.int64)), return_index=True,
                                  return_inverse=True)
    order = np.argsort(first, kind="stable")
    place = np.empty_like(order)
    place[order] = np.arange(len(order))
    return first[order], place[inverse.reshape(-1)]
