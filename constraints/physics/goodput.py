"""Goodput: effective tokens per second after failures, checkpoints and restarts (seed 000 §最后看长
时间的有效吞吐: Q_effective = tokens that advanced and were not rolled back / wall-clock time).

A job of N devices fails N times as often as one device: MTBF_job = MTBF_device / N. A checkpoint of
the training state takes δ = bytes / storage bandwidth to save (and as long to restore). Young–Daly's
interval τ = √(2·δ·M) balances saving often against losing work; per failure the job loses half an
interval of work on average, the restart and the restore. To first order the wasted share of wall
time is δ/τ + (τ/2 + restart + restore)/M, and effective tokens/s = tokens/s × (1 − waste).

Seed 000's example: 1.0M tokens/s at 90% useful time is 0.90M, 1.1M at 80% is 0.88M: the faster
configuration is slower once downtime counts.

The rollout pool of an asynchronous, non-co-located design (seed 003 §8) is its own failure domain:
a rollout failure does not stop training, which keeps consuming the queue, so only the training pool
counts in MTBF_job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOUR_S = 3600.0


def job_mtbf_s(device_mtbf_hours: float, devices: int) -> float:
    """Mean time between failures of a job on `devices` devices, seconds."""
    return device_mtbf_hours * HOUR_S / devices


def checkpoint_seconds(state_bytes: float, storage_gb_s: float) -> float:
    """Save (or restore) time of a checkpoint, bytes / bandwidth."""
    return state_bytes / (storage_gb_s * 1e9)


def young_daly_interval_s(save_s: float, mtbf_s: float) -> float:
    """Checkpoint interval that minimises the expected waste, √(2·δ·M)."""
    return math.sqrt(2 * save_s * mtbf_s)


def lost_per_failure_s(interval_s: float, restart_s: float, restore_s: float) -> float:
    """Expected seconds lost per failure: half an interval of work, the restart and the restore."""
    return interval_s / 2 + restart_s + restore_s


def goodput_fraction(save_s: float, interval_s: float, lost_s: float, mtbf_s: float) -> float:
    """Share of wall time that advances training: 1 − δ/τ − lost/M, never below 0."""
    return max(0.0, 1.0 - save_s / interval_s - lost_s / mtbf_s)


def effective_tokens_per_s(tokens_per_s: float, fraction: float) -> float:
    """Tokens per second that count: steady-state throughput × useful share (seed 000: 1.0M × 0.9 =
    0.90M, 1.1M × 0.8 = 0.88M)."""
    return tokens_per_s * fraction


@dataclass(frozen=True)
class Goodput:
    """The failure-and-checkpoint account of one mapping."""

    devices: int
    job_mtbf_s: float
    save_s: float
    restore_s: float
    interval_s: float
    lost_per_failure_s: float
    fraction: float
    tokens_per_s: float

    @property
    def effective_tokens_per_s(self) -> float:
        return effective_tokens_per_s(self.tokens_per_s, self.fraction)


def goodput(tokens_per_s: float, devices: int, device_mtbf_hours: float, state_bytes: float,
            storage_gb_s: float, restart_s: float) -> Goodput:
    """The whole account for a training pool of `devices` running at `tokens_per_s`."""
    mtbf = job_mtbf_s(device_mtbf_hours, devices)
    save = checkpoint_seconds(state_bytes, storage_gb_s)
    interval = young_daly_interval_s(save, mtbf)
    lost = lost_per_failure_s(interval, restart_s, save)
    return Goodput(devices=devices, job_mtbf_s=mtbf, save_s=save, restore_s=save, interval_s=interval,
                   lost_per_failure_s=lost, fraction=goodput_fraction(save, interval, lost, mtbf),
                   tokens_per_s=tokens_per_s)
