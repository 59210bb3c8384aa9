"""prune.TopStaircase answers prune.beaten's question (do steps of `top` rule-feasible rows dominate a point)
exactly, on random steps with ties, infeasible rows and rows cut again."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parasol.solver.search.prune import TopStaircase, beaten


def _queries(rng: random.Random, values: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Points on, beside and between the steps (ties on one or both objectives), and random ones."""
    points = [(rng.randint(0, 12), rng.randint(0, 12)) for _ in range(20)]
    for t, m in rng.sample(values, min(len(values), 20)):
        points += [(t, m), (t + 1, m), (t, m + 1), (t - 1, m), (t, m - 1), (t + 1, m + 1)]
    return points


@pytest.mark.parametrize("seed", range(40))
def test_top_staircase_is_the_scan(seed: int) -> None:
    """Every query, between rows added one at a time (some cut again), is answered as the scan does."""
    rng = random.Random(seed)
    top = rng.choice((1, 2, 3, 5))
    feasible = {r: rng.random() < 0.7 for r in range(30)}
    staircase = TopStaircase(top, feasible.__getitem__)
    rows: list[int] = []
    values: list[tuple[int, int]] = []
    answers = 0
    for _ in range(40):
        r = rng.randrange(30) if rows and rng.random() < 0.2 else len(set(rows)) % 30
        steps = [(rng.randint(0, 12), rng.randint(0, 12)) for _ in range(rng.randint(0, 4))]
        staircase.add(r, steps)
        rows += [r] * len(steps)
        values += steps
        arrays = np.array(rows, dtype=np.int64), np.array(values, dtype=np.int64).reshape(-1, 2)
        for point in _queries(rng, values):
            expected = beaten(point, *arrays, top, feasible.__getitem__)
            assert staircase.beaten(point) == expected, (point, top)
            answers += expected
    assert answers > 0


def test_top_staircase_judges_only_rows_below_the_top() -> None:
    """A row whose staircase lies at or above the top-th everywhere is never judged by the staircase."""
    judged: list[int] = []
    staircase = TopStaircase(2, lambda r: judged.append(r) or True)
    staircase.add(0, [(5, 5)])
    staircase.add(1, [(4, 6)])
    staircase.add(2, [(9, 9), (6, 7)])
    assert staircase.beaten((7, 7)) and not staircase.beaten((6, 5))
    assert judged == [0, 1]


def test_top_staircase_of_no_steps_beats_nothing() -> None:
    """No steps dominate no point, at any top."""
    for top in (0, 1, 3):
        assert not TopStaircase(top, lambda r: True).beaten((10, 10))


@pytest.mark.parametrize("seed", range(20))
def test_top_staircase_counts_a_staircases_next_steps_as_a_rebuild_would(seed: int) -> None:
    """Rows whose later steps come one by one below their least memory at longer times (a staircase's tails,
    row_search.RowSearch._tail), counted at once without a rebuild, give every answer the scan gives; and above
    least_beaten_memory(t) `top` rows hold steps faster than t, below it fewer."""
    rng = random.Random(seed)
    top = rng.choice((1, 2, 3, 5))
    feasible = {r: rng.random() < 0.8 for r in range(12)}
    staircase = TopStaircase(top, feasible.__getitem__)
    rows: list[int] = []
    values: list[tuple[int, int]] = []
    lowest: dict[int, tuple[int, int]] = {}
    for _ in range(60):
        r = rng.randrange(12)
        if r in lowest and rng.random() < 0.8:
            t, m = lowest[r]
            steps = [(t + rng.randint(0, 6), m - rng.randint(1, 5))] if m > 5 else []
        else:
            steps = [(rng.randint(0, 30), rng.randint(0, 30)) for _ in range(rng.randint(1, 3))]
        staircase.add(r, steps)
        rows += [r] * len(steps)
        values += steps
        if steps:
            lowest[r] = min(((t, m) for (t, m), row in zip(values, rows, strict=True) if row == r),
                            key=lambda v: (v[1], v[0]))
        arrays = np.array(rows, dtype=np.int64), np.array(values, dtype=np.int64).reshape(-1, 2)
        for point in _queries(rng, values):
            assert staircase.beaten(point) == beaten(point, *arrays, top, feasible.__getitem__), (point, top)
        for t in rng.sample(range(35), 5):
            least = staircase.least_beaten_memory(t)
            faster = {m: {row for (s, mem), row in zip(values, rows, strict=True) if s < t and mem <= m
                          and feasible[row]} for m in range(-1, 32)}
            expected = next((m for m in range(-1, 32) if len(faster[m]) >= top), None)
            assert least == expected, (t, top)
