"""The pipeline schedule's time: 1F1B with uneven stages and the interleaved (VPP) schedule, in one formula.

With per-microbatch stage times t_s, the slowest stage sets the steady state and fill and drain pass
once through every stage at its own time. With v chunks per rank (v = 1 is 1F1B):

    T = m·max_s t_s + (Σ_s t_s − max_s t_s)/v,   so   v·T = Σ_s t_s + (v·m − 1)·max_s t_s.

Equal stages give the bubbles (p−1)/(m+p−1) and (p−1)/(v·m+p−1) (Narayanan et al. 2021, seed 000).
The solver works on v·T in whole microseconds (exact in integers); the step-time model divides by v.
"""

from __future__ import annotations

import numpy as np


def pipeline_time_scaled(total, slowest, m, vpp):  # noqa: ANN001, ANN201 - ints or numpy arrays alike
    """VPP × the pipeline time of m microbatches over stages whose times sum to `total` with the slowest
    `slowest`: Σ t_s + (v·m − 1)·max t_s (integers stay integers)."""
    return total + (vpp * m - 1) * slowest


def pipeline_seconds(stage: np.ndarray, m: np.ndarray | float, vpp: np.ndarray | float) -> np.ndarray:
    """Pipeline time of m microbatches over stages with per-microbatch times `stage` (runs × stages)."""
    return pipeline_time_scaled(stage.sum(axis=1), stage.max(axis=1), m, vpp) / vpp


def even_stretch(pp: int, vpp: int, m: float) -> float:
    """The pipeline time of m microbatches over PP equal stages (v chunks per rank) per second of the
    stages' summed time of one microbatch, (1 + (v·m − 1)/p)/v: a floor on the summed time, spread evenly,
    is a floor on the pipeline time."""
    return pipeline_time_scaled(pp, 1, m, vpp) / (vpp * pp)


def least_heaviest_rank(base: np.ndarray, weights: np.ndarray, totals: np.ndarray, least: int | np.ndarray,
                        most: np.ndarray | None = None) -> float:
    """The least possible largest base_r + the weights of the blocks rank r holds, over every assignment of
    whole blocks (totals[k] of each kind k, each weighing weights[r, k] >= 0 on rank r) with least_r <= k_r <=
    most_r blocks per rank (`least` one number for every rank or one per rank; `most` None: no upper bound).
    A rank holding j blocks weighs at least base_r plus its j lightest (lightest_blocks: convex in j), so every rank takes its `least`, then each further
    block goes where it adds least among the ranks with room: the answer is the larger of the ranks' start
    and the (blocks − least·ranks)-th smallest of base_r + lightest_r(least + j), 1 <= j <= most_r − least.
    A bound on the slowest (or heaviest) pipeline rank: it sees the whole blocks, and the kinds a rank
    cannot all hold, that a mean over the ranks misses. Where `most` leaves too little room for the blocks
    it is ignored (the bound without it still holds)."""
    blocks = int(totals.sum())
    if np.ndim(least) == 0:
        upto = int(least) + max(blocks - int(least) * len(base), 0)
    else:
        upto = int(np.max(least)) + max(blocks - int(np.sum(least)), 0)
    return heaviest_of_lightest(base, lightest_blocks(weights, totals, min(upto, blocks)), blocks, least, most)


def least_heaviest_rank_of_kinds(base: np.ndarray, weights: np.ndarray, totals: np.ndarray,
                                 least: int | np.ndarray) -> float:
    """least_heaviest_rank, also over the heaviest kinds' blocks alone: the largest of its value over the first
    i kinds by their mean weight, heaviest first (i = 1..kinds; every rank's `least` blocks only where i counts
    every kind). A rank weighs at least its base plus the blocks it holds of any kinds (weights >= 0), and those
    are an assignment of those kinds' blocks, so each is a bound. Over every kind the ranks all take the light
    kinds' blocks first, as if each held them; over the heavy kinds alone the few light blocks cannot soften
    every rank (DeepSeek-V3's 3 dense blocks among 61: its 58 MoE blocks over 16 ranks put 4 on one of them)."""
    heaviest = least_heaviest_rank(base, weights, totals, least)
    for kinds in heavy_kinds(weights):
        heaviest = max(heaviest, least_heaviest_rank(base, weights[:, kinds], totals[kinds], 0))
    return heaviest


def heavy_kinds(weights: np.ndarray) -> tuple[np.ndarray, ...]:
    """The first i kinds by their mean weight over the ranks (weights: ranks × kinds), heaviest first, i = 1 ..
    kinds − 1, each in kind order: the kind sets least_heaviest_rank_of_kinds bounds a rank over alone."""
    order = np.argsort(-(np.add.reduce(weights, axis=0) / weights.shape[0]), kind="stable")  # np.mean's value, cheaper
    return tuple(np.sort(order[:i]) for i in range(1, len(order)))


def heaviest_of_lightest(base: np.ndarray, lightest: np.ndarray, blocks: int, least: int | np.ndarray,
                         most: np.ndarray | None = None) -> float:
    """least_heaviest_rank from the ranks' lightest_blocks table over `blocks` blocks (columns up to at least
    the largest least_r plus blocks − Σ least): the table reads neither `least` nor `most`, so a caller asking
    for several builds it once. One least for every rank reads the table in slices (the common case)."""
    if np.ndim(least) == 0:
        low = int(least)
        extra = blocks - low * len(base)
        first = float((base + lightest[:, min(low, blocks)]).max())
        if extra <= 0:
            return first
        values = base[:, None] + lightest[:, low + 1:low + extra + 1]
        columns = low + np.arange(1, extra + 1)[None, :]
    else:
        low = np.asarray(least, dtype=np.int64)
        extra = blocks - int(low.sum())
        rows = np.arange(len(base))
        first = float((base + lightest[rows, np.minimum(low, blocks)]).max())
        if extra <= 0:
            return first
        columns = low[:, None] + np.arange(1, extra + 1)[None, :]
        values = base[:, None] + lightest[rows[:, None], columns]
    if most is not None and (most >= low).all() and int(np.minimum(most - low, extra).sum()) >= extra:
        values = np.where(columns <= most[:, None], values, np.inf)
    flat = values.ravel()  # a fresh array: partitioned in place
    flat.partition(extra - 1)
    return max(first, float(flat[extra - 1]))


def lightest_blocks(weights: np.ndarray, totals: np.ndarray, upto: int) -> np.ndarray:
    """ranks × (upto + 1): the least weight of j blocks on each rank r (j = 0..upto), among totals[k] blocks of
    each kind k weighing weights[r, k] there: its j lightest, each rank's kinds lightest first (a kind in
    sorted place i gives min(max(j − the blocks before it, 0), its blocks) of them)."""
    steps = np.arange(upto + 1, dtype=np.int64)
    if weights.shape[1] == 1:
        return weights[:, :1] * np.minimum(steps, totals[0])[None, :]
    order = np.argsort(weights, axis=1, kind="stable")
    lighter = weights[np.arange(weights.shape[0])[:, None], order]
    blocks = totals[order]
    before = np.cumsum(blocks, axis=1) - blocks
    # np.clip's values, for less than its cost
    taken = np.minimum(np.maximum(steps[None, None, :] - before[:, :, None], 0), blocks[:, :, None])
    return (lighter[:, :, None] * taken).sum(axis=1)
