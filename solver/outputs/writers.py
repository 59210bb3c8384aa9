"""Writers for `solve`: the solution file, the launcher rank map and host order, the launch files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from parasol.files import output_folder, writing
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.problems.rank_groups import GROUP_KINDS, dense_sizes, expert_sizes, order_of, placements, strides
from parasol.solver.search.solve import SolveResult


def write_solution(result: SolveResult, problem: Problem, directory: Path) -> Path:
    """Write the `solve --json` object to DIR/<problem name>.json; returns the path."""
    output_folder(directory, "--out")
    name = problem.spec.name or Path(problem.source).stem
    with writing(directory / f"{name}.json", "--out") as path:
        path.write_text(json.dumps(result.as_dict(), indent=2) + "\n", encoding="utf-8")
    return path


def rank_rows(mapping: Mapping, gpus_per_node: int, gpus_per_domain: int) -> list[dict[str, int]]:
    """Every global rank with its node, local GPU, NVLink domain and its coordinates in Megatron's
    dense (tp, cp, dp, pp) and expert (etp, ep, edp) grids under the mapping's rank order."""
    dense, expert = dense_sizes(mapping), expert_sizes(mapping)
    order = order_of(mapping)
    ds, es = strides(dense, order), strides(expert, order)
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
    with writing(path, "--rank-map") as out, out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


GROUP_NAMES = {"tp": "TP", "cp": "CP", "dp_attn": "DP (attention)", "dp_cp": "DP x CP (dense grads)", "pp": "PP",
               "ep": "EP", "etp": "expert TP", "dp_expert": "expert DP"}
"""How the host order names each group kind of rank_groups.GROUP_KINDS."""


def host_name(node: int, gpus_per_node: int, gpus_per_domain: int) -> str:
    """Placeholder for the host of `node`; it names the NVLink domain when a domain spans several nodes."""
    if gpus_per_domain > gpus_per_node:
        return f"domain{node * gpus_per_node // gpus_per_domain:03d}-node{node:04d}"
    return f"node{node:04d}"


def _group_lines(mapping: Mapping, gpus_per_node: int, gpus_per_domain: int) -> list[str]:
    """One comment line per group kind: how many groups, their rank stride and the nodes and NVLink
    domains one group spans under Megatron's rank order (rank_groups.placements)."""
    lines = []
    for g in placements(mapping, gpus_per_node, gpus_per_domain):
        grid, dims = GROUP_KINDS[g.kind]
        sizes = dense_sizes(mapping) if grid == "dense" else expert_sizes(mapping)
        st = strides(sizes, order_of(mapping))
        stride = min((st[d] for d in dims if sizes[d] > 1), default=1)
        lines.append(f"#   {GROUP_NAMES[g.kind]:<22} {g.count:>6} group(s) of {g.size:<5} rank stride {stride:<6} "
                     f"each on {g.max_nodes} node(s), {g.max_domains} NVLink domain(s)")
    return lines


def _ranges(values: list[int]) -> str:
    """Sorted whole numbers as compact ranges: [0, 1, 2, 5] -> '0-2, 5'."""
    parts, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[i - 1] + 1:
            parts.append(str(values[start]) if start == i - 1 else f"{values[start]}-{values[i - 1]}")
            start = i
    return ", ".join(parts)


def _stage_lines(mapping: Mapping, gpus_per_node: int) -> list[str]:
    """One comment line per pipeline stage: the nodes that hold its ranks under the mapping's rank order."""
    stride = strides(dense_sizes(mapping), order_of(mapping))["pp"]
    ranks = np.arange(mapping.gpus)
    stage_of = (ranks // stride) % mapping.pp
    return [f"#   PP stage {s}: nodes {_ranges(np.unique(ranks[stage_of == s] // gpus_per_node).tolist())}"
            for s in range(mapping.pp)]


def host_order_text(mapping: Mapping, problem: Problem) -> str:
    """The launcher's host order: one `host slots=G` line per node in node order (torchrun --node-rank i
    runs on line i, so global rank r lands on node r // G, GPU r % G), with comments saying how
    Megatron's rank order (tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping; megatron-groups.md
    §1.2-1.4) places every group on those nodes."""
    topo = problem.hardware.topology
    g, d = topo.gpus_per_node, topo.gpus_per_nvlink_domain
    nodes = mapping.gpus // g
    head = [
        f"# parasol host order for {problem.spec.name or problem.source}: {mapping.gpus:,} GPUs = {nodes:,} nodes x {g} "
        f"GPUs, NVLink domains of {d} GPUs ({problem.hardware.gpu.name}).",
        f"# Data line i (0-based) is the host that runs torchrun --node-rank i; it holds global ranks {g}i..{g}i+{g - 1}.",
        "# Replace each placeholder with a real host and keep the order"
        + ("; hosts named domainNNN-... must share that NVLink domain." if d > g else "."),
        "# Format: an MPI/DeepSpeed hostfile (host slots=GPUs).",
        f"# Megatron's rank order {mapping.rank_order.value} (leftmost fastest) places the groups of "
        f"TP{mapping.tp} CP{mapping.cp} EP{mapping.ep} ETP{mapping.expert_tp} PP{mapping.pp}:",
        *_group_lines(mapping, g, d),
        *_stage_lines(mapping, g),
    ]
    hosts = [f"{host_name(n, g, d)} slots={g}" for n in range(nodes)]
    return "\n".join(head + hosts) + "\n"


def write_host_order(mapping: Mapping, problem: Problem, path: Path) -> Path:
    """Write the host order (host_order_text) to `path`; returns the path."""
    with writing(path, "the host order file") as out:
        out.write_text(host_order_text(mapping, problem), encoding="utf-8")
    return path


def write_launch_files(problem: Problem, mapping: Mapping, directory: Path, prefix: str, title: str) -> tuple[Path, Path]:
    """Write DIR/<prefix>megatron_args.sh (emit.launch_script) and DIR/<prefix>hosts.txt (the host order the
    script's NODE_RANK refers to) for one mapping; returns both paths."""
    from parasol.solver.outputs.emit import launch_script

    output_folder(directory, "--out")
    script = directory / f"{prefix}megatron_args.sh"
    with writing(script, "--out") as out:
        out.write_text(launch_script(problem, mapping, title), encoding="utf-8")
    return script, write_host_order(mapping, problem, directory / f"{prefix}hosts.txt")
