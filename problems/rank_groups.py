"""Megatron-LM's rank groups and where they land on nodes and NVLink domains.

Megatron orders ranks `tp-cp-ep-dp-pp` (leftmost fastest; `tp-cp-ep-pp-dp` with
--use-tp-pp-dp-mapping, the mapping's `rank_order`) and builds two generators over the same
ranks: dense (TP, CP, DP, PP) and expert (ETP, EP, EDP, PP); a group is the set of ranks that agree
on every dimension outside it (parallel_state.py:269-375, megatron-groups.md §1.2). Nodes are
contiguous rank blocks under the usual launcher layout rank = node·G + local_rank (§1.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import numpy as np

from parasol.problems.mapping import Mapping, RankOrder
from parasol.problems.memo import kept

ORDER = ("tp", "cp", "ep", "dp", "pp")
"""Megatron's default order; `order_of` gives a mapping's own."""


def order_of(m: Mapping) -> tuple[str, ...]:
    """The dimensions of the mapping's rank order, fastest varying first."""
    return tuple(RankOrder(m.rank_order).value.split("-"))


def dense_sizes(m: Mapping) -> dict[str, int]:
    """Dimension sizes of the dense/attention generator (EP is 1 there)."""
    return {"tp": m.tp, "cp": m.cp, "ep": 1, "dp": m.gpus // (m.tp * m.cp * m.pp), "pp": m.pp}


def expert_sizes(m: Mapping) -> dict[str, int]:
    """Dimension sizes of the expert generator (CP is 1 there, TP is ETP, DP is expert DP)."""
    return {"tp": m.expert_tp, "cp": 1, "ep": m.ep, "dp": m.gpus // (m.expert_tp * m.ep * m.pp), "pp": m.pp}


def strides(sizes: dict[str, int], order: tuple[str, ...] = ORDER) -> dict[str, int]:
    """Stride of each dimension in the global rank: product of the sizes to its left in `order`."""
    out, acc = {}, 1
    for dim in order:
        out[dim] = acc
        acc *= sizes[dim]
    return out


def groups(sizes: dict[str, int], dims: tuple[str, ...], order: tuple[str, ...] = ORDER) -> list[list[int]]:
    """All groups over `dims` (e.g. ('tp',) or ('dp', 'cp')), each a sorted list of global ranks."""
    st = strides(sizes, order)
    inner = [range(sizes[d]) for d in dims]
    outer_dims = [d for d in order if d not in dims]
    result = []
    for outer in product(*(range(sizes[d]) for d in outer_dims)):
        base = sum(i * st[d] for i, d in zip(outer, outer_dims, strict=True))
        members = sorted(base + sum(i * st[d] for i, d in zip(idx, dims, strict=True)) for idx in product(*inner))
        result.append(members)
    return result


@dataclass(frozen=True)
class GroupPlacement:
    """How the groups of one kind lie on the cluster (worst group of the kind)."""

    kind: str
    size: int
    count: int
    max_nodes: int
    max_domains: int

    @property
    def inside_node(self) -> bool:
        return self.max_nodes == 1

    @property
    def inside_domain(self) -> bool:
        return self.max_domains == 1


GROUP_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tp": ("dense", ("tp",)),
    "cp": ("dense", ("cp",)),
    "dp_attn": ("dense", ("dp",)),
    "dp_cp": ("dense", ("dp", "cp")),
    "pp": ("dense", ("pp",)),
    "ep": ("expert", ("ep",)),
    "etp": ("expert", ("tp",)),
    "dp_expert": ("expert", ("dp",)),
}


def lattice(sizes: dict[str, int], dims: list[str], order: tuple[str, ...] = ORDER) -> np.ndarray:
    """Every Σ idx_d·stride_d over `dims`: the rank offsets those dimensions span."""
    st = strides(sizes, order)
    points = np.zeros(1, dtype=np.int64)
    for d in dims:
        points = (points[:, None] + np.arange(sizes[d], dtype=np.int64)[None, :] * st[d]).reshape(-1)
    return points


def residue_bases(sizes: dict[str, int], dims: tuple[str, ...], period: int, order: tuple[str, ...] = ORDER
                  ) -> np.ndarray:
    """The bases (rank of each group's first member) of the groups over `dims`, one per residue modulo
    `period`, the first of each residue in lattice order, ascending. Every other dimension d adds idx·stride_d,
    whose residues repeat every period/gcd(stride_d, period) steps, and the first base of each residue has
    every idx below that, so the lattice is built over those indices only: a few bases where the whole
    lattice holds one per group (131,072 on a 131,072-GPU TP-1 grid)."""
    st = strides(sizes, order)
    points = np.zeros(1, dtype=np.int64)
    for d in (d for d in order if d not in dims):
        steps = min(sizes[d], period // math.gcd(st[d], period))
        points = (points[:, None] + np.arange(steps, dtype=np.int64)[None, :] * st[d]).reshape(-1)
    _, first = np.unique(points % period, return_index=True)
    return np.sort(points[first])


def lattice_key(sizes: dict[str, int], dims: tuple[str, ...], period: int, modulus: int,
                order: tuple[str, ...] = ORDER) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """What the groups lattice(sizes, dims, order) offsets and residue_bases(sizes, dims, period, order) bases
    make read, as a key: each of `dims`' size and stride, in turn, and each other dimension's steps and stride
    modulo `modulus` (a multiple of `period`), in `order`. Grids with equal keys have the same offsets, and
    bases that differ by multiples of `modulus`: their groups touch as many of any consecutive blocks whose
    size divides it (nodes, NVLink domains, racks), so they place alike."""
    st = strides(sizes, order)
    return (tuple((sizes[d], st[d]) for d in dims),
            tuple((min(sizes[d], period // math.gcd(st[d], period)), st[d] % modulus) for d in order if d not in dims))


def domain_shares(sizes: dict[str, int], dims: tuple[str, ...], block: int, order: tuple[str, ...] = ORDER
                  ) -> frozenset[tuple[int, ...]]:
    """How many members each block of `block` consecutive ranks (an NVLink domain) holds of each group over `dims`,
    in block order, one tuple per distinct pattern: groups whose bases agree modulo `block` split alike, so one
    base per residue places them all (as _count_span)."""
    offsets = lattice(sizes, list(dims), order)
    return frozenset(tuple(np.unique((r + offsets) // block, return_counts=True)[1].tolist())
                     for r in residue_bases(sizes, dims, block, order))


SPANS_MEMO = 65536
"""Group spans kept (the table starts afresh past this)."""

_SPANS: dict[tuple, int] = {}


def _max_span(sizes: dict[str, int], dims: tuple[str, ...], block: int, order: tuple[str, ...] = ORDER) -> int:
    """Most distinct blocks of `block` consecutive ranks (nodes, NVLink domains) one group over `dims`
    touches. Every group is base + offsets, and base b = q·block + r spans as many blocks as r does,
    so one base per residue r is enough; grids with equal lattice_key modulo `block` span alike, so each
    key is counted once (explain places every returned mapping's groups)."""
    key = (block, lattice_key(sizes, dims, block, block, order))
    return kept(_SPANS, key, SPANS_MEMO, lambda: _count_span(sizes, dims, block, order))


def _count_span(sizes: dict[str, int], dims: tuple[str, ...], block: int, order: tuple[str, ...]) -> int:
    """_max_span, counted."""
    offsets = lattice(sizes, list(dims), order)
    return max(len(np.unique((r + offsets) // block)) for r in residue_bases(sizes, dims, block, order))


def placements(m: Mapping, gpus_per_node: int, gpus_per_domain: int) -> tuple[GroupPlacement, ...]:
    """Node and NVLink-domain span of every group kind under the mapping's rank order."""
    out = []
    order = order_of(m)
    for kind, (grid, dims) in GROUP_KINDS.items():
        sizes = dense_sizes(m) if grid == "dense" else expert_sizes(m)
        size = 1
        for d in dims:
            size *= sizes[d]
        out.append(GroupPlacement(kind, size, m.gpus // size, _max_span(sizes, dims, gpus_per_node, order),
                                  _max_span(sizes, dims, gpus_per_domain, order)))
    return tuple(out)
