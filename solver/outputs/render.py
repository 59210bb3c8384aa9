"""Human output: rich tables for explain, solve, models and hardware (JSON goes through as_dict)."""

from __future__ import annotations

import csv
import io
import textwrap
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.errors import MarkupError
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from parasol.constraints.core.base import Verdict
from parasol.problems.mapping import DEGREES
from parasol.problems.megatron.layout_string import run_length
from parasol.solver.diagnose.explain import Explanation
from parasol.solver.diagnose.repairs import SEARCHED
from parasol.solver.outputs.report import recompute_cell
from parasol.solver.outputs.summary import degrees_text, signed
from parasol.solver.search.objectives import STEP_DIGITS

if TYPE_CHECKING:
    from parasol.problems.loader import Problem
    from parasol.solver.calibrate import CalibrationReport
    from parasol.solver.search.solve import SolveResult


def _fmt(x: object) -> str:
    if isinstance(x, float):
        return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def verdict_status(v: Verdict) -> str:
    """The holds cell of one rule: NO, or how it holds (binding, yes, exact, not in force)."""
    if not v.holds:
        return "[red]NO[/]"
    if v.binding:
        return "[bold yellow]yes, binding[/]"
    if not v.in_force:
        return "[dim]yes, not in force[/]"
    return "[green]yes, exact[/]" if v.exact else "[green]yes[/]"


def explain_tables(ex: Explanation) -> Group:
    """Mapping, derived sizes, verdicts, group placement and the per-stage memory ledger."""
    data = ex.as_dict()
    verdict = "[bold green]FEASIBLE[/]" if ex.feasible else f"[bold red]INFEASIBLE[/] ({len(data['violations'])} rule(s) broken)"
    m = data["mapping"]
    head = (f"{ex.problem.model.name} on {m['gpus']:,} × {ex.problem.hardware.gpu.name}: "
            f"{degrees_text(ex.problem.model, m, data['derived'])}\n"
            f"layout {m['layout']}  →  {verdict}")
    nodes = data["metrics"]
    if nodes["idle_gpus"]:
        head += (f"\npartial nodes: {nodes['ranks_per_node']} ranks on each of {nodes['nodes']} node(s), "
                 f"{nodes['idle_gpus']} GPU(s) idle")
    parts: list = [Panel(head, title="parasol explain", expand=False)]

    hidden = () if ex.problem.model.moe is not None else MOE_FIELDS
    derived = Table(title="Derived sizes", show_header=True)
    derived.add_column("quantity")
    derived.add_column("value", justify="right")
    for key, value in data["derived"].items():
        if key not in ("layout", *hidden) and value is not None:
            derived.add_row(key, _fmt(value))
    parts.append(derived)

    rules = Table(title="Rules (binding: an inequality exactly at its limit; exact: holds by divisibility, "
                        "equality or setting; not in force: its condition does not apply)")
    for col in ("rule", "holds", "slack", "message", "source / Megatron stage"):
        rules.add_column(col, overflow="fold")
    for v in ex.evaluation.verdicts:
        rules.add_row(v.rule, verdict_status(v), f"{signed(v.slack, 6)} {v.unit}",
                      v.message if not v.holds or v.family.value == "memory" else v.citation.source.split(";")[0],
                      f"{v.citation.source}\n[dim]{v.citation.stage.value}[/]" if not v.holds else "")
    for rule, why in ex.evaluation.skipped:
        rules.add_row(rule, "[yellow]?[/]", "", why, "")
    parts.append(rules)
    if has_contract(ex):
        parts.extend(contract_parts(data))
    parts.extend(repair_parts(ex))

    if data["groups"]:
        groups = Table(title="Parallel groups under Megatron's rank order (tp-cp-ep-dp-pp)")
        for col in ("group", "size", "count", "nodes spanned", "NVLink domains spanned"):
            groups.add_column(col, justify="right" if col != "group" else "left")
        for g in data["groups"]:
            groups.add_row(g["group"], _fmt(g["size"]), _fmt(g["count"]), _fmt(g["max_nodes"]),
                           _fmt(g["max_nvlink_domains"]))
        parts.append(groups)

    if data["stages"]:
        ledger = Table(title=f"Memory of the heaviest rank per stage (GB, usable {data['metrics']['usable_hbm_gb']:.2f})")
        ledger.add_column("term")
        for s in data["stages"]:
            ledger.add_column(f"stage {s['stage']}\n{s['layers']} blocks ({s['moe_layers']} MoE)", justify="right")
        for term in data["stages"][0]["memory_terms_gb"]:
            ledger.add_row(term, *(f"{s['memory_terms_gb'][term]:.2f}" for s in data["stages"]))
        ledger.add_row("[bold]total[/]", *(f"[bold]{s['memory_gb']:.2f}[/]" for s in data["stages"]))
        ledger.add_row("slack", *((f"[green]{s['slack_gb']:.2f}[/]" if s["slack_gb"] >= 0 else f"[red]{s['slack_gb']:.2f}[/]")
                                  for s in data["stages"]))
        parts.append(ledger)
        parts.append("[dim]" + "\n".join(f"• {a}" for a in data["assumptions"]) + "[/]")
    parts.extend(step_time_parts(data, moe=ex.problem.model.moe is not None))
    return Group(*parts)


