"""Per-row cost of `parasol solve` on default-space problems (issue 15): seconds per 1,000 calls of the
functions solve runs once per row listed (rows_until, ideal_step_s) or per row screened or cut
(fit_candidates, resolve_fit for rows whose fit needs the cut search, row_costs, settled,
rows_pass_rules, row_staircase), on a fixed sample of each problem's rows, and a digest of their results (equal
digests before and after a change: the same answers).

Run: python bench/row_costs.py [--only NAME] [--sample 150]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from solve_speed import DEFAULT_SPACE, default_space_text  # noqa: E402

PROBLEMS = ("qwen3-235b-256", "deepseek-v4-pro-8192")


def _timed(label: str, calls: list, digest: hashlib._Hash) -> list:
    """Run the thunks in `calls`, print seconds per 1,000 calls, fold their results into `digest`."""
    start = time.perf_counter()
    out = [call() for call in calls]
    seconds = time.perf_counter() - start
    per = 1000 * seconds / max(len(calls), 1)
    print(f"  {label:<34} {len(calls):6,} calls {seconds:8.3f} s  {per:9.3f} s / 1,000", flush=True)
    digest.update(repr(out).encode())
    return out


def measure(name: str, sample: int) -> None:
    """Time every per-row function on `sample` rows spread over the problem's listing."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem_text
    from parasol.solver.search.choices import settled
    from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
    from parasol.solver.search.cuts import row_staircase
    from parasol.solver.search.row_search import rows_pass_rules
    from parasol.solver.search.savings import (
        NONE,
        fit_candidates,
        open_savings,
        resolve_fit,
        row_problem,
        time_model_for,
        with_saving,
    )
    from parasol.solver.search.solve import RowDegrees, ideal_step_s
    from parasol.solver.search.space import rows_until

    spec = next(s for s in DEFAULT_SPACE if s[0] == name)
    problem = load_problem_text(default_space_text(*spec[1:]))
    model = CalibratedStageTimes(problem)
    digest = hashlib.sha256()
    print(name)
    start = time.perf_counter()
    rows, complete = rows_until(problem, None)
    seconds = time.perf_counter() - start
    print(f"  {'rows_until':<34} {len(rows):6,} rows  {seconds:8.3f} s  {1000 * seconds / len(rows):9.3f} s / 1,000")
    digest.update(repr((rows, complete)).encode())
    picked = rows[::max(len(rows) // sample, 1)][:sample]
    _timed("ideal_step_s", [lambda r=r: ideal_step_s(problem, RowDegrees.of((r,))) for r in picked], digest)
    _timed("row_costs(problem, row, None)", [lambda r=r: row_costs(problem, r, None) for r in picked], digest)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    usable, savings = usable_mb(problem), open_savings(problem)
    candidates = _timed("fit_candidates", [lambda r=r: fit_candidates(problem, r, savings, counts, usable)
                                           for r in picked], digest)
    fitted = [f for f in _timed("resolve_fit", [lambda c=c: resolve_fit(c, counts, usable)
                                                for c in candidates], digest) if f is not None]
    models = {NONE: model}
    for f in fitted:
        models.setdefault(f.saving, time_model_for(model, row_problem(problem, f)))
    chosen = _timed("settled", [lambda f=f: settled(row_problem(problem, f), f, models[f.saving]) for f in fitted],
                    digest)
    variants = [v for kept in chosen for v, _ in kept]
    fresh = {s: time_model_for(CalibratedStageTimes(problem), with_saving(problem, s)) for s in models}
    _timed("row_costs(problem, row, time model)",
           [lambda v=v: row_costs(row_problem(problem, v), v, fresh[v.saving]) for v in variants], digest)
    _timed("rows_pass_rules", [lambda v=v: rows_pass_rules(problem, v) for v in variants], digest)
    tables = [c for kept in chosen for _, c in kept]
    _timed("row_staircase, VPP 1", [lambda c=c: row_staircase(c, counts, usable) for c in tables if c.row.vpp == 1],
           digest)
    _timed("row_staircase, VPP > 1", [lambda c=c: row_staircase(c, counts, usable) for c in tables if c.row.vpp > 1],
           digest)
    print(f"  {len(rows):,} rows, {len(picked)} sampled, {len(fitted)} fit; digest {digest.hexdigest()[:16]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default=None)
    parser.add_argument("--sample", type=int, default=150)
    args = parser.parse_args()
    for name in PROBLEMS:
        if args.only is None or args.only in name:
            measure(name, args.sample)


if __name__ == "__main__":
    main()
