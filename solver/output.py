"""Writers for `solve`: the front as a rich table, the solution file, and the launcher rank map."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rich.table import Table

from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.problems.rank_groups import dense_sizes, expert_sizes, strides
from parasol.solver.solve import SolveResult


def front_table(result: SolveResult, problem: Problem) -> Table:
    """One row per mapping: rank, degrees, layout, predicted time and throughput, peak memory and the
    TB crossing the scale-out network per step; the title names the front's two objectives."""
    front = " × ".join(o.value for o in problem.spec.objectives)
    table = Table(title=f"{problem.model.name} on {problem.gpus:,} × {problem.hardware.gpu.name}, front {front}: "
                        f"{result.status}, {len(result.mappings)} mapping(s) "
                        f"({result.rows_fitting} of {result.rows} degree rows fit in memory"
                        + (f", {result.rows_priced} priced within the time limit)" if result.rows_priced < result.rows_fitting
                           else ")"))
    for col in ("rank", "TP", "PP", "CP", "EP", "ETP", "VPP", "MBS", "recompute", "m", "bubble",
                "blocks per stage", "step s", "tok/s/GPU", "MFU", "peak GB", "net TB"):
        table.add_column(col, justify="left" if col in ("recompute", "blocks per stage") else "right",
                         overflow="fold")
    for sm in result.mappings:
        d = sm.as_dict()
        m, metrics, derived = d["mapping"], d["metrics"], d["derived"]
        table.add_row(
            str(sm.pareto_rank), *(str(m[k]) for k in ("tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "recompute")),
            str(derived["num_microbatches"]), f"{derived['bubble_fraction']:.1%}", run_length(m["layout"]),
            f"{metrics.get('step_time_s', float('nan')):.3f}", f"{metrics.get('tokens_per_s_per_gpu', 0):,.0f}",
            f"{metrics.get('mfu', 0):.1%}", f"{metrics.get('peak_memory_gb', 0):.2f}",
            f"{metrics.get('network_tb_per_step', float('nan')):,.1f}",
        )
    return table


def run_length(layout: list[int]) -> str:
    """Stage sizes with repeats folded: [3, 4, 4, 4, 2] -> '3 4×3 2'."""
    parts: list[str] = []
    i = 0
    while i < len(layout):
        j = i
        while j < len(layout) and layout[j] == layout[i]:
            j += 1
        parts.append(str(layout[i]) if j - i == 1 else f"{layout[i]}×{j - i}")
        i = j
    return " ".join(parts)


def write_solution(result: SolveResult, problem: Problem, directory: Path) -> Path:
    """Write the `solve --json` object to DIR/<problem name>.json; returns the path."""
    directory.mkdir(parents=True, exist_ok=True)
    name = problem.spec.name or Path(problem.source).stem
    path = directory / f"{name}.json"
    path.write_text(json.dumps(result.as_dict(), indent=2) + "\n", encoding="utf-8")
    return path


def rank_rows(mapping: Mapping, gpus_per_node: int, gpus_per_domain: int) -> list[dict[str, int]]:
    """Every global rank with its node, local GPU, NVLink domain and its coordinates in Megatron's
    dense (tp, cp, dp, pp) and expert (etp, ep, edp) grids, order tp-cp-ep-dp-pp."""
    dense, expert = dense_sizes(mapping), expert_sizes(mapping)
    ds, es = strides(dense), strides(expert)
    rows = []
    for rank in range(mapping.gpus):
        rows.append({
            "rank": rank, "node": rank // gpus_per_node, "local_gpu": rank % gpus_per_node,
            "nvlink_domain": rank // gpus_per_domain, "pp_stage": (rank // ds["pp"]) % dense["pp"],
            "tp": (rank // ds["tp"]) % dense["tp"], "cp": (rank // ds["cp"]) % dense["cp"],
            "dp": (rank // ds["dp"]) % dense["dp"], "etp": (rank // es["tp"]) % expert["tp"],
            "ep": (rank // es["ep"]) % expert["ep"], "edp": (rank // es["dp"]) % expert["dp"],
        })
    return rows


def write_rank_map(mapping: Mapping, problem: Problem, path: Path) -> Path:
    """CSV of rank → (domain, node, GPU) and grid coordinates: the host order that makes the placement
    real (launch rank r on node r // G, GPU r % G)."""
    topo = problem.hardware.topology
    rows = rank_rows(mapping, topo.gpus_per_node, topo.gpus_per_nvlink_domain)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path