MOE_FIELDS = ("dp_expert", "tokens_per_ep_dispatch", "assignments_per_expert", "experts_per_rank")
"""Derived sizes that mean something only for MoE models."""


def has_contract(ex: Explanation) -> bool:
    """Whether the problem file has a `contract:` section (only then is its table printed)."""
    return "contract" in ex.problem.spec.model_fields_set


def step_time_parts(data: dict, moe: bool = True) -> list:
    """The predicted step time: its breakdown (they sum to the step), per-stage microbatch times, throughput."""
    step = data.get("step_time")
    if not step:
        return []
    total = step["step_time_s"]
    table = Table(title=f"Predicted step time {total:,.3f} s")
    table.add_column("where the time goes")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for kind, seconds in step["breakdown_s"].items():
        if kind in ("ep", "dp_expert") and not moe:
            continue
        label = {"compute": "compute", "bubble": "bubble", "optimizer": "optimizer step",
                 "offload": "exposed activation offload"}.get(kind, f"exposed {kind} communication")
        table.add_row(label, f"{seconds:,.3f}", f"{seconds / total:.1%}" if total else "-")
    parts: list = [table]
    times = [s.get("time_ms") for s in data["stages"]]
    if times and all(t is not None for t in times):
        parts.append("per-microbatch forward+backward by stage (ms): "
                     + ", ".join(f"{t:,.1f}" for t in times)
                     + f"; slowest stage {step['critical_stage']}")
    parts.append(f"{step['tokens_per_s']:,.0f} tokens/s = {step['tokens_per_s_per_gpu']:,.1f} per GPU, "
                 f"{step['model_tflops_per_gpu']:,.1f} model TFLOP/s/GPU; MFU {step['mfu']:.1%} of the "
                 f"{step['precision'].upper()} dense peak ({step['peak_tflops']:,.0f} TFLOP/s), "
                 f"{step['mfu_bf16']:.1%} of BF16; HFU {step['hfu']:.1%}")
    parts.append(f"[dim]step-time coefficients: {step['coefficients']}[/]")
    return parts


VERDICT_STYLE = {"holds": "[green]holds[/]", "fails": "[red]FAILS[/]", "not checked": "[yellow]not checked[/]"}


