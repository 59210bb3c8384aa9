"""A local-search probe of the printed front (issue 15: no mapping a probe finds dominates a front mapping), at the
printed price: each rank-1 mapping of a default-space solve is its row's cut, and random chains of one-block moves
between two virtual stages (each keeping its least, empty_stages.stage_least) search that row for a cut whose
exact step time (StageTimeModel.cut_step_times_s, as explain prints it) is lower at no more peak-memory units.

The cut searches rank cuts by the linear stage tables (RowCosts) and only the staircase they return is priced
exactly, so a cut the tables misjudge can beat a printed mapping; tests/test_interleaved_cuts.py's probe judges
cuts by the tables themselves. Session 51: on DeepSeek-V4-Flash on 32,768 GPUs 5 of the 56 rank-1 mappings were
beaten, by 0.006-0.16%; DeepSeek-V3, V4-Pro on 8,192, the 235B MoE, Mixtral 8x22B and Llama 3.1 405B none. Since
session 52 solve polishes every cut it returns (solver/search/polish.py) and the probe beats none of the
default-space set's.

Prints, per rank-1 mapping with two stages or more, its units and the probe's best, and the count beaten; the
same seed gives the same moves.

Run: python bench/front_probe.py [--catalog] [--only NAME ...] [--chains 20] [--moves 400] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.empty_stages import stage_least
from parasol.problems.loader import Problem, load_problem
from parasol.solver.search.costs import RowCosts, block_kinds, interval_counts, prefix_counts, row_costs
from parasol.solver.search.cuts import CutPoint, Staircase
from parasol.solver.search.reprice import exact_staircase
from parasol.solver.search.savings import row_problem, time_model_for, with_saving
from parasol.solver.search.solve import solve
from parasol.solver.search.space import Row

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solve_speed import CATALOG_SPACE, DEFAULT_SPACE, default_space_text  # noqa: E402


class PrintedPrice:
    """(step time units, peak memory units) of a row's cuts as the answer prints them (reprice.exact_staircase)."""

    def __init__(self, problem: Problem, row: Row, model: CalibratedStageTimes, counts: np.ndarray) -> None:
        judged = row_problem(problem, row)
        self.model = time_model_for(model, with_saving(problem, row.saving)).for_problem(judged)
        self.costs: RowCosts = row_costs(judged, row, self.model)
        self.mapping, self.counts = row.mapping(problem), counts
        self.row = row

    def __call__(self, layout: tuple[int, ...]) -> tuple[int, int]:
        one = Staircase((CutPoint(0, 0, layout),), True)
        point = exact_staircase(self.costs, self.mapping, one, self.counts, self.model).points[0]
        return point.time_units, point.memory_units


def probe(price: PrintedPrice, start: tuple[int, ...], rng: random.Random, chains: int,
          moves: int) -> tuple[int, int, tuple[int, ...]]:
    """The fastest cut the walks from `start` find at no more memory units than its own (start itself if none):
    each walk moves one block from one virtual stage to another `moves` times, keeping each stage's least,
    and goes on from a move that stays within the memory units with probability 0.3."""
    least = stage_least(price.row.pp, price.row.vpp)
    start_time, start_memory = price(start)
    best = (start_time, start_memory, start)
    for _ in range(chains):
        walk = list(start)
        for _ in range(moves):
            cut = list(walk)
            give, take = rng.sample(range(len(cut)), 2)
            if cut[give] <= least[give]:
                continue
            cut[give] -= 1
            cut[take] += 1
            step, memory = price(tuple(cut))
            if memory <= start_memory and step < best[0]:
                best = (step, memory, tuple(cut))
            if memory <= start_memory and rng.random() < 0.3:
                walk = cut
    return best


def main() -> None:
    """Solve each problem of the set and probe its rank-1 mappings at the printed price."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", action="store_true", help="the catalog set (solve_speed.CATALOG_SPACE) instead")
    parser.add_argument("--only", nargs="*", help="problems of the set whose name contains one of these")
    parser.add_argument("--chains", type=int, default=20)
    parser.add_argument("--moves", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for name, *spec in CATALOG_SPACE if args.catalog else DEFAULT_SPACE:
            if args.only and not any(part in name for part in args.only):
                continue
            path = Path(folder) / f"{name}.yaml"
            path.write_text(default_space_text(*spec), encoding="utf-8")
            problem = load_problem(path)
            model = CalibratedStageTimes(problem)
            result = solve(problem, model, top=10, time_limit_s=120)
            counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
            rng, beaten, probed = random.Random(args.seed), 0, 0
            print(f"{name}: {result.status}")
            for mapping in result.mappings:
                layout = tuple(mapping.explanation.mapping.layout or ())
                if mapping.pareto_rank != 1 or len(layout) < 2:
                    continue
                row = mapping.row
                price = PrintedPrice(problem, row, model, counts)
                found, start = probe(price, layout, rng, args.chains, args.moves), price(layout)
                probed += 1
                beaten += found[0] < start[0]
                print(f"  PP{row.pp} VPP{row.vpp} TP{row.tp} CP{row.cp} EP{row.ep} MBS{row.mbs} {row.recompute}: "
                      f"printed {start[0]} / {start[1]} units, probe {found[0]} / {found[1]} "
                      f"({(start[0] - found[0]) / start[0]:.4%} faster)")
            print(f"  {beaten} of {probed} rank-1 mappings beaten by a cut of their own row")


if __name__ == "__main__":
    main()
