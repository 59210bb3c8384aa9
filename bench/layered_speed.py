"""Speed of the layered layout search (solver/search/layered.py, issue 15): the exact layout questions a short
search of each hybrid model asks (Nemotron-H 8B and Nemotron-3 Nano on 256 H100, default space, one process),
recorded as they are asked and then replayed here, each timed alone with no deadline: how many it answers with
a layout, proves have none, or gives up on (its budgets), and the seconds each kind takes. The replay is what
to compare across versions of the search: the same questions, whatever the rest of the solver does in between.
Run: python bench/layered_speed.py [--seconds 30] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

HYBRIDS = ("nemotron-h-8b-256", "nemotron-3-nano-256")


def recorded_questions(name: str, seconds: float) -> list[tuple]:
    """The arguments of every layered question a `seconds` search of catalog problem `name` asks (one process)."""
    from solve_speed import CATALOG_SPACE, default_space_text

    import parasol.solver.search.halves as halves
    import parasol.solver.search.interleaved as interleaved
    import parasol.solver.search.solve as solve_module
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem_text

    spec = next(spec for entry, *spec in CATALOG_SPACE if entry == name)
    problem = load_problem_text(default_space_text(*spec))
    asked: list[tuple] = []
    layered = interleaved.layered_layout

    def recorded(*args):  # noqa: ANN002, ANN202 - a pass-through recorder
        asked.append(args[:5])
        return layered(*args)

    split, halves.SPLIT_ROWS = halves.SPLIT_ROWS, sys.maxsize
    interleaved.layered_layout = recorded
    try:
        solve_module.solve(problem, CalibratedStageTimes(problem), top=10, time_limit_s=seconds)
    finally:
        interleaved.layered_layout, halves.SPLIT_ROWS = layered, split
    return asked


def main() -> None:
    from parasol.solver.search.layered import LayersSpent, layered_layout

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0, help="time limit of each recording search")
    parser.add_argument("--only", nargs="*", help="problems whose name contains one of these")
    args = parser.parse_args()
    print(f"{'problem':<22} {'questions':>9} {'seconds':>8} {'layout':>14} {'none':>14} {'spent':>12}")
    for name in HYBRIDS:
        if args.only and not any(part in name for part in args.only):
            continue
        outcomes: dict[str, list[float]] = {"layout": [], "none": [], "spent": []}
        for question in recorded_questions(name, args.seconds):
            start = time.perf_counter()
            try:
                kind = "none" if layered_layout(*question, lambda: False) is None else "layout"
            except LayersSpent:
                kind = "spent"
            outcomes[kind].append(time.perf_counter() - start)
        cells = [f"{len(t):5,} {sum(t):6.2f} s" for t in outcomes.values()]
        total = sum(sum(t) for t in outcomes.values())
        count = sum(len(t) for t in outcomes.values())
        print(f"{name:<22} {count:9,} {total:8.2f} {cells[0]:>14} {cells[1]:>14} {cells[2]:>12}", flush=True)


if __name__ == "__main__":
    main()
