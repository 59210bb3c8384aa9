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
