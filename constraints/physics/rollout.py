"""Asynchronous, non-co-located rollout (seed 003 §8): two pools, supply against consumption, and
the staleness of the samples training consumes.

Seed 003 §8: let R_supply be the accepted tokens per second the rollout pool puts into the training
queue (after generation, reward, filtering, version checks) and R_consume = GBS·S / T_step the rate the
training pool consumes; steady state needs R_supply ≥ R_consume, else training waits and its real step
time becomes GBS·S / R_supply. Staleness is counted three ways: versions, seconds and tokens. With a
publish latency P and a step time T the freshest weights rollout can run are ⌈P/T⌉ versions old at
best; this module uses the continuous P/T (versions), P (seconds) and P·R_consume (tokens).
"""

from __future__ import annotations

import math


def rollout_devices(pinned: int | None, cluster_devices: int | None, training_devices: int) -> int | None:
    """The rollout pool: the pinned size, or the cluster's devices training does not use; None when the
    problem has no pool."""
    if pinned is not None:
        return pinned
    if cluster_devices is not None:
        return cluster_devices - training_devices
    return None


def supply_tokens_per_s(devices: int, accepted_per_device: float) -> float:
    """Accepted tokens per second the pool delivers, devices · rate."""
    return max(devices, 0) * accepted_per_device


def consumption_tokens_per_s(tokens_per_step: int, step_s: float) -> float:
    """Tokens per second training consumes, GBS·S / T_step."""
    return tokens_per_step / step_s


def starved_step_s(tokens_per_step: int, step_s: float, supply: float) -> float:
    """The step time training actually runs at: max(T_step, GBS·S / R_supply) (seed 003 §8)."""
    return max(step_s, tokens_per_step / supply) if supply > 0 else math.inf


def step_floor_for_supply(tokens_per_step: int, supply: float) -> float:
    """Smallest step time at which supply keeps up, GBS·S / R_supply."""
    return tokens_per_step / supply if supply > 0 else math.inf


def devices_needed(tokens_per_step: int, step_s: float, accepted_per_device: float) -> int:
    """Rollout devices whose supply meets consumption at this step time, ⌈GBS·S/(T·rate)⌉."""
    return math.ceil(consumption_tokens_per_s(tokens_per_step, step_s) / accepted_per_device - 1e-9)


def staleness_versions(publish_s: float, step_s: float) -> float:
    """Versions training advances while one version is published, P / T."""
    return publish_s / step_s


def staleness_tokens(publish_s: float, tokens_per_step: int, step_s: float) -> float:
    """Tokens trained while one version is published, P · GBS·S / T."""
    return publish_s * tokens_per_step / step_s