def contract_parts(data: dict) -> list:
    """Seed 003 §9's contract table: per domain the recorded quantities, the criterion and its verdict."""
    rows = data.get("contract") or []
    if not rows:
        return []
    table = Table(title="Seed 003 contract (§9)")
    for col in ("domain", "recorded", "check", "verdict", "why"):
        table.add_column(col, overflow="fold")
    for r in rows:
        recorded = "\n".join(f"{q['name']}: {_fmt(q['value'])} {q['unit']}".rstrip() for q in r["recorded"])
        table.add_row(f"{r['domain']}\n[dim]{r['source']}[/]", recorded, r["check"],
                      VERDICT_STYLE.get(r["verdict"], r["verdict"]), r["detail"])
    return [table]


def repair_parts(ex: Explanation) -> list:
    """For an infeasible mapping: the minimal conflicting set and the nearest feasible repairs."""
    if ex.feasible:
        return []
    parts: list = []
    if ex.conflict:
        note = ex.as_dict()["minimal_conflict_note"]
        parts.append(f"[bold]Minimal conflicting set[/]: {', '.join(ex.conflict)} [dim]({note})[/]")
    if not ex.repairs:
        parts.append(f"[bold]Nearest feasible repairs[/]: none {SEARCHED}")
        return parts
    table = Table(title="Best feasible repairs (fastest modelled step among the fewest changed fields)")
    for col in ("#", "repair", "mapping", "step s", "peak GB"):
        table.add_column(col, overflow="fold")
    for i, r in enumerate(ex.repairs, start=1):
        d = r.as_dict()
        m = d["mapping"]
        dp = {"dp_attn": m["gpus"] / (m["tp"] * m["pp"] * m["cp"]), "dp_expert": m["gpus"] / (m["etp"] * m["ep"] * m["pp"])}
        dp = {k: int(v) if float(v).is_integer() else v for k, v in dp.items()}
        table.add_row(str(i), r.text, f"{degrees_text(ex.problem.model, m, dp)}, layout {run_length(m['layout'])}",
                      "-" if r.step_time_s is None else f"{r.step_time_s:,.3f}",
                      "-" if r.peak_memory_gb is None else f"{r.peak_memory_gb:,.1f}")
    parts.append(table)
    return parts


def print_explanation(ex: Explanation, console: Console) -> None:
    """Print the explain tables."""
    console.print(explain_tables(ex))


def _plain(cell: object) -> str:
    """A cell's text without styles."""
    if isinstance(cell, Text):
        return cell.plain
    try:
        return Text.from_markup(str(cell)).plain
    except MarkupError:
        return str(cell)


def table_cells(table: Table) -> tuple[list[str], list[list[str]]]:
    """The headers and rows of `table` as plain text."""
    headers = [_plain(c.header).replace("\n", " ") for c in table.columns]
    columns = [[_plain(cell) for cell in c.cells] for c in table.columns]
    return headers, [list(row) for row in zip(*columns, strict=True)]


def natural_width(table: Table) -> int:
    """Columns `table` needs to print without wrapping any cell."""
    console = Console(width=100_000, file=io.StringIO())
    return console.measure(table).maximum


def records(table: Table, width: int) -> Group:
    """`table` as one block per row ('header value' pairs wrapped between pairs), so a table wider than
    the terminal still prints every number and name whole."""
    headers, rows = table_cells(table)
    parts: list = []
    if table.title:
        parts.append(Text.from_markup(f"[bold]{table.title}[/]") if isinstance(table.title, str) else table.title)
    for row in rows:
        pairs = [f"{h}: {v}" for h, v in zip(headers[1:], row[1:], strict=True) if v not in ("", "-")]
        lines = textwrap.wrap("   ".join(p.replace(" ", "\u00a0") for p in pairs), width=max(width - 2, 20))
        parts.append(Text(f"{headers[0]} {row[0]}", style="bold"))
        parts.extend(Text("  " + line.replace("\u00a0", " ")) for line in lines)
    if table.caption:
        parts.append(Text(_plain(table.caption), style="dim"))
    return Group(*parts)


def fitted(table: Table, width: int) -> RenderableType:
    """`table` when it fits `width` columns; otherwise its rows as records (nothing cut inside a cell)."""
    return table if natural_width(table) <= width else records(table, width)


