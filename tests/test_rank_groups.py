"""Group placement under Megatron's rank order: the fast span computation equals enumerating every
group (megatron-groups.md §1.2-1.5), including domains that do not divide the groups (NVL72)."""

from __future__ import annotations

import random

from parasol.problems.mapping import Mapping
from parasol.problems.rank_groups import GROUP_KINDS, dense_sizes, expert_sizes, groups, placements


def test_spans_match_enumeration() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(60):
        tp, pp, cp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2])
        ep, etp, gpus = rng.choice([1, 2, 3, 4, 8]), rng.choice([1, 2]), rng.choice([48, 64, 144, 256])
        if gpus % (tp * pp * cp) or gpus % (etp * ep * pp):
            continue
        m = Mapping(gpus=gpus, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, gbs=gpus, seq_len=1024)
        for node, domain in ((8, 8), (4, 72), (4, 4)):
            if gpus % node:
                continue
            for placed, (grid, dims) in zip(placements(m, node, domain), GROUP_KINDS.values(), strict=True):
                all_groups = groups(dense_sizes(m) if grid == "dense" else expert_sizes(m), dims)
                assert placed.max_nodes == max(len({r // node for r in g}) for g in all_groups)
                assert placed.max_domains == max(len({r // domain for r in g}) for g in all_groups)
                checked += 1
    assert checked > 300


def test_seed_a_groups() -> None:
    """megatron-groups.md §1.5: W=1024 PP8 EP64 on 8-GPU nodes: DP groups span 16 nodes, EP groups 8,
    expert-DP partners r and r+64 lie 8 nodes apart, PP neighbours 16 nodes apart."""
    m = Mapping(gpus=1024, tp=1, pp=8, cp=1, ep=64, etp=1, gbs=4096, seq_len=8192)
    spans = {p.kind: (p.size, p.count, p.max_nodes) for p in placements(m, 8, 8)}
    assert spans["dp_attn"] == (128, 8, 16)
    assert spans["ep"] == (64, 16, 8)
    assert spans["dp_expert"] == (2, 512, 2)
    assert spans["pp"] == (8, 128, 8)


def test_placed_links_are_shared_only_between_grids_that_place_alike() -> None:
    """comm._placed_link keeps one link per topology, group kind and rank_groups.lattice_key (the other
    dimensions' strides taken modulo a length nodes, NVLink domains and racks divide): every grid's kept link
    is the one its own groups give, on 8-GPU nodes, NVL72 racks and a job with idle GPUs per node."""
    from parasol.constraints.physics import comm
    from parasol.hardware.presets import load_preset
    from parasol.problems.rank_groups import order_of

    rng = random.Random(11)
    hgx = load_preset("h100-hgx").topology
    topologies = [hgx, load_preset("gb200-nvl72").topology, hgx.for_job(64, 4)]
    comm._PLACED.clear()
    shared = 0
    for _ in range(400):
        tp, pp, cp = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 2, 4])
        ep, etp, gpus = rng.choice([1, 2, 4, 8, 16, 32]), rng.choice([1, 2]), rng.choice([64, 288, 1024, 4608])
        if gpus % (tp * pp * cp) or gpus % (etp * ep * pp):
            continue
        order = rng.choice(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"])
        m = Mapping(gpus=gpus, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, gbs=gpus, seq_len=1024, rank_order=order)
        for topology in topologies:
            for kind, (grid, dims) in GROUP_KINDS.items():
                sizes = dense_sizes(m) if grid == "dense" else expert_sizes(m)
                before = len(comm._PLACED)
                kept = comm._placed_link(topology, kind, sizes, dims, order_of(m))
                shared += len(comm._PLACED) == before
                assert kept == comm._worst_link(topology, kind, sizes, dims, order_of(m)), (m, kind, topology)
    assert shared > 1000
