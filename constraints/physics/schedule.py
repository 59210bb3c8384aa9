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
