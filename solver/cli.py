"""The `parasol` command line: models, hardware, explain (solve and sweep build on the same pieces).

Exit codes: 0 feasible / success, 1 infeasible (no mapping fits), 2 bad input, 3 internal error (a bug
in parasol), 130 interrupted. Bad input never shows a traceback: every ParasolError becomes one
paragraph on stderr; an internal error prints one line, and its traceback only with `--debug`.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any

import click
import yaml
from click.core import ParameterSource
from pydantic import ValidationError

from parasol.bounds import MAX_GPUS, MAX_TIME_LIMIT_S, MIN_TIME_LIMIT_S
from parasol.errors import ParasolError, dotted, one_paragraph, short
from parasol.files import check_output, forget_reads
from parasol.hardware.presets import load_preset, preset_names
from parasol.problems.model.catalog import catalog_names, load_model, model_summary
from parasol.solver.diagnose.explain import explain as explain_mapping

if TYPE_CHECKING:
    from rich.console import Console

    from parasol.solver.search.solve import SearchProgress

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130
EXIT_CODES_HELP = ("Exit codes: 0 feasible / done, 1 infeasible (no mapping fits), 2 bad input, "
                   "3 internal error (a bug in parasol: please report it), 130 interrupted.")


WIDE = 100_000
"""Console width when stdout is not a terminal: tables print whole, nothing is cut or wrapped."""
TEXT_WIDTH = 100
"""Wrap width of explain's text lines when stdout is not a terminal."""


def _console() -> Console:
    """The terminal's own width on a terminal; otherwise wide enough that no table is cut (rich is imported
    here, by the commands that print tables, so that `solve --json` starts without it)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=WIDE)


def _text_width(console: Console) -> int:
    return console.width if console.is_terminal else TEXT_WIDTH


TABLE_FORMATS = ("table", "csv", "md")
"""`--format`: a terminal table (records when it does not fit), CSV or a Markdown table."""
FORMAT = click.option("--format", "fmt", type=click.Choice(TABLE_FORMATS), default="table", show_default=True,
                      help="table: fitted to the terminal (rows as records when too wide); csv or md: plain text")


def _escaped_input_error(exc: ValidationError | yaml.YAMLError) -> str:
    """Bad input that reached a schema or YAML reader outside the loader, as one paragraph."""
    if isinstance(exc, yaml.YAMLError):
        return f"Not valid YAML: {exc}. Fix: correct the YAML input."
    err = exc.errors()[0]
    field = dotted(tuple(p for p in err["loc"] if isinstance(p, int) or str(p).isidentifier())) or exc.title
    value = f" Field `{field}` has value {short(err['input'])}." if "input" in err else ""
    return f"Invalid {exc.title} input: {err['msg']}.{value} Fix: correct `{field}`."


def reports_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn bad input into one paragraph on stderr and exit code 2: parasol's own errors, and any
    schema or YAML error that escaped translation. Every other exception is a bug and propagates."""
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ParasolError as exc:
            click.echo(f"error: {one_paragraph(str(exc))}", err=True)
        except (ValidationError, yaml.YAMLError) as exc:
            click.echo(f"error: {one_paragraph(_escaped_input_error(exc))}", err=True)
        except OSError as exc:
            name = f" {short(exc.filename)}" if exc.filename else ""
            click.echo(f"error: Cannot read or write{name}: {exc.strerror or exc}. Fix: check the path and its "
                       "permissions.", err=True)
        sys.exit(EXIT_BAD_INPUT)
    return wrapper


def _billions(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:,.2f}"


def internal_error_line(exc: BaseException) -> str:
    """The one line an uncaught exception prints: it is a bug, what it was, and how to report it."""
    what = one_paragraph(f"{type(exc).__name__}: {exc}")
    return (f"internal error (a bug in parasol, not in your input): {short_text(what)}. Please report it on "
            "parasol's issue tracker with the command line, the input files and `parasol --version`; rerun with "
            "`parasol --debug …` for the traceback.")


