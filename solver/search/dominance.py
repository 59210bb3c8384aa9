"""Pareto dominance on two minimised objectives, in one place: the filter that keeps the points no other
point beats, used for a row's cut staircase, the brute-force front and the merge of training-pool sizes."""

from __future__ import annotations

from collections.abc import Sequence


def nondominated(values: Sequence[tuple[float, float]], keep_equal: bool = False) -> list[int]:
    """Indices of the points no other point dominates (no worse on both objectives, better on one), in
    order of the first objective then the second. Equal value pairs: the first listed only, or every
    one of them with `keep_equal` (an equal pair does not dominate its twin)."""
    order = sorted(range(len(values)), key=lambda i: (values[i], i))
    kept: list[int] = []
    for i in order:
        if not kept or values[i][1] < values[kept[-1]][1] or keep_equal and values[i] == values[kept[-1]]:
            kept.append(i)
    return kept


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether value pair `a` dominates `b`: no worse on both objectives, better on one."""
    return a[0] <= b[0] and a[1] <= b[1] and a != b
