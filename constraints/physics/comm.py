"""Collective communication time, priced on the links each group actually crosses.

Each collective is the textbook bandwidth/latency model (Thakur, Rabenseifner & Gropp 2005;
the NCCL performance notes' "bus bandwidth"), with bytes in bytes, bandwidth in GB/s per GPU per
direction (decimal, as hardware.topology) and latency in microseconds:

- ring all-reduce of B bytes over n ranks: 2(n−1)/n · B / bw + 2(n−1) · α
- all-gather or reduce-scatter of a B-byte (gathered) buffer: (n−1)/n · B / bw + (n−1) · α
- all-to-all where each rank sends B bytes spread evenly over the n ranks: the (local−1)/n share
  to peers in its NVLink domain moves over NVLink while the (n−local)/n share to other domains
  moves over the NICs at the same time (hierarchical dispatch, as DeepEP and Hybrid-EP do), so the
  slower of the two sets the time, plus one α
- the deduplicating MoE dispatch of DeepEP and Hybrid-EP (Megatron's flex dispatcher): a token
  whose k experts live in several ranks of one remote NVLink domain crosses the network once to
  that domain and fans out over NVLink there. With experts spread evenly over D domains and k
  independent picks, a token reaches (D−1)·(1 − (1 − 1/D)^k) remote domains on average; the
  network carries that many copies of it, NVLink the k copies (less those landing where they are)
- point-to-point send of B bytes: B / bw + α

A group's bandwidth is the per-GPU bottleneck of the slowest level any two members are apart
(`ClusterTopology.group_span`), for the real ranks Megatron puts in that group under the mapping
(`problems/rank_groups.py`). A ring collective over several NVLink domains runs one ring per NIC
(NCCL channels on rail-optimised clusters): when L members of the group share a domain, L NICs carry
the ring's network share in parallel, so the network term is (n−1)/n · B / (L · nic) while NVLink
carries the rest at its own rate (a group with one member per node gets one NIC, as a DP group under
TP8). Terms keep NVLink and network seconds apart so that the step-time model can apply each level's
achievable fraction of the nominal rate (a calibrated coefficient).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from parasol.hardware.topology import ClusterTopology, Level, distinct_ascending
from parasol.problems.mapping import Mapping
from parasol.problems.memo import kept
from parasol.problems.rank_groups import (
    GROUP_KINDS,
    dense_sizes,
    expert_sizes,
    lattice,
    lattice_key,
    order_of,
    residue_bases,
)

GB = 1e9
US = 1e-6
DEEPEP_NVL_PEERS = 8
"""NUM_MAX_NVL_PEERS of DeepEP (csrc/kernels/configs.cuh:3): NVLink peers of one rank in its normal kernels."""


@dataclass(frozen=True)
class GroupLink:
    """The links one kind of group crosses: its size, levels and per-GPU bandwidths (worst group of the kind)."""

    kind: str
    size: int
    level: Level
    bandwidth_gb_s: float
    """Bottleneck per-GPU bandwidth of the group, GB/s per direction."""
    latency_us: float
    local_peers: int
    """Fewest members of the group that share an NVLink domain with any one member (itself included)."""
    domains: int
    """NVLink domains the group touches."""
    nvlink_gb_s: float
    network_gb_s: float
    """Per-GPU bandwidth to members outside the NVLink domain (NIC, or spine after oversubscription)."""

    @property
    def over_network(self) -> bool:
        """Whether any two members talk over the NICs."""
        return self.level in (Level.rack, Level.spine)


@dataclass(frozen=True)
class CommTerm:
    """Seconds a transfer takes at the nominal rates, kept by level, plus its latency.

    The priced time is max(nvlink_s / e_nvlink, network_s / e_network) + latency_s: the levels run
    concurrently and each reaches its achievable fraction e of the nominal rate."""

    nvlink_s: float = 0.0
    network_s: float = 0.0
    latency_s: float = 0.0
    network_bytes: float = 0.0
    """Bytes one GPU sends through its NIC (the scale-out network) for this transfer."""

    def __add__(self, other: CommTerm) -> CommTerm:
        """Two transfers one after the other, summed level by level (priced on the slower level of the sum,
        exact when both have the same mix of levels, as repeated collectives of one group do)."""
        return CommTerm(self.nvlink_s + other.nvlink_s, self.network_s + other.network_s,
                        self.latency_s + other.latency_s, self.network_bytes + other.network_bytes)

    def scaled(self, factor: float) -> CommTerm:
        """The same transfer repeated `factor` times."""
        return CommTerm(self.nvlink_s * factor, self.network_s * factor, self.latency_s * factor,
                        self.network_bytes * factor)

    def seconds(self, nvlink_efficiency: float = 1.0, network_efficiency: float = 1.0) -> float:
        """Time at the given achievable fractions of the nominal link rates."""
        return max(self.nvlink_s / nvlink_efficiency, self.network_s / network_efficiency) + self.latency_s


NO_COMM = CommTerm()


def _ring(volume: float, link: GroupLink) -> CommTerm:
    """Nominal seconds for a ring collective that moves `volume` bytes through every member: over NVLink
    inside one domain; across domains, NVLink and the L parallel NIC rings of the domain at once."""
    if not link.over_network:
        return CommTerm(nvlink_s=volume / (link.bandwidth_gb_s * GB))
    rings = max(min(link.local_peers, link.size), 1)
    nvlink = volume / (link.nvlink_gb_s * GB) if rings > 1 else 0.0
    return CommTerm(nvlink_s=nvlink, network_s=volume / (rings * link.network_gb_s * GB),
                    network_bytes=volume / rings)


def ring_all_reduce(nbytes: float, link: GroupLink) -> CommTerm:
    """Ring all-reduce of `nbytes` over the group: 2(n−1)/n · B / bw + 2(n−1)·α."""
    n = link.size
    if n <= 1 or nbytes <= 0:
        return NO_COMM
    return _ring(2 * (n - 1) / n * nbytes, link) + CommTerm(latency_s=2 * (n - 1) * link.latency_us * US)


def all_gather(nbytes: float, link: GroupLink) -> CommTerm:
    """All-gather into an `nbytes` buffer (each rank contributes B/n): (n−1)/n · B / bw + (n−1)·α."""
    n = link.size
    if n <= 1 or nbytes <= 0:
        return NO_COMM
    return _ring((n - 1) / n * nbytes, link) + CommTerm(latency_s=(n - 1) * link.latency_us * US)


def reduce_scatter(nbytes: float, link: GroupLink) -> CommTerm:
    """Reduce-scatter of an `nbytes` buffer: the same volume and steps as all-gather."""
    return all_gather(nbytes, link)


def all_to_all(nbytes_per_rank: float, link: GroupLink) -> CommTerm:
    """All-to-all where each rank sends `nbytes_per_rank` spread evenly over the group: the NVLink share
    (local−1)/n and the network share (n−local)/n move at once; one latency."""
    n = link.size
    if n <= 1 or nbytes_per_rank <= 0:
        return NO_COMM
    local = min(link.local_peers, n)
    nvlink = (local - 1) / n * nbytes_per_rank / (link.nvlink_gb_s * GB)
    remote = (n - local) / n * nbytes_per_rank if n > local else 0.0
    return CommTerm(nvlink_s=nvlink, network_s=remote / (link.network_gb_s * GB), latency_s=link.latency_us * US,
                    network_bytes=remote)


def remote_domains_per_token(domains: int, top_k: int) -> float:
    """Expected remote NVLink domains a token's top_k experts fall in: (D−1)·(1 − (1 − 1/D)^k)."""
    if domains <= 1:
        return 0.0
    return (domains - 1) * (1 - (1 - 1 / domains) ** top_k)


