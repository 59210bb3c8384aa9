"""The one CP-SAT solver setup every search and diagnosis uses: one worker and a fixed seed, so the
same input gives the same answer, under a wall-clock limit."""

from __future__ import annotations

from parasol.cp_sat import cp_model

SEED = 20261129
DIAGNOSIS_LIMIT_S = 5.0  # one diagnostic solve (conflict core, repair): pinned models answer in ms


def deterministic_solver(time_limit_s: float, *, presolve: bool = True,
                         probing: bool = True) -> cp_model.CpSolver:
    """A CP-SAT solver with one worker, the project's seed and `time_limit_s` (at least 10 ms).

    `presolve=False` suits models whose degrees are all pinned (nothing left to simplify, a quarter of
    their solve time); `probing=False` suits the many small warm-started solves of a Pareto walk."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SEED
    solver.parameters.max_time_in_seconds = max(time_limit_s, 0.01)
    solver.parameters.cp_model_presolve = presolve
    if not probing:
        solver.parameters.cp_model_probing_level = 0
    return solver
