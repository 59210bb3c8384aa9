"""The objectives a front can be built on: each one's integer unit in the master program, whether the
stage cut changes it, and how a row's value is computed.

Step time and peak memory depend on the cut (each row's staircase offers them). The bubble
fraction, the bytes crossing the scale-out network and the GPU count are the same for every cut of
a row: the bubble is the schedule formula of (p, v, m); the network bytes are sums over blocks and
ranks, which a cut only redistributes between stages; the GPU count is the job's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parasol.constraints.physics.workload import build_workload, network_bytes_per_step
from parasol.errors import InputError
from parasol.problems.derived import derive
from parasol.problems.loader import Problem
from parasol.problems.schema import Objective
from parasol.solver.search.costs import MEMORY_UNIT_MB, TIME_UNIT_S
from parasol.solver.search.space import Row


@dataclass(frozen=True)
class ObjectiveScale:
    """How one objective is held in the master program: `resolution` of its display unit per integer
    step, and whether the stage cut changes it."""

    display_unit: str
    resolution: float
    per_cut: bool


SCALES: dict[Objective, ObjectiveScale] = {
    Objective.step_time: ObjectiveScale("s", TIME_UNIT_S, per_cut=True),
    Objective.peak_memory: ObjectiveScale("GB", MEMORY_UNIT_MB / 1000, per_cut=True),
    Objective.network_bytes: ObjectiveScale("GB", 1.0, per_cut=False),
    Objective.bubble: ObjectiveScale("fraction", 1e-6, per_cut=False),
    Objective.gpus: ObjectiveScale("GPUs", 1.0, per_cut=False),
}
"""Resolutions: 0.1 ms, 10 MB, 1 GB per step (decimal), one part per million of the step, one GPU."""

DEFAULT_OBJECTIVES = (Objective.step_time, Objective.peak_memory)

PROXIES: dict[Objective, Objective] = {Objective.effective_tokens_per_s: Objective.step_time}
"""Objectives the program minimises through another: on a fixed training pool, effective tokens/s =
tokens per step / contract step time × goodput fraction (seed 000; constraints/physics/goodput.py) falls as the
step time grows, so the fastest mappings are the most productive. Across pool sizes (solver/search/pools.py)
fronts are merged on the objective's own values."""

MAXIMISED = frozenset({Objective.effective_tokens_per_s})

RESOLUTIONS: dict[str, float] = {**{o.value: scale.resolution for o, scale in SCALES.items()},
                                 Objective.effective_tokens_per_s.value: 1.0}
"""Every objective's resolution in its display unit (effective tokens/s: one token per second)."""

STEP_DIGITS = 3
"""Decimals a step time is printed with (the answer's table, the cut-off sentence: solve.bound_as_printed)."""


def program_objectives(objectives: tuple[Objective, Objective]) -> tuple[Objective, Objective]:
    """The two objectives the master program minimises for `objectives` (proxies substituted)."""
    first, second = (PROXIES.get(o, o) for o in objectives)
    return first, second


def objective_value(objective: Objective, metrics: dict, program_value: float) -> float:
    """A front objective's value for a mapping: the program's for the objectives it holds, the explain
    metrics' for a proxied one (effective tokens/s; plain tokens/s without a goodput section)."""
    if objective == Objective.effective_tokens_per_s:
        return float(metrics.get("effective_tokens_per_s", metrics.get("tokens_per_s", 0.0)))
    return program_value


def sort_key(objective: Objective, value: float) -> float:
    """A value on the 'smaller is better' scale the fronts are ranked on."""
    return -value if objective in MAXIMISED else value


def front_objectives(problem: Problem) -> tuple[Objective, Objective]:
    """The problem's two front objectives, in order (the first is optimised first); anything else is
    refused with the field and line."""
    asked = tuple(problem.spec.objectives)
    if not (len(asked) == 2 and len(set(program_objectives(asked))) == 2):
        raise InputError(
            "a front is built on two different objectives; the first is optimised first, the second is "
            "traded against it (effective_tokens_per_s is optimised through step_time, so not both).",
            field="objectives", value=[o.value for o in asked], expected=f"two of {[o.value for o in Objective]}",
            fix="write e.g. `objectives: [step_time, peak_memory]` (the default) or `[step_time, network_bytes]`.",
            file=problem.source, line=problem.line_of("objectives"))
    return asked[0], asked[1]


def network_gb(problem: Problem, row: Row) -> float:
    """GB crossing the scale-out network per step under the row's degrees (default cut: the value is
    the same for every cut, see the module docstring)."""
    mapping = row.mapping(problem, row.default_cut(problem))
    return network_bytes_per_step(build_workload(problem, mapping, derive(problem.model, mapping))) / 1e9


def row_value(problem: Problem, row: Row, objective: Objective) -> float:
    """The value of a per-row objective, in its display unit."""
    if objective == Objective.network_bytes:
        return network_gb(problem, row)
    if objective == Objective.bubble:
        return float(derive(problem.model, row.mapping(problem)).bubble_fraction)
    if objective == Objective.gpus:
        return float(row.mapping(problem).gpus)
    raise ValueError(f"{objective.value} depends on the cut; it is not a per-row objective")


def row_units(problem: Problem, row: Row, objective: Objective) -> int:
    """A per-row objective in the master program's integer units, rounded up (never optimistic)."""
    return math.ceil(round(row_value(problem, row, objective) / SCALES[objective].resolution, 6))
