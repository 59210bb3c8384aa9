"""Whole stage tables and the min-max cut over them: the dense reference the band DP (cuts.stage_bands,
cuts.least_max_cut) is checked against. Every stage's time and memory over every block interval, built
with the same bulk formulas (costs.interval_sums, edge_terms, in_flight_memory), then cut down to the
entries a contiguous cut can read."""

from __future__ import annotations

import numpy as np

from parasol.solver.search.costs import RowCosts, edge_terms, in_flight_memory, interval_sums
from parasol.solver.search.cuts import _band, least_max_cut


def all_stage_matrices(c: RowCosts, counts: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Time and memory of each stage s holding blocks i..j−1, for every i < j (NO_STAGE elsewhere): RowCosts
    formulas in bulk, the blocks' sums over each interval computed once, the terms that read a stage's edge
    once per distinct edge, and each stage adding its in-flight share of the activations."""
    sums = interval_sums(c, counts)
    by_edge: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    out = []
    for s in range(c.row.pp):
        time, fixed, held = edge_terms(c, s, sums, by_edge)
        out.append((time, in_flight_memory(fixed, held, c.inflight[s], sums.none)))
    return out


def min_max_cut(stage_costs: list[np.ndarray], blocks: int) -> tuple[int, tuple[int, ...]] | None:
    """Least possible largest stage cost over contiguous cuts with >= 1 block per stage: stage s holding
    blocks i..j−1 costs stage_costs[s][i, j], NO_STAGE where it may not (i >= j, or excluded). The first
    stage starts at block 0 and the last ends at `blocks`, so only the first's row 0 and the last's last
    column are read (least_max_cut over those, each middle stage's band alone)."""
    stages = len(stage_costs)
    if stages > 1 and blocks < stages:
        return None
    return least_max_cut(flat_bands(stage_costs, blocks), blocks, stages)


def flat_bands(stage_costs: list[np.ndarray], blocks: int) -> np.ndarray:
    """The entries of whole stage tables that least_max_cut reads, flat, as cuts.StageBands lays them out:
    the first stage's row 0, each middle stage's band (cuts._band) and the last stage's last column."""
    stages = len(stage_costs)
    if stages == 1:
        return stage_costs[0][:1].ravel()
    middle = [m[_band(s, stages, blocks), _band(s + 1, stages, blocks)]
              for s, m in enumerate(stage_costs[1:-1], start=1)]
    return np.concatenate([stage_costs[0][:1].ravel(), *(m.ravel() for m in middle),
                           stage_costs[-1][:, -1:].ravel()])
