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


def least_heaviest_rank(base: np.ndarray, slope: np.ndarray, blocks: int, least: int) -> float:
    """The least possible largest base_r + slope_r·k_r over whole block counts k_r >= `least` per rank adding
    up to `blocks` (slopes >= 0): every rank takes its `least`, then each further block goes where it adds
    least, so the answer is the larger of the ranks' start and the (blocks − least·ranks)-th smallest of
    base_r + slope_r·(least + j), j >= 1. A bound on the slowest (or heaviest) pipeline rank when every
    block costs a rank at least slope_r: it sees the whole blocks a mean over the ranks misses."""
    first = float(np.max(base + least * slope))
    extra = blocks - least * len(base)
    if extra <= 0:
        return first
    steps = np.arange(least + 1, least + extra + 1, dtype=float)
    values = (base[:, None] + slope[:, None] * steps[None, :]).ravel()
    return max(first, float(np.partition(values, extra - 1)[extra - 1]))
