"""Weight publishing from the BF16 training pool to the FP8 rollout pool (seed 003 §7).

Publishing is not one cast: quantize BF16 → FP8 with block scales, reshard from the training layout to
the rollout layout, transfer at end-to-end effective bandwidth, verify (checksums of weights and
scales), then switch the rollout pool atomically, so one request runs on one version from prefill to
the end of decode. Seed 003 §7: 5T weights are 10 TB in BF16, 5 TB in FP8, plus one FP16 scale per
128×128 block (5e12 / 16,384 · 2 B ≈ 0.61 GB).

Rates are effective GB/s per device of the pool doing the stage (problems/contract_spec.py):
quantize and reshard on the training pool, transfer over min(training, rollout) device pairs, verify
on the rollout pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parasol.constraints.physics.dtypes import BF16_BYTES, FP8_BYTES

GB = 1e9


def bf16_weight_bytes(params: float) -> float:
    """BF16 weights, 2 B/param (5T: 10 TB)."""
    return params * BF16_BYTES


def fp8_weight_bytes(params: float) -> float:
    """FP8 weights, 1 B/param (5T: 5 TB)."""
    return params * FP8_BYTES


def scale_count(params: float, block: int) -> int:
    """Block scales, one per block×block weights, edge padding ignored as in seed 003 §7: ⌈P/block²⌉."""
    return math.ceil(params / (block * block))


def scale_bytes(params: float, block: int, bytes_per_scale: int) -> float:
    """Bytes of the block scales (5T, 128×128, FP16: 610,351,564 B ≈ 0.61 GB)."""
    return scale_count(params, block) * bytes_per_scale


@dataclass(frozen=True)
class PublishTimes:
    """Seconds of each publishing stage; None where the problem gives no rate for it."""

    quantize_s: float | None
    reshard_s: float | None
    transfer_s: float | None
    verify_s: float | None
    switch_s: float | None
    payload_bytes: float

    @property
    def stages(self) -> dict[str, float | None]:
        """Stage name -> seconds, in pipeline order."""
        return {"quantize": self.quantize_s, "reshard": self.reshard_s, "transfer": self.transfer_s,
                "verify": self.verify_s, "switch": self.switch_s}

    @property
    def missing(self) -> tuple[str, ...]:
        """Stages without a rate (the total is then unknown)."""
        return tuple(name for name, s in self.stages.items() if s is None)

    @property
    def total_s(self) -> float | None:
        """Sum of the stages, which run one after another (seed 003 §7); None when one is unknown."""
        return None if self.missing else sum(s for s in self.stages.values() if s is not None)


def _seconds(nbytes: float, gb_s: float | None, devices: int) -> float | None:
    """Bytes over `devices` working in parallel at `gb_s` each; None without a rate."""
    return None if gb_s is None else nbytes / (devices * gb_s * GB)


def publish_times(params: float, train_devices: int, rollout_devices: int, block: int, bytes_per_scale: int,
                  quantize_gb_s: float | None, reshard_gb_s: float | None, transfer_gb_s: float | None,
                  verify_gb_s: float | None, switch_s: float | None) -> PublishTimes:
    """Each stage's time for one version: quantize reads the BF16 weights on the training pool; reshard,
    transfer and verify move the FP8 payload (weights and scales) on the training pool, over
    min(training, rollout) pairs and on the rollout pool."""
    payload = fp8_weight_bytes(params) + scale_bytes(params, block, bytes_per_scale)
    pairs = max(min(train_devices, rollout_devices), 1)
    return PublishTimes(
        quantize_s=_seconds(bf16_weight_bytes(params), quantize_gb_s, train_devices),
        reshard_s=_seconds(payload, reshard_gb_s, train_devices),
        transfer_s=_seconds(payload, transfer_gb_s, pairs),
        verify_s=_seconds(payload, verify_gb_s, max(rollout_devices, 1)),
        switch_s=switch_s,
        payload_bytes=payload,
    )
