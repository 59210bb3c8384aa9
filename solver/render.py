"""Human output: rich tables for explain, models and hardware (JSON goes through as_dict)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table

from parasol.solver.explain import Explanation


def _fmt(x: object) -> str:
    if isinstance(x, float):
        return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def explain_tables(ex: Explanation) -> Group:
    """Mapping, derived sizes, verdicts, group placement and the per-stage memory ledger."""
    data = ex.as_dict()
    verdict = "[bold green]FEASIBLE[/]" if ex.feasible else f"[bold red]INFEASIBLE[/] ({len(data['violations'])} rule(s) broken)"
    m = data["mapping"]
    head = (f"{ex.problem.model.name} on {m['gpus']:,} × {ex.problem.hardware.gpu.name}: "
            f"TP{m['tp']} PP{m['pp']} CP{m['cp']} EP{m['ep']} ETP{m['etp']} VPP{m['vpp']} "
            f"MBS{m['mbs']} GBS{m['gbs']} S{m['seq_len']} recompute={m['recompute']}\n"
            f"layout {m['layout']}  →  {verdict}")
    parts: list = [Panel(head, title="parasol explain", expand=False)]

    derived = Table(title="Derived sizes", show_header=True)
    derived.add_column("quantity")
    derived.add_column("value", justify="right")
    for key, value in data["derived"].items():
        if key not in ("layout",) and value is not None:
            derived.add_row(key, _fmt(value))
    parts.append(derived)

    rules = Table(title="Rules")
    for col in ("rule", "holds", "slack", "message", "source / Megatron stage"):
        rules.add_column(col, overflow="fold")
    for v in ex.evaluation.verdicts:
        rules.add_row(v.rule, "[green]yes[/]" if v.holds else "[red]NO[/]", f"{v.slack:g} {v.unit}",
                      v.message if not v.holds or v.family.value == "memory" else v.citation.source.split(";")[0],
                      f"{v.citation.source}\n[dim]{v.citation.stage.value}[/]" if not v.holds else "")
    for rule, why in ex.evaluation.skipped:
        rules.add_row(rule, "[yellow]?[/]", "", why, "")
    parts.append(rules)

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
    return Group(*parts)


def print_explanation(ex: Explanation, console: Console) -> None:
    """Print the explain tables."""
    console.print(explain_tables(ex))


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