def short_text(text: str, limit: int = 200) -> str:
    """Text cut to `limit` characters, so that one huge value cannot flood the terminal."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ParasolGroup(click.Group):
    """The command group: an uncaught exception exits with its own code (3) and one line, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted.", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:  # every other exception is a bug: one line, the traceback on --debug
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
            click.echo(f"error: {internal_error_line(exc)}", err=True)
            sys.exit(EXIT_INTERNAL)


PROCESS_ENTRY: dict[str, float] = {}
"""{"started": parasol.STARTED_S} when a process entry point (run, solve_main) starts the command, so its
--time-limit counts the imports too; taken by the first command, so later in-process commands (tests,
scripts calling `main`) count from their own start."""


def command_start() -> float:
    """The perf_counter() time a command's --time-limit counts from."""
    return PROCESS_ENTRY.pop("started", time.perf_counter())


@click.group(cls=ParasolGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="parasol")
@click.option("--debug", is_flag=True, help="on an internal error (exit 3) also print the Python traceback")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """parasol: plan the parallel mapping of an LLM training run (CP-SAT)."""
    forget_reads()
    ctx.obj = {"debug": debug, "started": command_start()}


@main.command(epilog=EXIT_CODES_HELP)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@FORMAT
@reports_errors
def models(as_json: bool, fmt: str) -> None:
    """List the model catalog with total and active parameters (three vendor conventions)."""
    from parasol.solver.outputs.render import models_table, show_table

    rows = [model_summary(load_model(name)) for name in catalog_names()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table_rows = []
    for r in rows:
        pub = r["published"]
        table_rows.append({
            **{k: _billions(r[k]) for k in ("total", "total_with_mtp", "active_with_embedding",
                                             "active_head_only", "active_no_embedding")},
            "name": r["name"],
            "blocks": _blocks_text(r),
            "experts": f"{r['experts']} top-{r['top_k']}" if r["experts"] else "-",
            "published": f"{_billions(pub['total'])} / {_billions(pub['active'])}",
        })
    show_table(models_table(table_rows), _console(), fmt)


@main.command(epilog=EXIT_CODES_HELP)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@FORMAT
@reports_errors
def hardware(as_json: bool, fmt: str) -> None:
    """List the hardware presets: GPU, usable HBM, node and NVLink-domain sizes, link bandwidths."""
    from parasol.solver.outputs.render import hardware_table, show_table

    presets = {name: load_preset(name) for name in preset_names()}
    if as_json:
        click.echo(json.dumps({n: p.model_dump(mode="json") for n, p in presets.items()}, indent=2))
        return
    rows = []
    for name, p in presets.items():
        t, g = p.topology, p.gpu
        rows.append({
            "preset": name, "gpu": g.name, "bf16": f"{g.bf16_dense_tflops:g}", "hbm": f"{g.hbm_gb:g}",
            "usable": f"{g.usable_hbm_gb:.1f}", "node": t.gpus_per_node, "domain": t.gpus_per_nvlink_domain,
            "nvlink": f"{t.nvlink_gb_s:g}", "nic": f"{t.nic_gb_s:g}",
            "quirks": "fixed-size all-to-all" if t.fixed_size_all_to_all else "",
        })
    show_table(hardware_table(rows), _console(), fmt)


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("problem", type=click.Path(), required=False)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="pin a mapping field: gpus, tp, pp, cp, ep, etp, vpp, mbs, gbs, seq_len, recompute, layout, rank_order")
@click.option("--megatron-args", "megatron_args", metavar="TEXT",
              help="a Megatron-LM launch line; its flags override the problem's mapping, training and options")
@click.option("--megatron-args-file", type=click.Path(dir_okay=False), metavar="SCRIPT",
              help="a launch script (backslash continuations, NAME=value and NAME=( … ) arrays, $(( … )) "
                   "arithmetic and #SBATCH node counts are read)")
