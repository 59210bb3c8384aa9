"""The `parasol` command line: models, hardware, explain (solve and sweep build on the same pieces).

Exit codes: 0 feasible / success, 1 infeasible mapping, 2 bad input. Bad input never shows a
traceback: every ParasolError becomes one paragraph on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click
from rich.console import Console

from parasol.errors import ParasolError
from parasol.hardware.presets import load_preset, preset_names
from parasol.problems.catalog import catalog_names, load_model, model_summary
from parasol.problems.loader import load_problem
from parasol.solver.explain import explain as explain_mapping
from parasol.solver.mapping_input import build_mapping, parse_sets
from parasol.solver.render import hardware_table, models_table, print_explanation

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2


def _console() -> Console:
    return Console(width=max(Console().width, 120))


def reports_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn parasol's own errors into one paragraph on stderr and exit code 2."""
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ParasolError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
    return wrapper


def _billions(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:,.2f}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="parasol")
def main() -> None:
    """parasol: plan the parallel mapping of an LLM training run (CP-SAT)."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@reports_errors
def models(as_json: bool) -> None:
    """List the model catalog with total and active parameters (three vendor conventions)."""
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
            "blocks": f"{r['dense_blocks']}D+{r['moe_blocks']}M" + (f"+{r['mtp_layers']}MTP" if r["mtp_layers"] else ""),
            "experts": f"{r['experts']} top-{r['top_k']}" if r["experts"] else "-",
            "published": f"{_billions(pub['total'])} / {_billions(pub['active'])}",
        })
    _console().print(models_table(table_rows))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@reports_errors
def hardware(as_json: bool) -> None:
    """List the hardware presets: GPU, usable HBM, node and NVLink-domain sizes, link bandwidths."""
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
    _console().print(hardware_table(rows))


@main.command()
@click.argument("problem", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="pin a mapping field: gpus, tp, pp, cp, ep, etp, vpp, mbs, gbs, seq_len, recompute, layout")
@click.option("--json", "as_json", is_flag=True, help="print the account as JSON (the BRIEF's contract)")
@reports_errors
def explain(problem: str, sets: tuple[str, ...], as_json: bool) -> None:
    """Account for one mapping: derived sizes, every rule's verdict, groups and per-stage memory."""
    prob = load_problem(problem)
    mapping = build_mapping(prob, parse_sets(sets))
    result = explain_mapping(prob, mapping)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        print_explanation(result, _console())
    sys.exit(0 if result.feasible else EXIT_INFEASIBLE)
