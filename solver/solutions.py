"""The committed solutions of the bundled problems (issue 8 part 4).

    python -m parasol.solver.solutions            # re-solve every problems/*.yaml, write solutions/<stem>/
    python -m parasol.solver.solutions --check    # re-solve and compare with the committed files

Each `solutions/<stem>/` holds `solution.json` (the `solve --json` object, its search timing removed and the
top/time limit recorded, so the file is the same on every machine), `front.md` (a short table),
`megatron_args.sh` (the launch flags of the first mapping, solver/outputs/emit.py) and `hosts.txt` (its host
order). A new problem file under problems/ is picked up by both modes. The check lists every drift:
a status or mapping that changed, an objective value that moved by more than its resolution (the
solver's integer unit: 0.1 ms of step time, 10 MB of peak memory), a solution without a problem or a
problem without a solution; it exits 1 when there is one. The solver is deterministic when it proves
its answer within the time limit (one worker, fixed seed), so the limit is generous and a search that
does not finish is itself reported.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import click

import parasol.problems
from parasol.errors import ParasolError, one_paragraph
from parasol.problems.loader import Problem, load_problem
from parasol.problems.mapping import DEGREES, Mapping
from parasol.problems.megatron.layout_string import run_length
from parasol.solver.outputs.emit import COMPARED_FIELDS
from parasol.solver.outputs.report import recompute_cell
from parasol.solver.outputs.writers import write_launch_files
from parasol.solver.search.pools import solve_pools
from parasol.solver.search.savings import NONE, with_saving

TOP = 10
"""Mappings per solution: `parasol solve`'s default --top."""
TIME_LIMIT_S = 600.0
"""Search time limit; every bundled problem is proved optimal far below it."""
COMMAND = "python -m parasol.solver.solutions"
PROBLEMS_DIR = Path(parasol.problems.__file__).resolve().parent
SOLUTIONS_DIR = PROBLEMS_DIR.parent / "solutions"
FILES = ("solution.json", "front.md", "megatron_args.sh", "hosts.txt")
PROVED = ("optimal", "infeasible")
"""Statuses of a search that finished: any other answer may depend on the machine's speed."""


def bundled_problems(problems_dir: Path = PROBLEMS_DIR) -> list[Path]:
    """Every problem file shipped under problems/, by name."""
    return sorted(problems_dir.glob("*.yaml"))


def load_bundled(path: Path) -> Problem:
    """The problem, its source named relative to the repository (problems/<file>) so outputs do not depend on
    where the checkout lies."""
    problem = load_problem(path)
    return dataclasses.replace(problem, source=f"{path.parent.name}/{path.name}")


def solution_dict(problem: Problem, top: int = TOP, time_limit_s: float = TIME_LIMIT_S) -> dict:
    """The `solve --json` object without the search's wall time, with the top and time limit it used."""
    result = solve_pools(problem, top=top, time_limit_s=time_limit_s)
    data = result.as_dict()
    data["search"].pop("seconds")
    data["search"] |= {"top": top, "time_limit_s": time_limit_s}
    return data


def _cell(value: float | None, fmt: str) -> str:
    """A number for the table, '-' when the metric is missing."""
    return "-" if value is None else format(value, fmt)


