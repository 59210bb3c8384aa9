"""Speed of `parasol solve` (issue 5): CLI start to output on DeepSeek-V4-Pro at 1,024, 8,192 and
131,072 GPUs (median of 5 on this machine), and the solver against the brute-force reference.

Run: python bench/solve_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def cli_seconds(problem: Path, runs: int) -> list[float]:
    """Wall seconds of `parasol solve PROBLEM --json` from process start to exit."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "parasol.solver.cli", "solve", str(problem), "--json"],
                       check=False, capture_output=True, cwd=ROOT)
        out.append(time.perf_counter() - start)
    return out


def scaled_problem(source: Path, gpus: int, folder: Path) -> Path:
    """The 8,192-GPU problem with another GPU count (same model, batch and search space)."""
    text = source.read_text(encoding="utf-8").replace("gpus: 8192", f"gpus: {gpus}")
    path = folder / f"deepseek-v4-pro-{gpus}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def reference_ratio(count: int) -> list[tuple[int, float, float]]:
    """(problem, solver seconds, brute-force seconds) on the generated problems of the reference test."""
    from test_solve_reference import GENERATED, AdditiveTime

    from parasol.problems.loader import load_problem_text
    from parasol.solver.search.brute_force import reference_front
    from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
    from parasol.solver.search.cuts import row_staircase
    from parasol.solver.search.pareto import pareto_search
    from parasol.solver.search.program import compile_program
    from parasol.solver.search.space import enumerate_rows

    out = []
    for i in range(count):
        problem = load_problem_text(GENERATED[i])
        model = AdditiveTime(problem)
        rows = enumerate_rows(problem)
        costs = tuple(row_costs(problem, r, model) for r in rows)
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        usable = usable_mb(problem)
        start = time.perf_counter()
        stairs = tuple(row_staircase(c, counts, usable) for c in costs)
        if any(s.points for s in stairs):
            pareto_search(compile_program(problem, rows, costs, stairs), 1, 600)
        solver = time.perf_counter() - start
        start = time.perf_counter()
        reference_front(problem, costs, counts, usable)
        out.append((i, solver, time.perf_counter() - start))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reference", type=int, default=6, help="generated problems to compare")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = [("1,024", ROOT / "problems/deepseek-v4-pro-1024.yaml"),
                 ("8,192", ROOT / "problems/deepseek-v4-pro-8192.yaml"),
                 ("131,072", scaled_problem(ROOT / "problems/deepseek-v4-pro-8192.yaml", 131072, folder))]
        print(f"{'GPUs':>8}  {'median s':>9}  runs")
        medians = {}
        for label, path in cases:
            seconds = cli_seconds(path, args.runs)
            medians[label] = statistics.median(seconds)
            print(f"{label:>8}  {medians[label]:9.2f}  {', '.join(f'{s:.2f}' for s in seconds)}")
        print(f"131,072 / 8,192 time ratio: {medians['131,072'] / medians['8,192']:.2f}")
    print("\nsolver vs brute-force reference (same cost tables; generated problems of tests/test_solve_reference.py)")
    print(f"{'problem':>7}  {'solver s':>8}  {'brute s':>8}  ratio")
    for i, solver, brute in reference_ratio(args.reference):
        print(f"{i:>7}  {solver:8.2f}  {brute:8.2f}  {solver / brute:5.2f}")


if __name__ == "__main__":
    main()
