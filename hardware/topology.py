"""Cluster topology: where a rank sits (node, NVLink domain, rack) and the bandwidth between ranks.

Ranks follow the launcher layout `rank = node_index * gpus_per_node + local_rank`, so nodes,
NVLink domains and racks are contiguous rank ranges. A job that does not fill whole nodes runs the
same number of ranks on every node it uses (torchrun's --nproc_per_node): `for_job` gives the
topology of its ranks, with fewer ranks per node, domain and rack and the idle GPUs counted, so
every group that now crosses a node pays the NIC bandwidth. Four levels separate two ranks:

- `same_gpu`: one rank; no link is crossed.
- `nvlink_domain`: the scale-up fabric (NVLink/NVSwitch): 8 GPUs on HGX, 72 on GB200 NVL72, where
  a node (compute tray) holds 4 GPUs.
- `rack`: the scale-out NICs and one leaf-switch group. A "rack" here is the set of nodes whose
  NICs meet below the spine (a rail-optimized scalable unit or pod), not a physical cabinet.
- `spine`: above the leaf group, at `nic_gb_s / spine_oversubscription`.

Bandwidths are GB/s per direction per GPU: the share of each link one GPU gets when every GPU
below that link drives it at once. That is the figure a collective's bus bandwidth is bounded by.
The model ignores rails (NCCL's PXN first moves data over NVLink to the GPU on the right rail)
and treats GPUs of one node in different NVLink domains as talking over their NICs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from parasol.errors import InputError

if TYPE_CHECKING:
    import networkx as nx


class Level(StrEnum):
    """How far apart two ranks are, nearest first; the order is the order of the members."""

    same_gpu = "same_gpu"
    nvlink_domain = "nvlink_domain"
    rack = "rack"
    spine = "spine"

    @property
    def depth(self) -> int:
        """0 for same_gpu up to 3 for spine, so levels compare by distance."""
        return list(Level).index(self)


SPINE = ("spine", 0)  # the single spine vertex of a job graph


class GroupSpan(BaseModel):
    """Where a communication group (TP, CP, EP, DP, PP) lies, and what its collectives can get."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(description="ranks in the group")
    nodes: int = Field(description="nodes the group touches")
    domains: int = Field(description="NVLink domains the group touches")
    racks: int = Field(description="leaf groups (racks) the group touches")
    level: Level = Field(description="the slowest level any two members are apart")
    bandwidth_gb_s: float = Field(description="bottleneck per-GPU bandwidth, GB/s per direction (inf for one rank)")
    latency_us: float = Field(description="per-hop latency of the slowest level, microseconds")