def front_markdown(problem: Problem, data: dict) -> str:
    """A short human table of the solution: degrees, cut, step time, throughput, MFU, peak memory."""
    lines = [
        f"# {problem.spec.name or problem.source}",
        "",
        f"{problem.model.name} on {problem.gpus:,} x {problem.hardware.gpu.name} ({problem.source}): "
        f"{data['status']}, {len(data['mappings'])} mapping(s). Regenerate with `{COMMAND}`; "
        f"`megatron_args.sh` launches mapping 1 on the host order of `hosts.txt`.",
        "",
        "| # | Pareto rank | TP | PP | CP | EP | ETP | VPP | MBS | recompute | blocks per stage | step s | "
        "tok/s/GPU | MFU | peak GB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, entry in enumerate(data["mappings"], start=1):
        m, metrics = entry["mapping"], entry["metrics"]
        degrees = " | ".join([*(str(m[key]) for key in DEGREES), recompute_cell(entry)])
        lines.append(f"| {k} | {entry['pareto_rank']} | {degrees} | {run_length(m['layout'])} | "
                     f"{_cell(metrics.get('step_time_s'), '.3f')} | {_cell(metrics.get('tokens_per_s_per_gpu'), ',.0f')} | "
                     f"{_cell(metrics.get('mfu'), '.1%')} | {_cell(metrics.get('peak_memory_gb'), '.2f')} |")
    return "\n".join(lines) + "\n"


def problem_of(problem: Problem, entry: dict) -> Problem:
    """The problem a solution entry runs under: the bundled one with the memory saving solve chose for it."""
    return with_saving(problem, entry.get("memory_saving", NONE))


def mapping_of(entry: dict) -> Mapping:
    """The Mapping a solution entry describes."""
    return Mapping.model_validate({k: entry["mapping"][k] for k in COMPARED_FIELDS})


def write_problem(path: Path, out_dir: Path, time_limit_s: float = TIME_LIMIT_S) -> Path:
    """Solve one bundled problem and write its four files into out_dir/<stem>/; returns that folder."""
    problem = load_bundled(path)
    data = solution_dict(problem, time_limit_s=time_limit_s)
    folder = out_dir / path.stem
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "solution.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (folder / "front.md").write_text(front_markdown(problem, data), encoding="utf-8")
    for name in FILES[2:]:
        (folder / name).unlink(missing_ok=True)
    if data["mappings"]:
        first = data["mappings"][0]
        title = f"{path.stem}, mapping 1 of {len(data['mappings'])} (Pareto rank {first['pareto_rank']})"
        write_launch_files(problem_of(problem, first), mapping_of(first), folder, "", title)
    return folder


@dataclass(frozen=True)
class Drift:
    """One difference between a committed solution and a fresh solve."""

    problem: str
    what: str

    def __str__(self) -> str:
        return f"{self.problem}: {self.what}"


def _objective_drifts(name: str, k: int, old: dict, new: dict) -> list[Drift]:
    """Front objective values of mapping k that moved by more than their resolution."""
    out = []
    resolution = new["objective"]["resolution"]
    for objective, value in new["objective"]["front"].items():
        before = old["objective"]["front"].get(objective)
        if before is None or abs(value - before) > resolution[objective] * (1 + 1e-9):
            out.append(Drift(name, f"mapping {k}: {objective} {before} -> {value} (tolerance {resolution[objective]})"))
    return out


def compare(name: str, old: dict, new: dict) -> list[Drift]:
    """Every drift of a fresh solution `new` from the committed `old`."""
    drifts = []
    if old["status"] != new["status"]:
        drifts.append(Drift(name, f"status {old['status']} -> {new['status']}"))
    if new["status"] not in PROVED:
        drifts.append(Drift(name, f"the fresh solve is {new['status']}, not proved within "
                                  f"{new['search']['time_limit_s']} s; its answer may depend on the machine"))
    if len(old["mappings"]) != len(new["mappings"]):
        drifts.append(Drift(name, f"{len(old['mappings'])} -> {len(new['mappings'])} mappings"))
    for k, (before, after) in enumerate(zip(old["mappings"], new["mappings"], strict=False), start=1):
        changed = {f: (before["mapping"][f], after["mapping"][f]) for f in COMPARED_FIELDS
                   if before["mapping"][f] != after["mapping"][f]}
        if changed:
            shown = ", ".join(f"{f} {a} -> {b}" for f, (a, b) in changed.items())
            drifts.append(Drift(name, f"mapping {k}: {shown}"))
        drifts += _objective_drifts(name, k, before, after)
    return drifts


def check_problem(path: Path, out_dir: Path, time_limit_s: float = TIME_LIMIT_S) -> list[Drift]:
    """Re-solve one bundled problem and compare with its committed solution.json."""
    committed = out_dir / path.stem / "solution.json"
    if not committed.is_file():
        return [Drift(path.stem, f"no committed solution ({committed} is missing); run `{COMMAND}`")]
    old = json.loads(committed.read_text(encoding="utf-8"))
    return compare(path.stem, old, solution_dict(load_bundled(path), time_limit_s=time_limit_s))


def stale_solutions(problems: list[Path], out_dir: Path) -> list[Drift]:
    """Solution folders whose problem file is gone."""
    stems = {p.stem for p in problems}
    return [Drift(d.name, f"{d} has no problem file problems/{d.name}.yaml; delete it")
            for d in sorted(out_dir.glob("*/")) if (d / "solution.json").is_file() and d.name not in stems]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--check", is_flag=True, help="re-solve and compare with the committed solutions instead of writing")
@click.option("--problems", "problems_dir", type=click.Path(file_okay=False, path_type=Path), default=PROBLEMS_DIR,
              show_default=True, help="folder of the bundled problem files")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=SOLUTIONS_DIR,
              show_default=True, help="folder of the solutions")
@click.option("--time-limit", "time_limit_s", type=click.FloatRange(1, 86400), default=TIME_LIMIT_S,
              show_default=True, help="seconds per solve")
def main(check: bool, problems_dir: Path, out_dir: Path, time_limit_s: float) -> None:
    """Write (or with --check, verify) the solutions of every bundled problem."""
    problems = bundled_problems(problems_dir)
    try:
        if check:
            drifts = [d for p in problems for d in check_problem(p, out_dir, time_limit_s)]
            drifts += stale_solutions(problems, out_dir)
            for drift in drifts:
                click.echo(f"drift: {drift}")
            click.echo(f"{len(problems)} problem(s) checked, {len(drifts)} drift(s)")
            sys.exit(1 if drifts else 0)
        for p in problems:
            click.echo(f"wrote {write_problem(p, out_dir, time_limit_s)}")
        for stale in stale_solutions(problems, out_dir):
            click.echo(f"note: {stale}")
    except ParasolError as exc:
        click.echo(f"error: {one_paragraph(str(exc))}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
