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

from parasol.constraints.step_time import build_workload, network_bytes_per_step
from parasol.errors import InputError
from parasol.problems.derived import default_layout, derive
from parasol.problems.loader import Problem
from parasol.problems.schema import Objective
from parasol.solver.costs import MEMORY_UNIT_MB, TIME_UNIT_S
from parasol.solver.space import Row


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


def front_objectives(problem: Problem) -> tuple[Objective, Objective]:
    """The problem's two front objectives, in order (the first is minimised first); anything else is
    refused with the field and line."""
    asked = tuple(problem.spec.objectives)
    if len(asked) != 2 or asked[0] == asked[1]:
        raise InputError(
            "a front is built on two different objectives; the first is minimised first, the second is "
            "traded against it.", field="objectives", value=[o.value for o in asked],
            expected=f"two of {[o.value for o in SCALES]}",
            fix="write e.g. `objectives: [step_time, peak_memory]` (the default) or `[step_time, network_bytes]`.",
            file=problem.source, line=problem.line_of("objectives"))
    return asked[0], asked[1]


def network_gb(problem: Problem, row: Row) -> float:
    """GB crossing the scale-out network per step under the row's degrees (default cut: the value is
    the same for every cut, see the module docstring)."""
    mapping = row.mapping(problem, default_layout(problem.model.num_layers, row.pp * row.vpp))
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
