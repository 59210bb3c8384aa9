"""The training-state ledger at cluster scale (seed 003 §2): how many devices the state needs, and
what optimizer offload costs on the critical path.

The per-parameter bytes are constraints/physics/memory.py's (`state_bytes_per_param`: 16 B with BF16 grads,
18 B with FP32 grads); this module adds the device-count bound for a usable HBM and reserve, and the
offload model. Seed 003 §2: the state is a lower bound that sharding never removes, only moves; CPU
or NVMe offload is not free memory, its bandwidth lands on the critical path.
"""

from __future__ import annotations

import math

from parasol.constraints.physics.memory import state_bytes_per_param

OFFLOADABLE_BYTES_PER_PARAM = 12
"""FP32 master weight 4 + Adam m and v 8: the part of the state an optimizer offload moves off the device."""

CHECKPOINT_BYTES_PER_PARAM = 14
"""What a checkpoint saves per parameter: BF16 weight 2 + FP32 master 4 + Adam m, v 8 (gradients are
rebuilt by the next step, so they are not saved)."""


def device_budget_bytes(usable_hbm_bytes: float, reserve_fraction: float | None) -> float:
    """Bytes of usable HBM a mapping may fill: usable · (1 − r) (seed 003 §2; no reserve when r is None)."""
    return usable_hbm_bytes * (1.0 - (reserve_fraction or 0.0))


def on_device_bytes_per_param(grad_dtype: str, offloaded: bool) -> int:
    """State bytes per parameter that stay on the devices: all of it, or weight and gradient when the
    optimizer state is offloaded."""
    total = state_bytes_per_param(grad_dtype)
    return total - OFFLOADABLE_BYTES_PER_PARAM if offloaded else total


def min_devices_for_state(params: float, bytes_per_param: int, budget_bytes: float) -> int:
    """Fewest devices whose budgets hold the state spread evenly, ⌈params·bytes / budget⌉ (before any
    activation: a lower bound; 5T at 16 B on 89.2 GB usable: 897 devices)."""
    return math.ceil(params * bytes_per_param / budget_bytes)


def offload_seconds_per_step(params: float, devices: int, bandwidth_gb_s: float) -> float:
    """Seconds one step spends moving the offloaded optimizer state out and back: each device holds
    12 B/param of its 1/devices share and moves it twice at `bandwidth_gb_s` (the optimizer step needs
    it read back and written out; nothing hides it, seed 003 §2)."""
    per_device = params * OFFLOADABLE_BYTES_PER_PARAM / devices
    return 2 * per_device / (bandwidth_gb_s * 1e9)


def checkpoint_bytes(params: float) -> float:
    """Bytes one checkpoint writes: params · 14 B (5T: 70 TB)."""
    return params * CHECKPOINT_BYTES_PER_PARAM
