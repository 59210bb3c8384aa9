"""Where a solve's cut searches go (issue 15): of the time spent on the staircases of the rows it cuts, how much
goes to steps that the final answer never needed, because every step from there down the row's staircase is
beaten by steps of `top` other rows (prune.beaten, the rules assumed to hold: an upper bound on what ending a
staircase early could save). A staircase is searched one memory cap at a time (InterleavedCuts.best: the fastest
cut within the cap, then the leanest at its step time); a cap's search counts as not needed when its printed
step and every later one are beaten, or when it found nothing (the search that ends the staircase). Each problem
is solved once in this process, in one search (no second core: the worker's cut searches could not be timed), with
every staircase built whole (no tails: row_search.RowSearch._tail ends or skips the steps it shows beaten, the
saving this measures the bound of).

Run: python bench/staircase_steps.py [--only NAME ...] [--catalog] [--time-limit 60]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


class CutRow(NamedTuple):
    """One row the search cut: its VPP, seconds of its staircase, each cap's (layout found or None, seconds),
    and its printed steps ((time units, memory units) by layout)."""

    vpp: int
    seconds: float
    caps: list[tuple[tuple[int, ...] | None, float]]
    printed: dict[tuple[int, ...], tuple[int, int]]


def record_cut_rows() -> list[CutRow]:
    """Time every staircase the row search builds from now on (whole: its tails off), and each cap's search
    within it."""
    import parasol.solver.search.cuts as cuts
    import parasol.solver.search.interleaved as interleaved
    import parasol.solver.search.row_search as row_search

    rows: list[CutRow] = []
    caps: list[tuple[tuple[int, ...] | None, float]] = []
    built: list[float] = [0.0]
    best, judged = interleaved.InterleavedCuts.best, row_search.RowSearch._judged
    whole, rest = row_search.row_staircase, cuts.InterleavedStairs.rest

    def timed_best(self, cap_mb):  # noqa: ANN001, ANN202 - a pass-through timer
        start = time.perf_counter()
        found = best(self, cap_mb)
        caps.append((found[0], time.perf_counter() - start))
        return found

    def timed(build):  # noqa: ANN001, ANN202 - a pass-through timer of a whole staircase
        def run(*args):  # noqa: ANN002, ANN202
            caps.clear()
            start = time.perf_counter()
            stairs = build(*args)
            built[0] = time.perf_counter() - start
            return stairs
        return run

    def recorded(self, chosen, c, stairs, admitted):  # noqa: ANN001, ANN202 - records the row's printed steps
        priced = judged(self, chosen, c, stairs, admitted)
        rows.append(CutRow(chosen.vpp, built[0], list(caps),
                           {q.layout: (q.time_units, q.memory_units) for q in priced.points}))
        return priced

    interleaved.InterleavedCuts.best = timed_best
    row_search.row_staircase, cuts.InterleavedStairs.rest = timed(whole), timed(rest)
    row_search.RowSearch._judged = recorded
    cuts.InterleavedStairs.stepwise = property(lambda self: False)
    return rows


def unneeded_seconds(rows: list[CutRow], top: int) -> float:
    """Seconds of the caps' searches whose printed step and every later one of the row are beaten by steps of
    `top` other rows at the end (a layout the re-pricing dropped counts as beaten), and of the searches that
    found nothing."""
    from parasol.solver.search.prune import beaten

    owner = np.array([i for i, r in enumerate(rows) for _ in r.printed], dtype=np.int64)
    values = np.array([v for r in rows for v in r.printed.values()], dtype=np.int64).reshape(-1, 2)
    total = 0.0
    for i, r in enumerate(rows):
        others = owner != i
        needed = [layout is not None and layout in r.printed
                  and not beaten(r.printed[layout], owner[others], values[others], top, lambda _: True)
                  for layout, _ in r.caps]
        last = max((k for k, x in enumerate(needed) if x), default=-1)
        total += sum(seconds for _, seconds in r.caps[last + 1:])
    return total


def main() -> None:
    from solve_speed import CATALOG_SPACE, DEFAULT_SPACE, default_space_text

    import parasol.solver.search.halves as halves
    import parasol.solver.search.solve as solve_module
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem_text

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", help="problems whose name contains one of these")
    parser.add_argument("--catalog", action="store_true", help="the catalog set instead of the default-space set")
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    halves.SPLIT_ROWS = sys.maxsize
    rows = record_cut_rows()
    print(f"{'problem':<26} {'status':>8} {'solve s':>7} {'cut rows':>8} {'cut s':>6} {'VPP>1 s':>7} "
          f"{'not needed s':>12}")
    for name, *spec in CATALOG_SPACE if args.catalog else DEFAULT_SPACE:
        if args.only and not any(part in name for part in args.only):
            continue
        problem = load_problem_text(default_space_text(*spec))
        rows.clear()
        start = time.perf_counter()
        result = solve_module.solve(problem, CalibratedStageTimes(problem), top=10, time_limit_s=args.time_limit)
        seconds = time.perf_counter() - start
        interleaved = sum(r.seconds for r in rows if r.vpp > 1)
        print(f"{name:<26} {result.status:>8} {seconds:7.2f} {len(rows):8,} {sum(r.seconds for r in rows):6.2f} "
              f"{interleaved:7.2f} {unneeded_seconds(rows, 10):12.2f}", flush=True)


if __name__ == "__main__":
    main()
