"""Goodput: effective tokens/s after failures, checkpoints and restarts.

Sources: seed 000 §最后看长时间的有效吞吐 (Q_effective; the example 1.0M tok/s at 90% vs 1.1M at 80%:
0.90M vs 0.88M; BRIEF "Numbers the project must reproduce exactly"); seed 003 §8 (the rollout pool is
its own failure domain); Young (1974) and Daly (2006) for the checkpoint interval √(2·δ·M).
"""

from __future__ import annotations

import math

import pytest

from parasol.constraints.physics import goodput as g
from parasol.constraints.physics.training_state import checkpoint_bytes


def test_seed_000_example_is_reproduced_exactly() -> None:
    """Seed 000: 1.0M × 90% = 0.90M and 1.1M × 80% = 0.88M: the faster configuration loses."""
    a = g.effective_tokens_per_s(1_000_000, 0.90)
    b = g.effective_tokens_per_s(1_100_000, 0.80)
    assert a == pytest.approx(900_000, abs=1e-6)
    assert b == pytest.approx(880_000, abs=1e-6)
    assert a > b


def test_job_mtbf_falls_with_devices() -> None:
    """The job fails N times as often as one device: 50,000 h over 4,096 devices is about 12.2 h."""
    assert g.job_mtbf_s(50_000, 1) == 50_000 * 3600
    assert g.job_mtbf_s(50_000, 4096) == pytest.approx(50_000 * 3600 / 4096)
    assert g.job_mtbf_s(50_000, 4096) / 3600 == pytest.approx(12.207, abs=1e-3)


def test_young_daly_interval_and_waste() -> None:
    """τ = √(2δM); waste δ/τ + (τ/2 + restart + restore)/M; 5T checkpoint 14 B/param = 70 TB."""
    assert checkpoint_bytes(5e12) == 70e12
    save = g.checkpoint_seconds(70e12, 1000)
    assert save == pytest.approx(70.0)
    mtbf = g.job_mtbf_s(50_000, 4096)
    tau = g.young_daly_interval_s(save, mtbf)
    assert tau == pytest.approx(math.sqrt(2 * 70 * mtbf))
    account = g.goodput(1e6, 4096, 50_000, 70e12, 1000, 600)
    assert account.interval_s == pytest.approx(tau)
    assert account.lost_per_failure_s == pytest.approx(tau / 2 + 600 + 70)
    assert account.fraction == pytest.approx(1 - 70 / tau - (tau / 2 + 670) / mtbf)
    assert account.effective_tokens_per_s == pytest.approx(1e6 * account.fraction)


def test_young_daly_minimises_the_waste() -> None:
    """Any other interval wastes more than √(2δM) (first-order model)."""
    save, mtbf = 70.0, 43_945.0
    best = g.young_daly_interval_s(save, mtbf)

    def waste(tau: float) -> float:
        return 1 - g.goodput_fraction(save, tau, g.lost_per_failure_s(tau, 0, 0), mtbf)

    assert waste(best) < waste(best * 0.8)
    assert waste(best) < waste(best * 1.25)


def test_bigger_jobs_keep_less_of_their_time() -> None:
    """More devices: more failures per hour, a lower useful share at the same checkpoint cost."""
    small = g.goodput(1e6, 1024, 50_000, 70e12, 1000, 600).fraction
    large = g.goodput(1e6, 16384, 50_000, 70e12, 1000, 600).fraction
    assert 0 < large < small < 1


def test_goodput_never_negative() -> None:
    """A job that fails faster than it can checkpoint keeps nothing, never less."""
    assert g.goodput(1e6, 10**6, 1, 70e12, 1, 600).fraction == 0.0