def deduplicated_dispatch(token_bytes: float, top_k: int, link: GroupLink) -> CommTerm:
    """Hierarchical dispatch (or combine) of `token_bytes` of local tokens to their top_k experts: each
    remote domain receives a token once over the network, NVLink fans the k copies out."""
    n = link.size
    if n <= 1 or token_bytes <= 0:
        return NO_COMM
    local = min(link.local_peers, n)
    nvlink = top_k * token_bytes * (local - 1) / local / (link.nvlink_gb_s * GB)
    remote = token_bytes * remote_domains_per_token(link.domains, top_k)
    return CommTerm(nvlink_s=nvlink, network_s=remote / (link.network_gb_s * GB), latency_s=link.latency_us * US,
                    network_bytes=remote)


def point_to_point(nbytes: float, link: GroupLink) -> CommTerm:
    """One send of `nbytes` to a neighbour in the group: B / bw + α."""
    if link.size <= 1 or nbytes <= 0:
        return NO_COMM
    seconds = nbytes / (link.bandwidth_gb_s * GB)
    level = CommTerm(network_s=seconds, network_bytes=nbytes) if link.over_network else CommTerm(nvlink_s=seconds)
    return level + CommTerm(latency_s=link.latency_us * US)


def _placement(topology: ClusterTopology, members: Sequence[int] | np.ndarray) -> tuple[int, int, int]:
    """(racks touched, domains touched, −fewest members sharing one domain): larger is worse placed."""
    ranks = np.sort(np.asarray(members, dtype=np.int64))
    domains = ranks // topology.gpus_per_nvlink_domain
    starts = np.flatnonzero(np.concatenate(([True], domains[1:] != domains[:-1])))
    per_domain = np.diff(np.append(starts, domains.size))
    return distinct_ascending(ranks // topology.gpus_per_rack), int(per_domain.size), -int(per_domain.min())


def _group_offsets(sizes: dict[str, int], dims: tuple[str, ...], order: tuple[str, ...]) -> np.ndarray:
    """The member offsets of every group of `dims`, ascending: each group is its base + these
    (rank_groups.groups)."""
    return np.sort(lattice(sizes, list(dims), order))


def _worst_placed(topology: ClusterTopology, offsets: np.ndarray, bases: np.ndarray) -> np.ndarray:
    """The members of the worst-placed group base + offsets by _placement's order (the first of equals, in
    the order of `bases`), every group placed at once: offsets ascend, so each group's NVLink domains and
    racks ascend too, and counting them is counting where they change."""
    members = bases.astype(np.int64)[:, None] + offsets.astype(np.int64)[None, :]
    keys = []
    for size in (topology.gpus_per_rack, topology.gpus_per_nvlink_domain):
        unit = members // size
        new = np.ones(unit.shape, dtype=bool)
        new[:, 1:] = unit[:, 1:] != unit[:, :-1]
        keys.append(new.sum(axis=1))
    starts = np.flatnonzero(new.ravel())
    runs = np.diff(np.append(starts, new.size))
    fewest = np.minimum.reduceat(runs, np.flatnonzero(starts % new.shape[1] == 0))
    ranked = list(zip(keys[0].tolist(), keys[1].tolist(), (-fewest).tolist(), strict=True))
    return members[ranked.index(max(ranked))]


def group_link(topology: ClusterTopology, mapping: Mapping, kind: str) -> GroupLink:
    """The worst-placed group of one kind (tp, cp, dp_attn, dp_cp, pp, ep, etp, dp_expert) under
    the mapping's rank order: most racks, then most NVLink domains, then fewest local peers.

    Groups are translates of one offset pattern, and racks hold whole NVLink domains, so groups whose
    bases agree modulo the rack size lie alike: one of each residue is examined."""
    grid, dims = GROUP_KINDS[kind]
    sizes = dense_sizes(mapping) if grid == "dense" else expert_sizes(mapping)
    return _placed_link(topology, kind, sizes, dims, order_of(mapping))


PLACED_LINKS_MEMO = 65536
"""Placed links kept (the table starts afresh past this)."""

_PLACED: dict[tuple, GroupLink] = {}


def _placed_link(topology: ClusterTopology, kind: str, sizes: dict[str, int], dims: tuple[str, ...],
                 order: tuple[str, ...]) -> GroupLink:
    """The GroupLink of the worst-placed group over `dims` of a rank grid of `sizes` in `order`, once per
    topology, kind and what the groups' placement reads (rank_groups.lattice_key, bases taken modulo a
    length that nodes, NVLink domains and racks divide): DeepSeek-V3's default space places 8,394 groups,
    of 116 distinct offsets and bases up to whole racks."""
    period = topology.gpus_per_rack
    modulus = math.lcm(period, topology.gpus_per_nvlink_domain, topology.gpus_per_node)
    key = (topology, kind, lattice_key(sizes, dims, period, modulus, order))
    return kept(_PLACED, key, PLACED_LINKS_MEMO, lambda: _worst_link(topology, kind, sizes, dims, order))


def _worst_link(topology: ClusterTopology, kind: str, sizes: dict[str, int], dims: tuple[str, ...],
                order: tuple[str, ...]) -> GroupLink:
    """_placed_link, computed."""
    bases = residue_bases(sizes, dims, topology.gpus_per_rack, order)
    worst = _worst_placed(topology, _group_offsets(sizes, dims, order), bases)
    span = topology.placed_span(worst)
    return GroupLink(
        kind=kind, size=span.size, level=span.level, bandwidth_gb_s=span.bandwidth_gb_s,
        latency_us=span.latency_us, local_peers=-_placement(topology, worst)[2], domains=span.domains,
        nvlink_gb_s=topology.nvlink_gb_s,
        network_gb_s=topology.spine_gb_s if span.racks > 1 else topology.nic_gb_s,
    )


def cp_level_links(topology: ClusterTopology, mapping: Mapping, levels: tuple[int, ...]) -> tuple[GroupLink, ...]:
    """The worst-placed group of each level of --hierarchical-context-parallel-sizes (product CP): Megatron
    cuts every CP group, in its rank order, into level-1 groups of `levels[0]` consecutive members, level-2
    groups of members `levels[0]` apart, and so on (parallel_state.py:378-420, create_hierarchical_groups,
    "(l s u) -> (l u) s"); the CP dimension is split into one dimension per level, fastest first."""
    sizes = dense_sizes(mapping)
    names = tuple(f"cp{i}" for i in range(len(levels)))
    split = {k: v for k, v in sizes.items() if k != "cp"} | dict(zip(names, levels, strict=True))
    order = tuple(d for dim in order_of(mapping) for d in (names if dim == "cp" else (dim,)))
    return tuple(_placed_link(topology, "cp", split, (name,), order) for name in names)


def deepep_link(topology: ClusterTopology, link: GroupLink, expert_tp: int) -> GroupLink:
    """The EP link as DeepEP's normal (training) kernels see it: a rank reaches at most NUM_MAX_NVL_PEERS = 8
    ranks of its ETP×EP group over NVLink, the 8 consecutive ones (rank % 8), and every other one over RDMA
    through the NIC even inside a larger NVLink domain (DeepEP hybrid-ep@94a9f8f csrc/kernels/configs.cuh:3,
    csrc/deep_ep.cpp:169-170; csrc/kernels/internode.cu:665-672 sends with nvshmemi_ibgda_put_nbi_warp), so
    on a 72-GPU NVL72 domain the deduplicating unit is 8/ETP EP ranks, not the domain. Unchanged where the
    group's share of a domain is already within that reach (8-GPU nodes)."""
    reach = max(DEEPEP_NVL_PEERS // max(expert_tp, 1), 1)
    if link.local_peers <= reach or link.size <= 1:
        return link
    level = Level.rack if link.level is Level.nvlink_domain else link.level
    return replace(link, level=level, bandwidth_gb_s=topology.level_bandwidth(level),
                   latency_us=topology.level_latency_us(level), local_peers=reach, domains=-(-link.size // reach))
