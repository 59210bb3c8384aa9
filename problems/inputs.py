"""What `explain` judges: a problem file, a Megatron launch line and `--set` pins combined into one
problem and one mapping (the problem's mapping < the launch line < --set)."""

from __future__ import annotations

from dataclasses import dataclass

from parasol.errors import InputError
from parasol.problems.loader import Problem, load_problem
from parasol.problems.mapping import Mapping
from parasol.problems.mapping_input import apply_settings, build_mapping, parse_sets, split_sets
from parasol.problems.megatron.context import LaunchWarning
from parasol.problems.megatron.launch import apply_launch, launch_problem, parse_launch, read_launch_file
from parasol.problems.megatron.shell import SOURCE
from parasol.problems.model.catalog import load_model


@dataclass(frozen=True)
class ExplainInputs:
    """The problem and mapping `explain` judges, with what the launch line adds to the report."""

    problem: Problem
    mapping: Mapping
    notes: tuple[str, ...] = ()
    warnings: tuple[LaunchWarning, ...] = ()


def launch_text(args: str | None, path: str | None) -> tuple[str, str] | None:
    """The launch line from --megatron-args or --megatron-args-file (not both), with its source name."""
    if args is not None and path is not None:
        raise InputError("Both --megatron-args and --megatron-args-file are given.", field="--megatron-args",
                         fix="pass the launch line one way.")
    if path is not None:
        return read_launch_file(path), path
    return (args, SOURCE) if args is not None else None


def _no_problem_options(hardware: str | None, gpus: int | None, model_name: str | None) -> None:
    """--hardware/--gpus/--model describe a run without a problem file; with one they are errors."""
    given = [name for name, value in (("--hardware", hardware), ("--gpus", gpus), ("--model", model_name))
             if value is not None]
    if given:
        raise InputError(f"{', '.join(given)} apply only without a problem file.", field=given[0],
                         fix="edit the problem file (or use --set gpus=N), or drop PROBLEM.yaml.")


def placed(problem: Problem, mapping: Mapping) -> Problem:
    """The problem on the mapping's GPU count (`--set gpus=N`), so that its ranks are placed on nodes as a
    job of that size is (partial nodes included)."""
    return problem if mapping.gpus == problem.gpus else problem.resized(mapping.gpus)


def explain_inputs(problem_path: str | None, sets: tuple[str, ...], launch: tuple[str, str] | None, *,
                   hardware: str | None = None, gpus: int | None = None,
                   model_name: str | None = None) -> ExplainInputs:
    """Problem file (+ launch line) + --set, or hardware + launch line alone: what `explain` judges. With --model the
    catalog model stands in for the problem's: the line's model flags are compared with it, not built."""
    pinned, settings = split_sets(parse_sets(sets))
    if problem_path is not None:
        _no_problem_options(hardware, gpus, model_name)
        problem = load_problem(problem_path)
        if launch is None:
            problem = apply_settings(problem, settings)
            mapping = build_mapping(problem, pinned)
            return ExplainInputs(placed(problem, mapping), mapping)
        parsed = parse_launch(launch[0], source=launch[1], model=problem.model)
        updated, _, notes = apply_launch(problem, parsed, pinned)
        updated = apply_settings(updated, settings)
        mapping = build_mapping(updated, {**parsed.mapping_fields, **pinned})
        return ExplainInputs(placed(updated, mapping), mapping, (*notes, *parsed.notes), parsed.warnings)
    if launch is None or hardware is None:
        raise InputError("Nothing to explain: give PROBLEM.yaml, or --hardware PRESET with --megatron-args "
                         "(or --megatron-args-file).", field="PROBLEM",
                         fix="e.g. `parasol explain problems/deepseek-v4-pro-1024.yaml` or "
                             "`parasol explain --hardware h100-hgx --gpus 8 --megatron-args \"--num-layers 32 …\"`.")
    if gpus is not None and gpus < 1:
        raise InputError("--gpus must be at least 1.", field="--gpus", value=gpus, fix="pass the job's GPU count.")
    catalog = load_model(model_name) if model_name is not None else None
    parsed = parse_launch(launch[0], source=launch[1], model=catalog)
    problem, _, notes = launch_problem(parsed, hardware=hardware, gpus=gpus, model_name=model_name, sets=pinned)
    problem = apply_settings(problem, settings)
    mapping = build_mapping(problem, {**parsed.mapping_fields, **pinned})
    return ExplainInputs(problem, mapping, (*notes, *parsed.notes), parsed.warnings)
