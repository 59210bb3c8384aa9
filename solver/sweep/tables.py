"""The sweep as terminal tables: the scaling table, the problem's own mapping at every size, and the
progress bar."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from parasol.solver.sweep.jobs import SizeResult, count_cell, short_label

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.table import Table


# --- the table ---------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    """A share as a table cell."""
    return "-" if x is None else f"{x:.1%}"


def _fixed(x: float | None, fmt: str) -> str:
    """A number as a table cell in `fmt`, '-' when missing."""
    return "-" if x is None else format(x, fmt)


def _best_cell(size: dict) -> str:
    """The best mapping of a size, its status when it is not a proven optimum, or the status alone."""
    if size["best"] is None:
        return size["status"]
    label = short_label(size["best"]["mapping"])
    return label if size["status"] == "optimal" else f"{label} ({size['status']})"


def _millions(x: float | None) -> str:
    """Tokens/s as a table cell in millions."""
    return "-" if x is None else f"{x / 1e6:,.2f}M"


def scaling_tables(sweep: dict) -> Group:
    """The scaling table (one row per size) and, when the problem names a mapping, that mapping at
    each size against the best; then the notes."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    strong = sweep["scaling"] == "strong"
    run = sweep["run"]
    table = Table(title=f"{sweep['model']} on {sweep['gpu']}: {sweep['scaling']} scaling, best mapping per size "
                        f"({run['backend']} backend, {run['workers']} worker(s), {run['seconds']:.1f} s)",
                  caption="eff: scaling efficiency (tokens/s/GPU against the smallest size with a mapping); "
                          "marg: against the previous size; GB: peak memory; s: seconds to solve the size",
                  box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    columns = ("GPUs", *(() if strong else ("GBS",)), "best mapping", "step s", "tok/s", "tok/s/GPU", "MFU", "eff",
               "marg", "m", "bubble", "D_a", "D_e", "GB", "s")
    for col in columns:
        table.add_column(col, justify="left" if col == "best mapping" else "right", no_wrap=True)
    for row, size in zip(sweep["table"], sweep["sizes"], strict=True):
        table.add_row(f"{row['gpus']:,}", *(() if strong else (count_cell(row["global_batch"]),)), _best_cell(size),
                      _fixed(row.get("step_time_s"), ".3f"), _millions(row.get("tokens_per_s")),
                      _fixed(row.get("tokens_per_s_per_gpu"), ",.0f"), _pct(row.get("mfu")),
                      _pct(row.get("scaling_efficiency")), _pct(row.get("marginal_efficiency")),
                      count_cell(row.get("num_microbatches")), _pct(row.get("bubble_fraction")), count_cell(row.get("dp_attn")),
                      count_cell(row.get("dp_expert")), _fixed(row.get("peak_memory_gb"), ".1f"),
                      f"{size['search']['seconds']:.1f}")
    parts: list = [table]
    if any(s["reference"] for s in sweep["sizes"]):
        parts.append(reference_table(sweep))
    parts.extend(f"note: {n}" for n in sweep["notes"])
    return Group(*parts)


def _fits(mine: dict) -> str:
    """`yes`, or what the problem's mapping breaks (its peak memory when that is the reason)."""
    if mine["feasible"]:
        return "yes"
    broken = [v for v in mine["violations"] if v != "memory-fits-hbm"]
    memory = [f"{mine['peak_memory_gb']:.0f} GB"] if "memory-fits-hbm" in mine["violations"] else []
    return "no: " + ", ".join(memory + broken)


def reference_table(sweep: dict) -> Table:
    """The problem's own mapping at every size: m and bubble (the seed's story), its modelled step
    time and whether it fits, and its nearest feasible repair, beside the best step time."""
    from rich import box
    from rich.table import Table

    labels = {short_label(s["reference"]["mapping"]["mapping"]) for s in sweep["sizes"]
              if s["reference"] and s["reference"]["mapping"]}
    title = "The problem's own mapping" + (f" ({labels.pop()})" if len(labels) == 1 else "") + \
        " at each size, modelled even where it does not fit"
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    for col in ("GPUs", "m", "bubble", "step s", "fits", "nearest feasible repair", "its step s", "best step s"):
        table.add_column(col, justify="left" if col in ("fits", "nearest feasible repair") else "right",
                         overflow="fold")
    for s in sweep["sizes"]:
        ref, best = s["reference"], s["best"]
        if ref is None:
            continue
        mine, near = ref["mapping"], ref["nearest_feasible"]
        best_step = _fixed(best and best["step_time_s"], ".3f")
        if mine is None:
            table.add_row(f"{s['gpus']:,}", "-", "-", "-", ref["error"], "-", "-", best_step)
            continue
        table.add_row(f"{s['gpus']:,}", count_cell(mine["num_microbatches"]), _pct(mine["bubble_fraction"]),
                      _fixed(mine["step_time_s"], ".3f"), _fits(mine), "-" if mine["feasible"] else ref["repair"],
                      _fixed(near and near["step_time_s"], ".3f"), best_step)
    return table


def print_sweep(sweep: dict, console: Console, fmt: str = "table") -> None:
    """The tables and notes of a sweep on `console`: tables fitted to its width (or CSV / Markdown)."""
    from rich.table import Table

    from parasol.solver.outputs.render import show_table

    for part in scaling_tables(sweep).renderables:
        if isinstance(part, Table):
            show_table(part, console, fmt)
        else:
            console.print(part, markup=False, soft_wrap=True)


@contextmanager
def progress_bar(total: int, enabled: bool) -> Iterator[Callable[[SizeResult], None]]:
    """A rich progress bar on stderr (never on stdout, where --json goes): one tick per size."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), disable=not enabled)
    with bar:
        task = bar.add_task("", total=total)

        def tick(result: SizeResult) -> None:
            bar.update(task, advance=1, description=f"{result.gpus:,} GPUs: {result.status}")

        yield tick