class ClusterTopology(BaseModel):
    """Levels of the cluster, the per-GPU bandwidth and latency of each, and accelerator quirks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus_per_node: PositiveInt = Field(description="GPUs per node (the launcher's local world size)")
    gpus_per_nvlink_domain: PositiveInt = Field(description="GPUs sharing one scale-up (NVLink) fabric")
    nodes_per_rack: PositiveInt = Field(description="nodes under one leaf-switch group")
    spine_oversubscription: float = Field(default=1.0, ge=1.0, description="leaf down-link to up-link bandwidth ratio; 1 is non-blocking")
    nvlink_gb_s: PositiveFloat = Field(description="scale-up bandwidth per GPU, GB/s per direction")
    nic_gb_s: PositiveFloat = Field(description="scale-out NIC bandwidth per GPU, GB/s per direction")
    host_link_gb_s: PositiveFloat = Field(
        default=64.0, description="GPU to host-memory bandwidth per GPU, GB/s per direction (offloading); "
                                  "default PCIe Gen5 x16, 64 GB/s (PCI-SIG)")
    nvlink_latency_us: NonNegativeFloat = Field(description="per-hop latency inside an NVLink domain, us")
    rack_latency_us: NonNegativeFloat = Field(description="per-hop latency NIC to NIC through a leaf switch, us")
    spine_latency_us: NonNegativeFloat = Field(description="per-hop latency NIC to NIC through the spine, us")
    idle_gpus_per_node: NonNegativeInt = Field(
        default=0, description="GPUs of each node a partial-node job leaves unused (set by for_job; 0 in presets)")
    fixed_size_all_to_all: bool = Field(
        default=False,
        description="the collective library offers only fixed-size whole-group all-to-all (seed 003)",
    )
    notes: str = Field(default="", description="free text: what was measured, what is assumed")

    @model_validator(mode="after")
    def _levels_nest(self) -> ClusterTopology:
        """Nodes, NVLink domains and racks must nest so every rank pair has exactly one level."""
        g, d = self.gpus_per_node, self.gpus_per_nvlink_domain
        if d % g and g % d:
            raise ValueError(
                f"gpus_per_nvlink_domain ({d}) must be a multiple of gpus_per_node ({g}) or divide it, "
                f"e.g. {g} or {2 * g}"
            )
        rack_gpus = self.nodes_per_rack * g
        if rack_gpus % d:
            raise ValueError(
                f"a rack ({self.nodes_per_rack} nodes = {rack_gpus} GPUs) must hold whole NVLink domains "
                f"of {d} GPUs: make nodes_per_rack a multiple of {math.lcm(g, d) // g}"
            )
        if self.nic_gb_s > self.nvlink_gb_s:
            raise ValueError(
                f"nic_gb_s ({self.nic_gb_s:g}) exceeds nvlink_gb_s ({self.nvlink_gb_s:g}); the level model "
                "assumes the scale-up fabric is the faster one"
            )
        if self.spine_latency_us < self.rack_latency_us:
            raise ValueError("spine_latency_us must be at least rack_latency_us: the spine path includes the leaf")
        return self

    @property
    def spine_gb_s(self) -> float:
        """Per-GPU bandwidth across the spine after oversubscription."""
        return self.nic_gb_s / self.spine_oversubscription

    @property
    def gpus_per_rack(self) -> int:
        """GPUs under one leaf-switch group."""
        return self.nodes_per_rack * self.gpus_per_node

    def _fits_domains(self, k: int) -> bool:
        """Whether k ranks per node keep NVLink domains contiguous rank ranges of one size."""
        d, g = self.gpus_per_nvlink_domain, self.gpus_per_node
        return d >= g or k % d == 0 or k <= d

    def ranks_per_node(self, gpus: int, pinned: int | None = None) -> int:
        """Ranks the launcher starts on each node: `pinned` when given (it must divide the job and fit a
        node), the whole node when the job fills whole nodes, else the largest count that divides it."""
        g = self.gpus_per_node
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise InputError("The GPU count must be a positive whole number.", field="hardware.gpus", value=gpus,
                             expected="an integer >= 1", fix="give the number of GPUs the job runs on.")
        if pinned is not None:
            if pinned > g or gpus % pinned or not self._fits_domains(pinned):
                raise InputError(
                    f"{pinned} ranks per node cannot place {gpus} GPUs on nodes of {g}.",
                    field="hardware.ranks_per_node", value=pinned,
                    expected=f"at most {g}, dividing {gpus}" + ("" if self._fits_domains(pinned) else
                                                                f", a multiple of {self.gpus_per_nvlink_domain}"),
                    fix="pick a divisor of the GPU count, or drop hardware.ranks_per_node.")
            return pinned
        return max(k for k in range(1, min(g, gpus) + 1) if gpus % k == 0 and self._fits_domains(k))

    def validate_gpu_count(self, gpus: int, ranks_per_node: int | None = None) -> int:
        """Check a job size (any positive count: a partial job places the same ranks on every node it
        uses); returns the number of nodes it occupies."""
        return gpus // self.ranks_per_node(gpus, ranks_per_node)

    def for_job(self, gpus: int, ranks_per_node: int | None = None) -> ClusterTopology:
        """The topology of a job's ranks: itself for whole nodes; with k < gpus_per_node ranks per node,
        nodes, NVLink domains and racks hold k/gpus_per_node of their GPUs as ranks and the rest idle."""
        k = self.ranks_per_node(gpus, ranks_per_node)
        g, d = self.gpus_per_node, self.gpus_per_nvlink_domain
        if k == g:
            return self
        domain = d // g * k if d >= g else (d if k % d == 0 else k)
        return self.model_copy(update={"gpus_per_node": k, "gpus_per_nvlink_domain": domain,
                                       "idle_gpus_per_node": self.idle_gpus_per_node + g - k})

    def node_of(self, rank: int) -> int:
        """Node index of a rank under the launcher layout."""
        return _check_rank(rank) // self.gpus_per_node

    def domain_of(self, rank: int) -> int:
        """NVLink domain index of a rank."""
        return _check_rank(rank) // self.gpus_per_nvlink_domain

    def rack_of(self, rank: int) -> int:
        """Leaf-group (rack) index of a rank."""
        return _check_rank(rank) // self.gpus_per_rack

    def level_between(self, a: int, b: int) -> Level:
        """The nearest level that contains both ranks."""
        if _check_rank(a) == _check_rank(b):
            return Level.same_gpu
        if self.domain_of(a) == self.domain_of(b):
            return Level.nvlink_domain
        if self.rack_of(a) == self.rack_of(b):
            return Level.rack
        return Level.spine

    def level_bandwidth(self, level: Level) -> float:
        """Per-GPU bandwidth of the bottleneck link crossed at a level, GB/s per direction."""
        return {
            Level.same_gpu: math.inf,
            Level.nvlink_domain: self.nvlink_gb_s,
            Level.rack: self.nic_gb_s,
            Level.spine: self.spine_gb_s,
        }[level]

    def level_latency_us(self, level: Level) -> float:
        """Per-hop latency at a level, microseconds."""
        return {
            Level.same_gpu: 0.0,
            Level.nvlink_domain: self.nvlink_latency_us,
            Level.rack: self.rack_latency_us,
            Level.spine: self.spine_latency_us,
        }[level]

    def bandwidth_between(self, a: int, b: int) -> float:
        """Bottleneck per-GPU bandwidth on the path between two ranks, GB/s per direction."""
        return self.level_bandwidth(self.level_between(a, b))

    def group_span(self, ranks: Sequence[int]) -> GroupSpan:
        """Nodes, domains and racks a group touches, and the bandwidth its collectives are bound by."""
        members = [_check_rank(r) for r in ranks]
        if not members:
            raise InputError("A communication group needs at least one rank.", field="ranks", value=list(ranks))
        if len(set(members)) != len(members):
            raise InputError("A communication group lists a rank twice.", field="ranks", value=list(ranks),
                             expected="distinct ranks")
        return self.placed_span(np.sort(np.array(members, dtype=np.int64)))

    def placed_span(self, members: np.ndarray) -> GroupSpan:
        """group_span of a group the caller built itself (distinct non-negative ranks, ascending, in bulk as
        one integer array): counted at once, for the large data-parallel groups of big clusters."""
        domains = distinct_ascending(members // self.gpus_per_nvlink_domain)
        racks = distinct_ascending(members // self.gpus_per_rack)
        if members.size == 1:
            level = Level.same_gpu
        elif racks > 1:
            level = Level.spine
        elif domains > 1:
            level = Level.rack
        else:
            level = Level.nvlink_domain
        return GroupSpan(
            size=int(members.size),
            nodes=distinct_ascending(members // self.gpus_per_node),
            domains=domains,
            racks=racks,
            level=level,
            bandwidth_gb_s=self.level_bandwidth(level),
            latency_us=self.level_latency_us(level),
        )

    def graph(self, num_gpus: int) -> nx.Graph:
        """The physical graph of a job: GPUs, one NVSwitch per domain, one leaf per rack, one spine.

        Edge attribute `gb_s` is the per-GPU share of the link (GB/s per direction); `level` names
        the level the link belongs to. `bottleneck_bandwidth` reads bandwidths back off this graph.
        """
        import networkx as nx

        self.validate_gpu_count(num_gpus)
        g = nx.Graph()
        g.add_node(SPINE, kind="spine")
        for rack in range(math.ceil(num_gpus / self.gpus_per_rack)):
            g.add_node(("leaf", rack), kind="leaf")
            g.add_edge(("leaf", rack), SPINE, gb_s=self.spine_gb_s, level=Level.spine)
        for domain in range(math.ceil(num_gpus / self.gpus_per_nvlink_domain)):
            g.add_node(("nvswitch", domain), kind="nvswitch")
        for rank in range(num_gpus):
            vertex = gpu_vertex(rank)
            g.add_node(vertex, kind="gpu", node=self.node_of(rank))
            g.add_edge(vertex, ("nvswitch", self.domain_of(rank)), gb_s=self.nvlink_gb_s, level=Level.nvlink_domain)
            g.add_edge(vertex, ("leaf", self.rack_of(rank)), gb_s=self.nic_gb_s, level=Level.rack)
        return g


def gpu_vertex(rank: int) -> tuple[str, int]:
    """The graph vertex of a rank."""
    return ("gpu", rank)


def bottleneck_bandwidth(graph: nx.Graph, a: int, b: int) -> float:
    """Widest-path bandwidth between two ranks, derived from the graph alone.

    The path between two vertices in a maximum spanning tree is a maximum-bottleneck path, so its
    narrowest edge is the best per-GPU bandwidth any route offers (a check on `bandwidth_between`).
    """
    import networkx as nx

    if a == b:
        return math.inf
    tree = nx.maximum_spanning_tree(graph, weight="gb_s")
    path = nx.shortest_path(tree, gpu_vertex(a), gpu_vertex(b))
    return min(tree.edges[u, v]["gb_s"] for u, v in pairwise(path))


def _check_rank(rank: int) -> int:
    """Reject negative or non-integer ranks before they index anything."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise InputError("A rank must be a non-negative integer.", field="rank", value=rank)
    return rank


def distinct_ascending(values: np.ndarray) -> int:
    """How many distinct values an ascending array holds: one more than the places it changes."""
    return int(np.count_nonzero(values[1:] != values[:-1])) + 1 if values.size else 0
