"""One price (issue 15): per bundled problem and DeepSeek-V4-Pro on 131,072 GPUs, the wall time of
`parasol solve --json`, how far the linear stage tables (what the master optimised before the exact
re-pricing, solver/search/reprice.py) and the objective the master optimises now are from the printed
step time of the returned mappings, and how many printed mappings another one of the same or a later
rank beats as printed.

Run: python bench/one_price.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def solve_json(problem: Path) -> tuple[dict, float]:
    """`parasol solve PROBLEM --json` and its wall seconds."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "parasol.solver.cli", "solve", str(problem), "--json"],
                         check=False, capture_output=True, cwd=ROOT, text=True)
    return json.loads(out.stdout), time.perf_counter() - start


def linear_gap(problem_path: Path, data: dict) -> float:
    """Largest |linear-table step time − printed| / printed over the returned mappings."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem
    from parasol.solver.search.costs import (
        TIME_UNIT_S,
        block_kinds,
        interval_counts,
        prefix_counts,
        row_costs,
    )
    from parasol.solver.search.cuts import rank_counts
    from parasol.solver.search.space import Row

    loaded = load_problem(problem_path)
    counts = interval_counts(prefix_counts(loaded, block_kinds(loaded)))
    worst = 0.0
    for m in data["mappings"]:
        mp = m["mapping"]
        problem = loaded if mp["gpus"] == loaded.gpus else loaded.resized(mp["gpus"])
        model = CalibratedStageTimes(problem)
        row = Row(mp["pp"], mp["vpp"], mp["tp"], mp["cp"], mp["ep"], mp["etp"], mp["mbs"], mp["recompute"],
                  mp["rank_order"])
        c = row_costs(problem, row, model)
        linear = c.objectives(rank_counts(tuple(mp["layout"]), row.pp, counts))[0] * TIME_UNIT_S
        printed = m["metrics"]["step_time_s"]
        worst = max(worst, abs(linear - printed) / printed)
    return worst


def main() -> None:
    from test_one_price import dominated

    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "deepseek-v4-pro-131072.yaml"
        big.write_text((ROOT / "problems/deepseek-v4-pro-8192.yaml").read_text(encoding="utf-8")
                       .replace("gpus: 8192", "gpus: 131072"), encoding="utf-8")
        print(f"{'problem':<32} {'wall s':>7} {'status':>9} {'linear vs printed':>18} {'objective vs printed':>21}"
              f" {'dominated':>9}")
        for path in [*sorted((ROOT / "problems").glob("*.yaml")), big]:
            data, seconds = solve_json(path)
            objective = max((abs(m["objective"]["step_time_s"] - m["metrics"]["step_time_s"])
                             / m["metrics"]["step_time_s"] for m in data["mappings"]), default=0.0)
            print(f"{path.stem:<32} {seconds:7.2f} {data['status']:>9} {linear_gap(path, data):17.3%} "
                  f"{objective:20.4%} {len(dominated(data['mappings'])):9d}")


if __name__ == "__main__":
    main()