def table_text(table: Table, fmt: str) -> str:
    """`table` as CSV or a Markdown table (plain text, every cell whole)."""
    headers, rows = table_cells(table)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(rows)
        return out.getvalue()
    def md(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
    title = f"{_plain(table.title)}\n\n" if table.title else ""
    return title + "\n".join([md(headers), md(["---"] * len(headers)), *map(md, rows)]) + "\n"


def show_table(table: Table, console: Console, fmt: str = "table") -> None:
    """Print `table` in `fmt`: on the console fitted to its width, or as CSV / Markdown text."""
    if fmt == "table":
        console.print(fitted(table, console.width))
    else:
        console.file.write(table_text(table, fmt))


def front_table(result: SolveResult, problem: Problem) -> Table:
    """One row per mapping: rank, degrees, layout, predicted time and throughput, peak memory and the
    TB crossing the scale-out network per step; the title names the front's two objectives."""
    front = " × ".join(o.value for o in problem.spec.objectives)
    table = Table(title=f"{problem.model.name} on {problem.gpus:,} × {problem.hardware.gpu.name}, front {front}: "
                        f"{result.status}, {len(result.mappings)} mapping(s) "
                        + (f"({result.rows_fitting} of {result.rows} degree rows found to fit in memory)"
                           if result.rows_screened >= result.rows else
                           f"({result.rows_fitting} of the {result.rows_screened} degree rows screened within the "
                           f"time limit found to fit in memory; {result.rows} in the space)"))
    accounts = [sm.as_dict() for sm in result.mappings]
    pooled = bool(accounts) and {d["mapping"]["gpus"] for d in accounts} != {problem.gpus}
    goodput = any("effective_tokens_per_s" in d["metrics"] for d in accounts)
    orders = len({d["mapping"]["rank_order"] for d in accounts}) > 1
    chosen = chosen_columns(problem, accounts)
    columns = ("front", *(("GPUs",) if pooled else ()), "TP", "PP", "CP", "EP", "ETP", "VPP", "MBS", "recompute",
               *(("rank order",) if orders else ()), *chosen.values(), "m",
               "bubble", "blocks per stage", "step s", "tok/s/GPU", "MFU", "peak GB", "net TB",
               *(("eff. tok/s",) if goodput else ()))
    for col in columns:
        table.add_column(col, justify="left" if col in ("recompute", "rank order", "blocks per stage", *chosen.values())
                         else "right", overflow="fold")
    for sm, d in zip(result.mappings, accounts, strict=True):
        m, metrics, derived = d["mapping"], d["metrics"], d["derived"]
        table.add_row(
            str(sm.pareto_rank), *([f"{m['gpus']:,}"] if pooled else []),
            *(str(m[k]) for k in DEGREES), recompute_cell(d),
            *([m["rank_order"]] if orders else []),
            *(chosen_cell(problem, d["settings"], k) for k in chosen),
            str(derived["num_microbatches"]), f"{derived['bubble_fraction']:.1%}", run_length(m["layout"]),
            f"{metrics.get('step_time_s', float('nan')):.{STEP_DIGITS}f}", f"{metrics.get('tokens_per_s_per_gpu', 0):,.0f}",
            f"{metrics.get('mfu', 0):.1%}", f"{metrics.get('peak_memory_gb', 0):.2f}",
            f"{metrics.get('network_tb_per_step', float('nan')):,.1f}",
            *([f"{metrics.get('effective_tokens_per_s', float('nan')):,.0f}"] if goodput else []),
        )
    return table


def chosen_cell(problem: Problem, settings: dict, option: str) -> str:
    """A chosen option as the table shows it: the flex dispatcher with its backend, a2a+p2p with its
    hierarchical CP sizes (the row's choice, else the problem's option)."""
    def value(key: str) -> object:
        return settings.get(key, getattr(problem.spec.framework.options, key))

    shown = str(value(option))
    if option == "moe_token_dispatcher_type" and shown == "flex":
        return f"flex {value('moe_flex_dispatcher_backend')}"
    if option == "cp_comm_type" and shown == "a2a+p2p":
        return f"a2a+p2p {'x'.join(str(s) for s in value('hierarchical_context_parallel_sizes') or ())}"
    return shown


def chosen_columns(problem: Problem, accounts: list[dict]) -> dict[str, str]:
    """The options the solver chose worth a column ({option: header}): the dispatcher for a MoE model, the
    CP communication type when a mapping has CP > 1."""
    out = {}
    if problem.model.moe is not None:
        out["moe_token_dispatcher_type"] = "dispatcher"
    if any(d["mapping"]["cp"] > 1 for d in accounts):
        out["cp_comm_type"] = "CP comm"
    return out


def models_table(rows: list[dict]) -> Table:
    """`parasol models`: totals and the three conventions of active parameters."""
    table = Table(title="Model catalog (parameters in billions)")
    for col in ("name", "blocks", "experts", "total", "total+MTP", "active (emb+head)",
                "active (head only)", "active (no emb)", "published total/active"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        table.add_row(*(str(r[k]) for k in ("name", "blocks", "experts", "total", "total_with_mtp", "active_with_embedding",
                                            "active_head_only", "active_no_embedding", "published")))
    return table


def hardware_table(rows: list[dict]) -> Table:
    """`parasol hardware`: presets with GPU, memory and link figures."""
    table = Table(title="Hardware presets")
    for col in ("preset", "GPU", "BF16 TFLOP/s", "HBM GB", "usable GB", "GPUs/node", "NVLink domain",
                "NVLink GB/s/dir", "NIC GB/s/dir", "quirks"):
        table.add_column(col, justify="left" if col in ("preset", "GPU", "quirks") else "right")
    for r in rows:
        table.add_row(*(str(r[k]) for k in ("preset", "gpu", "bf16", "hbm", "usable", "node", "domain", "nvlink",
                                            "nic", "quirks")))
    return table


def calibration_tables(report: CalibrationReport) -> Group:
    """`parasol calibrate`: fitted coefficients per GPU type, the fit error, and the excluded runs."""
    stems = list(report.files)
    coefs = Table(title="Step-time coefficients per GPU type (fitted ones marked *)")
    coefs.add_column("coefficient")
    coefs.add_column("unit")
    for stem in stems:
        coefs.add_column(stem, justify="right")
    coefs.add_column("default", justify="right")
    for name in [c.name for c in report.files[stems[0]].coefficients] if stems else []:
        rows = [next(c for c in report.files[s].coefficients if c.name == name) for s in stems]
        coefs.add_row(name, rows[0].unit, *(f"{c.value:.4g}{'*' if c.source == 'fitted' else ''}" for c in rows),
                      f"{rows[0].default:g}")
    error = Table(title=f"Fit error of tokens/s/GPU (median APE over all fitted runs {report.overall_mape:.1f}%)")
    for col in ("GPU type", "file", "runs", "models", "median APE %", "mean APE %", "max APE %"):
        error.add_column(col, justify="left" if col in ("GPU type", "file") else "right")
    for stem in stems:
        f, e = report.files[stem], report.files[stem].fit_error
        error.add_row(f.gpu_type, f"{stem}.yaml", f"{int(e['runs'])}", f"{len(report.fits[stem].models)}",
                      f"{e['median_ape_pct']:.1f}", f"{e['mean_ape_pct']:.1f}", f"{e['max_ape_pct']:.1f}")
    reasons: dict[str, int] = {}
    for x in report.exclusions:
        reasons[x.reason] = reasons.get(x.reason, 0) + 1
    excluded = Table(title=f"Runs left out ({len(report.exclusions)})")
    excluded.add_column("runs", justify="right")
    excluded.add_column("reason")
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        excluded.add_row(str(count), reason)
    return Group(coefs, error, excluded)