@click.option("--hardware", "preset", metavar="PRESET", help="without PROBLEM: the hardware preset (`parasol hardware`)")
@click.option("--gpus", type=click.IntRange(1, MAX_GPUS),
              help="without PROBLEM: GPUs in the job (default: the ranks the launcher starts: torchrun's "
                   "nproc_per_node × nnodes, srun's tasks, mpirun's -np)")
@click.option("--model", "model_name", metavar="NAME",
              help="without PROBLEM: a catalog model instead of the launch line's model flags")
@click.option("--full", is_flag=True, help="print every table: all rules, derived sizes, groups, the memory ledger, "
                                           "the step-time breakdown")
@click.option("--json", "as_json", is_flag=True, help="print the whole account as JSON (every field)")
@reports_errors
def explain(problem: str | None, sets: tuple[str, ...], megatron_args: str | None, megatron_args_file: str | None,
            preset: str | None, gpus: int | None, model_name: str | None, full: bool, as_json: bool) -> None:
    """Say whether one mapping can run and why not: the broken rules with their slack, source and
    Megatron stage, a minimal conflict, the best repairs, step time, throughput, MFU and memory.

    The mapping comes from PROBLEM.yaml, a Megatron-LM launch line (--megatron-args or
    --megatron-args-file) and --set; without PROBLEM, the launch line alone describes the run on
    --hardware PRESET. Unknown Megatron flags are an error (a note after a program that adds its own);
    known flags parasol does not model are listed in one line."""
    from parasol.constraints.physics.memory import recompute_method_gap
    from parasol.problems.inputs import explain_inputs, launch_text
    from parasol.solver.diagnose.explain import fp8_parameters_note
    from parasol.solver.outputs.render import print_explanation
    from parasol.solver.outputs.summary import summary_lines

    launch = launch_text(megatron_args, megatron_args_file)
    inputs = explain_inputs(problem, sets, launch, hardware=preset, gpus=gpus, model_name=model_name)
    result = explain_mapping(inputs.problem, inputs.mapping)
    data = result.as_dict()
    data["warnings"] = [*data["warnings"], *(w.as_dict() for w in inputs.warnings)]
    gap = recompute_method_gap(inputs.mapping, inputs.problem.spec.framework.options)
    fp8 = fp8_parameters_note(inputs.problem, inputs.mapping)
    notes = (*inputs.notes, *(note for note in (gap, fp8) if note))
    data["notes"] = list(notes)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        console = _console()
        if full:
            print_explanation(result, console)
            for w in inputs.warnings:
                console.print(f"warning ({w.flag}): {w.message} [{w.source}]", markup=False)
        else:
            for line in summary_lines(result, data, _text_width(console)):
                console.print(line, soft_wrap=True)
        for line in note_lines(notes):
            console.print(line, markup=False, soft_wrap=not full)
    sys.exit(0 if result.feasible else EXIT_INFEASIBLE)


def note_lines(notes: tuple[str, ...]) -> list[str]:
    """Launch-line notes: the known Megatron flags parasol does not model in one line, then the others."""
    from parasol.problems.megatron.flags import NOT_MODELLED

    skipped = [n.removeprefix(NOT_MODELLED) for n in notes if n.startswith(NOT_MODELLED)]
    lines = [f"note: {n}" for n in notes if not n.startswith(NOT_MODELLED)]
    if skipped:
        lines.append(f"not modelled ({len(skipped)} known Megatron flag(s) parasol does not model): "
                     + ", ".join(skipped))
    return lines


def _blocks_text(summary: dict) -> str:
    """Blocks of a catalog model: dense D + MoE M (+ MTP), or a hybrid pattern's layers per symbol."""
    pattern = summary.get("layer_pattern")
    if pattern:
        text = "+".join(f"{pattern.count(s)}{s}" for s in "MG*-E" if s in pattern)
    else:
        text = f"{summary['dense_blocks']}D+{summary['moe_blocks']}M"
    return text + (f"+{summary['mtp_layers']}MTP" if summary["mtp_layers"] else "")


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--gpu-type", "gpu_type", metavar="T",
              help="fit only this GPU type: a gpu_type of the runs (e.g. GB200-NVL72) or a file stem (gb200)")
