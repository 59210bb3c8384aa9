"""Speed of the exact interleaved cut search (issue 15): per-row staircase time of VPP > 1 rows of
default-space problems (bench/solve_speed.py's set), by VPP: rows timed, mean and largest time, rows
left unproved. Rows are a fixed sample of those where some cut fits in memory, priced with the
calibrated step-time model. The default set has one kind of block (GPT-3), a dense lead-in (DeepSeek-V3)
and a lead-in with alternating kinds (DeepSeek-V4-Pro), the last two settled by the round program
(solver/search/rounds.py) where the period after the lead-in is short and by the front program
(solver/search/fronts.py) where its states are few.

Run: python bench/interleaved_speed.py [--only NAME ...] [--rows 12] [--vpp 3 4 8 16]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from solve_speed import DEFAULT_SPACE, default_space_text

    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem_text
    from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
    from parasol.solver.search.cuts import row_staircase, some_cut_fits
    from parasol.solver.search.space import enumerate_rows

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", default=["gpt-3-175b-4096", "deepseek-v3-2048", "deepseek-v4-pro-8192"])
    parser.add_argument("--rows", type=int, default=12, help="rows timed per VPP")
    parser.add_argument("--vpp", type=int, nargs="*", default=[3, 4, 8, 16])
    args = parser.parse_args()
    print(f"{'problem':<24} {'VPP':>4} {'rows':>5} {'mean ms':>8} {'max ms':>8} {'unproved':>8}")
    for name, *spec in DEFAULT_SPACE:
        if name not in args.only:
            continue
        problem = load_problem_text(default_space_text(*spec))
        model = CalibratedStageTimes(problem)
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        usable = usable_mb(problem)
        rows = list(enumerate_rows(problem))
        random.Random(15).shuffle(rows)
        for vpp in args.vpp:
            timed: list[tuple[float, bool]] = []
            for row in (r for r in rows if r.vpp == vpp):
                if len(timed) == args.rows:
                    break
                if not some_cut_fits(row_costs(problem, row, None), counts, usable):
                    continue
                costs = row_costs(problem, row, model)
                start = time.perf_counter()
                stair = row_staircase(costs, counts, usable)
                timed.append((time.perf_counter() - start, stair.proved))
            if timed:
                ms = [t * 1000 for t, _ in timed]
                print(f"{name:<24} {vpp:>4} {len(timed):>5} {sum(ms) / len(ms):8.1f} {max(ms):8.1f} "
                      f"{sum(not p for _, p in timed):>8}", flush=True)


if __name__ == "__main__":
    main()
