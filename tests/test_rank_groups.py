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
