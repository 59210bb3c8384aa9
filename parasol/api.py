"""The Python API for notebooks and scripts: load a problem, solve it, explain a mapping, sweep sizes.

Each call returns a typed result whose `.to_json()` holds the same content as the matching CLI
command's `--json` output (`parasol solve`, `parasol explain`, `parasol sweep`)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from parasol.errors import InputError
from parasol.problems.loader import Problem, load_problem, load_problem_text
from parasol.problems.mapping_input import apply_settings, build_mapping, parse_sets, split_sets
from parasol.problems.megatron.launch import apply_launch, parse_launch
from parasol.problems.model.catalog import catalog_names
from parasol.solver.diagnose.explain import Explanation
from parasol.solver.diagnose.explain import explain as explain_mapping
from parasol.solver.search.pools import solve_pools
from parasol.solver.search.solve import SolveResult, why_not_optimal
from parasol.solver.sweep.run import SweepResult, run_sweep

ProblemLike = Problem | str | Path | dict


def load(source: ProblemLike, *, hardware: str | None = None, gpus: int | None = None, seq_len: int = 8192,
         global_batch: int | None = None) -> Problem:
    """A problem from a YAML file, a dict with the file's sections, or a catalog model name (then
    `hardware` preset and `gpus` are needed; `seq_len` and `global_batch` default to 8,192 and 2·GPUs)."""
    if isinstance(source, Problem):
        return source
    if isinstance(source, dict):
        return load_problem_text(yaml.safe_dump(source, sort_keys=False), source="<dict>")
    text = str(source)
    if text in catalog_names():
        if hardware is None or gpus is None:
            raise InputError(f"Model {text!r} is a catalog name; a problem also needs its cluster.",
                             field="hardware", fix=f"call parasol.load({text!r}, hardware='h100-hgx', gpus=256).")
        return load({"model": text, "hardware": {"preset": hardware, "gpus": gpus},
                     "training": {"seq_len": seq_len, "global_batch": global_batch or 2 * gpus}})
    return load_problem(text)


def _dumps(data: dict) -> str:
    return json.dumps(data, indent=2)


@dataclass(frozen=True)
class Solved:
    """`parasol.solve`: the search result, and the reason it is not a proven optimum (if any)."""

    result: SolveResult
    reason: str = ""

    @property
    def mappings(self) -> tuple:
        return self.result.mappings

    @property
    def status(self) -> str:
        return self.result.status

    def as_dict(self) -> dict:
        """`parasol solve --json`."""
        return {**self.result.as_dict(), **({"reason": self.reason} if self.reason else {})}

    def to_json(self) -> str:
        return _dumps(self.as_dict())


@dataclass(frozen=True)
class Explained:
    """`parasol.explain`: the account of one mapping, with the launch line's notes and warnings."""

    explanation: Explanation
    notes: tuple[str, ...] = ()
    launch_warnings: tuple[dict, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.explanation.feasible

    def as_dict(self) -> dict:
        """`parasol explain --json`."""
        data = self.explanation.as_dict()
        data["warnings"] = [*data["warnings"], *self.launch_warnings]
        data["notes"] = list(self.notes)
        return data

    def to_json(self) -> str:
        return _dumps(self.as_dict())


@dataclass(frozen=True)
class Swept:
    """`parasol.sweep`: every size's result and the scaling table."""

    result: SweepResult

    def as_dict(self) -> dict:
        """`parasol sweep --json`."""
        return self.result.as_dict()

    def to_json(self) -> str:
        return _dumps(self.as_dict())


def solve(problem: ProblemLike, *, top: int = 10, time_limit: float = 60.0) -> Solved:
    """Pareto-ranked feasible mappings (as `parasol solve`)."""
    prob = load(problem)
    result = solve_pools(prob, top=top, time_limit_s=time_limit)
    return Solved(result, why_not_optimal(result, prob, time_limit))


def explain(problem: ProblemLike, *, megatron_args: str | None = None, **sets: Any) -> Explained:
    """One mapping's account (as `parasol explain`): the problem's mapping, overridden by a Megatron
    launch line and by keyword pins as `--set` takes them (tp=8, pp=4, recompute="full", layout=(…), and
    training settings or Megatron options such as fsdp="torch-fsdp2")."""
    prob = load(problem)
    pinned, settings = split_sets(parse_sets(tuple(
        f"{k}={','.join(map(str, v)) if isinstance(v, list | tuple) else v}" for k, v in sets.items())))
    if megatron_args is None:
        prob = apply_settings(prob, settings)
        return Explained(explain_mapping(prob, build_mapping(prob, pinned)))
    parsed = parse_launch(megatron_args, model=prob.model)
    updated, _, notes = apply_launch(prob, parsed, pinned)
    updated = apply_settings(updated, settings)
    mapping = build_mapping(updated, {**parsed.mapping_fields, **pinned})
    return Explained(explain_mapping(updated, mapping), (*notes, *parsed.notes),
                     tuple(w.as_dict() for w in parsed.warnings))


def sweep(problem: ProblemLike, gpus: list[int] | tuple[int, ...], *, weak: bool = False, backend: str = "serial",
          top: int = 1, time_limit: float = 60.0, workers: int | None = None) -> Swept:
    """The problem solved at several cluster sizes (as `parasol sweep`); a problem not read from a file is
    written to a temporary one for the workers."""
    if isinstance(problem, str | Path) and str(problem) not in catalog_names():
        return Swept(run_sweep(problem, list(gpus), weak=weak, backend=backend, workers=workers, top=top,
                               time_limit_s=time_limit))
    prob = load(problem)
    if Path(prob.source).is_file():
        return sweep(prob.source, gpus, weak=weak, backend=backend, top=top, time_limit=time_limit, workers=workers)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "problem.yaml"
        path.write_text(yaml.safe_dump(prob.spec.model_dump(mode="json", exclude_unset=True), sort_keys=False),
                        encoding="utf-8")
        return sweep(path, gpus, weak=weak, backend=backend, top=top, time_limit=time_limit, workers=workers)
