"""Weight publishing BF16 → FP8 with block scales, each stage timed.

Sources: seed 003 §7 (5T weights 10 TB in BF16, 5 TB in FP8, one FP16 scale per 128×128 block,
about 0.61 GB; publish = quantize + reshard + transfer + verify + switch); BRIEF's seed-003 table.
"""

from __future__ import annotations

import pytest

from parasol.constraints.physics import publishing as pub


def test_seed_003_payloads() -> None:
    """5T: 10 TB BF16, 5 TB FP8, 5e12/16,384 scales × 2 B ≈ 0.61 GB."""
    assert pub.bf16_weight_bytes(5e12) == 10e12
    assert pub.fp8_weight_bytes(5e12) == 5e12
    assert pub.scale_count(5e12, 128) == 305_175_782
    assert pub.scale_bytes(5e12, 128, 2) / 1e9 == pytest.approx(0.61, abs=0.005)


def test_stage_times_follow_the_pools() -> None:
    """Quantize reads BF16 on the training pool; reshard/transfer/verify move the FP8 payload on the
    training pool, over min(pools) pairs and on the rollout pool; the total is their sum."""
    t = pub.publish_times(5e12, 4096, 1024, 128, 2, 200, 10, 20, 50, 5.0)
    payload = 5e12 + pub.scale_bytes(5e12, 128, 2)
    assert t.payload_bytes == payload
    assert t.quantize_s == pytest.approx(10e12 / (4096 * 200e9))
    assert t.reshard_s == pytest.approx(payload / (4096 * 10e9))
    assert t.transfer_s == pytest.approx(payload / (1024 * 20e9))
    assert t.verify_s == pytest.approx(payload / (1024 * 50e9))
    assert t.total_s == pytest.approx(t.quantize_s + t.reshard_s + t.transfer_s + t.verify_s + 5.0)


def test_missing_rate_leaves_the_latency_unknown() -> None:
    """A stage without a rate is named; the total is None (the contract says 'not checked')."""
    t = pub.publish_times(5e12, 4096, 1024, 128, 2, None, 10, 20, 50, None)
    assert t.missing == ("quantize", "switch")
    assert t.total_s is None