@click.option("--out", "out", type=click.Path(), default="calibration", show_default=True,
              help="directory for one <gpu>.yaml per GPU type, or a .yaml file when one GPU type is fitted")
@reports_errors
def calibrate(runs: str, gpu_type: str | None, out: str) -> None:
    """Fit the step-time coefficients per GPU type to measured runs (RUNS.yaml in the format of
    measured-configs.yaml), print them with the fit error, and write the calibration files.

    Copy a written file into hardware/coefficients/ to make every preset with that GPU use it. The fit
    (scipy) is imported here only, so the other commands start without it."""
    from pathlib import Path

    from parasol.hardware.calibration import read_runs
    from parasol.solver.calibrate import ASSUMPTIONS, calibrate_runs, write_calibration
    from parasol.solver.outputs.render import calibration_tables

    measured = read_runs(runs)
    check_output(out, "--out")
    report = calibrate_runs(measured, gpu_type)
    written = write_calibration(report, Path(out))
    console = _console()
    console.print(calibration_tables(report))
    for note in ASSUMPTIONS:
        console.print(f"assumption: {note}", markup=False)
    for path in written:
        console.print(f"wrote {path}", markup=False)


def _time_limit(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """--time-limit: finite seconds from MIN_TIME_LIMIT_S to MAX_TIME_LIMIT_S (click's FloatRange lets NaN through)."""
    if not math.isfinite(value) or not MIN_TIME_LIMIT_S <= value <= MAX_TIME_LIMIT_S:
        raise click.BadParameter(f"{value} is not a number of seconds from {MIN_TIME_LIMIT_S} to {MAX_TIME_LIMIT_S:,.0f}.",
                                 ctx=ctx, param=param)
    return value


def _check_pick(count: int, pick: int, picked: bool) -> None:
    """--pick N must name one of the `count` (at least one) listed mappings."""
    if pick > count:
        given = f"--pick {pick}" if picked else f"mapping {pick}"
        raise ParasolError(f"{given} but the answer has {count} mapping(s). Fix: pick one of those listed "
                           f"(--pick 1 to {count}).")


def _report_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Check a --report file name's suffix before any solving, so a typo costs no search time."""
    if value is not None:
        from pathlib import Path

        from parasol.solver.outputs.report import report_format

        try:
            report_format(Path(value))
        except ParasolError as exc:
            raise click.BadParameter(one_paragraph(str(exc)), ctx=ctx, param=param) from None
    return value


MIN_SEARCH_S = 0.1
"""Seconds a search gets however much of its time limit starting the command took."""


def left_of(time_limit: float) -> float:
    """What is left of a command's --time-limit after starting up (imports, loading the problem)."""
    started = click.get_current_context().find_root().obj["started"]
    return max(time_limit - (time.perf_counter() - started), MIN_SEARCH_S)


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("problem", type=click.Path())
@click.option("--top", default=10, show_default=True, type=click.IntRange(1, 1000),
              help="mappings to return: whole Pareto fronts until at least this many")
@click.option("--time-limit", "time_limit", default=60.0, show_default=True, type=float, callback=_time_limit,
              help="seconds for the search; a cut-off search returns the best found, marked feasible")
@click.option("--out", "out", type=click.Path(file_okay=False), help="write the solution file into this folder")
@click.option("--rank-map", "rank_map", type=click.Path(dir_okay=False),
              help="write the rank → (NVLink domain, node, GPU) map of the chosen mapping as CSV")
@click.option("--pick", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="which mapping of the answer --rank-map writes (1 = the first listed)")
@click.option("--json", "as_json", is_flag=True, help="print {\"status\", \"mappings\": [...]} as JSON")
@click.option("--report", "report", type=click.Path(dir_okay=False), metavar="FILE", callback=_report_path,
              help="write a report with plots: FILE.html (self-contained) or FILE.md (PNGs in FILE_files/); "
                   "its account is of mapping --pick")
@FORMAT
@click.option("--emit", "emit", type=click.Choice(["megatron"]),
              help="print the Megatron-LM launch flags of every listed mapping (only mapping N with --pick N) "
                   "instead of the table; with --out also write <name>.<k>.megatron_args.sh and <name>.<k>.hosts.txt")
@reports_errors
def solve(problem: str, top: int, time_limit: float, out: str | None, rank_map: str | None, pick: int,
          as_json: bool, report: str | None, fmt: str, emit: str | None) -> None:
    """Pareto-ranked feasible mappings (step time × peak memory), each with its slack report."""
    from pathlib import Path

    from parasol.problems.loader import load_problem
    from parasol.solver.outputs.writers import write_host_order, write_rank_map, write_solution
    from parasol.solver.search.pools import solve_pools
    from parasol.solver.search.solve import why_not_optimal

    prob = load_problem(problem)
    for path, field in ((rank_map, "--rank-map"), (report, "--report")):
        if path:
            check_output(path, field)
    if rank_map:
        check_output(Path(rank_map).with_suffix(".hosts.txt"), "--rank-map")
    if out and Path(out).exists() and not Path(out).is_dir():
        raise ParasolError(f"--out {out!r} is a file, not a folder. Fix: give a folder path.")
    with search_progress(f"solving {Path(problem).name} (time limit {time_limit:g} s)", sys.stderr.isatty()) as tick:
        result = solve_pools(prob, top=top, time_limit_s=left_of(time_limit), progress=tick)
    picked = click.get_current_context().get_parameter_source("pick") is ParameterSource.COMMANDLINE
    if out:
        path = write_solution(result, prob, Path(out))
        click.echo(f"solution written to {path}", err=True)
    if rank_map and not result.mappings:
        click.echo("no mapping: the rank map is not written.", err=True)
    elif rank_map:
        _check_pick(len(result.mappings), pick, picked)
        path = write_rank_map(result.mappings[pick - 1].explanation.mapping, prob, Path(rank_map))
        click.echo(f"rank map written to {path}", err=True)
        hosts = write_host_order(result.mappings[pick - 1].explanation.mapping, prob, Path(rank_map).with_suffix(".hosts.txt"))
        click.echo(f"host order written to {hosts}", err=True)
    if report:
        from parasol.solver.outputs.report import write_solve_report

        written = write_solve_report(prob, result.as_dict(), Path(report), pick)
        click.echo(f"report written to {written[0]}", err=True)
    if emit:
        _emit_megatron(prob, result, pick if picked else None, out, as_json)
        sys.exit(0 if result.mappings else EXIT_INFEASIBLE)
    why = why_not_optimal(result, prob, time_limit)
    blockers = ()
    if result.status == "infeasible" and result.rows:
        from parasol.solver.diagnose.blocking import blocking_rules

        blockers = blocking_rules(prob)
    if as_json:
        extra = {**({"reason": why} if why else {}), **({"blocking": [b.as_dict() for b in blockers]} if blockers else {})}
        click.echo(json.dumps({**result.as_dict(), **extra}, indent=2))
    else:
        from parasol.solver.diagnose.blocking import blocking_lines
        from parasol.solver.outputs.render import contract_parts, front_table, show_table

        console = _console()
        if result.mappings:
            show_table(front_table(result, prob), console, fmt)
        for gap in _recompute_gaps(prob, result.mappings):
            console.print(f"note: {gap}", markup=False, soft_wrap=True)
        if blockers:
            why = f"no row of the search space meets every rule ({result.rows:,} degree rows)"
        if why:
            console.print(f"{result.status}: {why}", markup=False, soft_wrap=True)
        for line in blocking_lines(blockers, result.rows):
            console.print(line, markup=False, soft_wrap=True)
        if blockers and "contract" in prob.spec.model_fields_set and blockers[0].mapping is not None:
            closest = explain_mapping(prob, blockers[0].mapping, repairs=0)
            console.print(f"Contract of the closest row ({blockers[0].closest}):", markup=False)
            for part in contract_parts(closest.as_dict()):
                show_table(part, console, fmt)
    sys.exit(0 if result.mappings else EXIT_INFEASIBLE)


def _recompute_gaps(prob: Any, mappings: Any) -> list[str]:
    """The recompute-method pricing gaps (memory.recompute_method_gap) of the listed mappings, each said once."""
    from parasol.constraints.physics.memory import recompute_method_gap

    options = prob.spec.framework.options
    gaps = (recompute_method_gap(m.explanation.mapping, options) for m in mappings)
    return list(dict.fromkeys(g for g in gaps if g))


@contextmanager
def search_progress(what: str, enabled: bool) -> Iterator[Callable[[SearchProgress], None] | None]:
    """A bar on stderr while a search runs (only on a terminal): rows priced of the rows listed, then the
    Pareto fronts and mappings found, with the elapsed time. Yields the callback the search reports to,
    or None when the bar is off (then rich is not imported)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[found]}"),
                   TimeElapsedColumn(), console=Console(stderr=True), transient=True)

    def tick(p: SearchProgress) -> None:
        found = f"rows priced; {p.fronts} front(s), {p.mappings} mapping(s)" if p.fronts else "rows priced"
        bar.update(task, completed=p.rows_screened, total=p.rows_total, found=found)

    with bar:
        task = bar.add_task("", total=None, found="listing rows")
        yield tick


def _emit_megatron(prob: Any, result: Any, picked: int | None, out: str | None, as_json: bool) -> None:
    """`solve --emit megatron`: the launch script of every listed mapping (or mapping `picked`) on stdout, as
    JSON with --json; with --out also DIR/<name>.<k>.megatron_args.sh and DIR/<name>.<k>.hosts.txt."""
    from pathlib import Path

    from parasol.solver.outputs.emit import compared_mapping, launch_script, megatron_args
    from parasol.solver.outputs.writers import write_launch_files

    count = len(result.mappings)
    if picked is not None and count:
        _check_pick(count, picked, True)
    name = prob.spec.name or Path(prob.source).stem
    emitted = []
    for k in range(1, count + 1) if picked is None else (picked,) if count else ():
        solved = result.mappings[k - 1]
        mapping, title = solved.explanation.mapping, f"{name}, mapping {k} of {count} (Pareto rank {solved.pareto_rank})"
        chosen = solved.explanation.problem
        if out:
            paths = write_launch_files(chosen, mapping, Path(out), f"{name}.{k}.", title)
            click.echo(f"launch script and host order written to {paths[0]} and {paths[1]}", err=True)
        args = megatron_args(chosen, mapping)
        emitted.append({"index": k, "pareto_rank": solved.pareto_rank, "mapping": compared_mapping(chosen, mapping),
                        "megatron_args": args.pairs(), **({"set_in_code": list(args.in_code)} if args.in_code else {}),
                        "script": launch_script(chosen, mapping, title)})
    if as_json:
        click.echo(json.dumps({"status": result.status, "mappings": emitted}, indent=2))
    else:
        click.echo("\n".join(e["script"] for e in emitted), nl=False)


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("problem", type=click.Path())
@click.option("--gpus", "sizes", required=True, metavar="SIZES",
              help="cluster sizes: 256,512,1024, a range 1024..65536x2 (×2 steps) or 1024..4096+1024, mixed with commas")
@click.option("--weak", is_flag=True,
              help="weak scaling: the global batch grows with the GPUs (the problem's sequences per GPU kept); "
                   "default: strong scaling at the problem's global batch")
@click.option("--backend", default="local", show_default=True, type=click.Choice(["local", "ray", "serial"]),
              help="local: worker processes here; ray: one Ray task per size (--ray-address, or a local Ray); "
                   "serial: one size after another in this process")
@click.option("--workers", type=click.IntRange(1, 4096),
              help="sizes solved at a time (default: every core here, or the Ray cluster's CPUs)")
@click.option("--ray-address", "ray_address", metavar="ADDRESS", help="a running Ray cluster, e.g. ray://head:10001")
@click.option("--top", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="mappings per size: whole Pareto fronts until at least this many (1: the first front)")
@click.option("--time-limit", "time_limit", default=60.0, show_default=True, type=float, callback=_time_limit,
              help="seconds of search per size; a cut-off size returns what it found (feasible) or timeout")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), metavar="FILE.png",
              help="draw step time, tokens/s/GPU and scaling efficiency against the GPU count")
@click.option("--report", "report", type=click.Path(dir_okay=False), metavar="FILE", callback=_report_path,
              help="write a report with the scaling curve: FILE.html (self-contained) or FILE.md (PNGs in FILE_files/)")
@click.option("--json", "as_json", is_flag=True,
              help="print {\"sizes\": [{\"gpus\", \"status\", \"mappings\": [...]}], \"table\", \"notes\"} as JSON")
@FORMAT
@reports_errors
def sweep(problem: str, sizes: str, weak: bool, backend: str, workers: int | None, ray_address: str | None,
          top: int, time_limit: float, plot: str | None, as_json: bool, report: str | None,
          fmt: str) -> None:
    """Solve PROBLEM at several cluster sizes, in parallel: per size the Pareto front and its best
    mapping, a scaling table (step time, tokens/s, MFU, scaling efficiency, m, bubble, D_a, D_e,
    peak memory) and the problem's own mapping priced at every size. Exit 0 when some size has a mapping."""
    from pathlib import Path

    from parasol.solver.sweep.jobs import parse_sizes
    from parasol.solver.sweep.run import run_sweep
    from parasol.solver.sweep.tables import print_sweep, progress_bar

    gpus = parse_sizes(sizes)
    for path, field in ((plot, "--plot"), (report, "--report")):
        if path:
            check_output(path, field, inputs=(problem,))
    with progress_bar(len(gpus), sys.stderr.isatty()) as tick:
        result = run_sweep(problem, gpus, weak=weak, backend=backend, workers=workers, top=top,
                           time_limit_s=time_limit, ray_address=ray_address, progress=tick)
    data = result.as_dict()
    if plot:
        from parasol.solver.outputs.plots import scaling_plot

        click.echo(f"plot written to {scaling_plot(data, Path(plot))}", err=True)
    if report:
        from parasol.solver.outputs.report import write_sweep_report

        click.echo(f"report written to {write_sweep_report(data, Path(report))[0]}", err=True)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        print_sweep(data, _console(), fmt)
    sys.exit(0 if any(s.best is not None for s in result.sizes) else EXIT_INFEASIBLE)


def exit_without_teardown(command: Callable[[], Any]) -> None:
    """Run a process entry point's command, then end the process as soon as its output is out: the exit code
    is the one Python's own exit would give (a non-integer SystemExit code is printed and gives 1, unwritable
    output 120), the exit handlers run (CPython's atexit path: multiprocessing's, Ray's, logging's), but not the
    interpreter's teardown, which frees every table a search built one object at a time (0.1-0.3 s after the
    bundled problems, more after a large search)."""
    code = 0
    try:
        command()
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
            code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120
    atexit._run_exitfuncs()
    os._exit(code)


def run() -> None:
    """The `parasol` command (its time limits count from when parasol was imported)."""
    import parasol

    PROCESS_ENTRY["started"] = parasol.STARTED_S
    exit_without_teardown(main)


def solve_main() -> None:
    """The design card's `solve problem.yaml`: a short alias of `parasol solve` (`--debug` goes to the group)."""
    import parasol

    PROCESS_ENTRY["started"] = parasol.STARTED_S
    args = sys.argv[1:]
    debug = ["--debug"] if "--debug" in args else []
    exit_without_teardown(lambda: main([*debug, "solve", *(a for a in args if a != "--debug")], prog_name="parasol"))


if __name__ == "__main__":
    run()
