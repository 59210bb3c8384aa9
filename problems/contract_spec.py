"""The `contract:` section of a problem file: seed 003's constraint contract for one training run.

Seed 003 turns "train a 5T MoE with 384 experts, top-16, 128k context, BF16 training, FP8 rollout,
asynchronous rollout on a separate pool" into questions every candidate mapping must answer (§9).
This section holds the inputs those answers need beyond the model, the run and the cluster: the
routing skew model, the long-context exposure bound α, the HBM reserve and offload, the rollout pool
and its staleness budgets, the weight-publishing pipeline and the failure model (seed 000 §最后看长
时间的有效吞吐). A field left at None is "not checked": the contract table says which input is missing.
Defaults exist only where a seed gives the number (128×128 blocks with FP16 scales, seed 003 §7).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from parasol.problems.model.architecture import Strict


class SkewKind(StrEnum):
    """How routed assignments spread over the experts (seed 003 §4: min/mean/p95/max of the load)."""

    uniform = "uniform"
    zipf = "zipf"
    histogram = "histogram"


class RoutingContract(Strict):
    """Routing and EP communication (seed 003 §4, §6)."""

    skew: SkewKind = Field(default=SkewKind.uniform,
                           description="load model: uniform (balanced), zipf (exponent), or a measured histogram")
    zipf_exponent: PositiveFloat | None = Field(
        default=None, description="Zipf exponent s: the expert of rank r gets a share ∝ 1/r^s (needed by skew: zipf)")
    histogram: tuple[NonNegativeFloat, ...] | None = Field(
        default=None, description="measured assignments (or shares) per expert, one entry per routed expert "
                                  "(needed by skew: histogram)")
    min_ep_compute_comm_ratio: PositiveFloat | None = Field(
        default=None, description="require the EP compute/communication ratio 3·f·B/(b·F) of every mapping "
                                  "at or above this (seed 003 §6: >= 1 lets expert compute hide the all-to-all)")
    effective_flops_fraction: float | None = Field(
        default=None, gt=0, le=1,
        description="effective share of the GEMM precision's dense peak F for expert GEMMs (measured; seed 003 §6 "
                    "asks for effective, not peak, figures); None reports the ratio at peak as an upper bound")
    effective_bandwidth_fraction: float | None = Field(
        default=None, gt=0, le=1,
        description="effective share of the EP group's link bandwidth B (measured); None uses the link's figure")
    per_peer_rounding: PositiveInt | None = Field(
        default=None, description="fixed-size all-to-all: slots per (source, destination) buffer are rounded up to "
                                  "a multiple of this (seed 003 §4: per-peer fixed buffer shapes); None: no rounding")

    @model_validator(mode="after")
    def _skew_inputs(self) -> RoutingContract:
        if self.skew is SkewKind.zipf and self.zipf_exponent is None:
            raise ValueError("skew: zipf needs zipf_exponent (e.g. 0.5)")
        if self.skew is SkewKind.histogram and not self.histogram:
            raise ValueError("skew: histogram needs histogram, one measured load per routed expert")
        if self.histogram is not None and not any(self.histogram):
            raise ValueError("histogram has no positive entry")
        return self


class LongContextContract(Strict):
    """Long context (seed 003 §5): exposed CP communication as a share of the step."""

    max_exposed_cp_share: float | None = Field(
        default=None, gt=0, le=1,
        description="α: exposed CP communication / step time must not exceed this (seed 003 §5; the seed sets no "
                    "value, it is the team's own budget)")


class OffloadKind(StrEnum):
    """Where optimizer state may live off the device (seed 003 §2: its bandwidth is on the critical path)."""

    none = "none"
    cpu = "cpu"
    nvme = "nvme"


class StateContract(Strict):
    """The training-state ledger (seed 003 §2)."""

    reserve_fraction: float | None = Field(
        default=None, ge=0, lt=1,
        description="r: share of usable HBM kept free for fragmentation, retries, weight switching and buffer peaks "
                    "(seed 003 §2: calibrate from measurement); None counts no reserve")
    offload: OffloadKind = Field(default=OffloadKind.none,
                                 description="move the FP32 master weights and Adam moments (12 B/param) to CPU or NVMe")
    offload_gb_s: PositiveFloat | None = Field(
        default=None, description="effective offload bandwidth per device, GB/s each way (needed unless offload: none)")

    @model_validator(mode="after")
    def _offload_bandwidth(self) -> StateContract:
        if self.offload is not OffloadKind.none and self.offload_gb_s is None:
            raise ValueError(f"offload: {self.offload.value} needs offload_gb_s (its bandwidth is on the critical path)")
        return self


class RolloutContract(Strict):
    """The asynchronous rollout pool on its own devices (seed 003 §8). `hardware.gpus` is the training
    pool; the rollout pool is `devices`, or `cluster_devices − hardware.gpus`."""

    devices: PositiveInt | None = Field(default=None, description="pin the rollout pool's size (devices)")
    cluster_devices: PositiveInt | None = Field(
        default=None, description="devices of both pools together; the rollout pool gets what training does not use")
    accepted_tokens_per_s_per_device: PositiveFloat | None = Field(
        default=None, description="tokens per second one rollout device delivers to the training queue after "
                                  "generation, reward, filtering and version checks (measured)")
    max_versions: NonNegativeFloat | None = Field(
        default=None, description="staleness budget in policy versions (training steps) between generation and use")
    max_seconds: PositiveFloat | None = Field(default=None, description="staleness budget in seconds")
    max_tokens: PositiveFloat | None = Field(default=None, description="staleness budget in trained tokens")

    @model_validator(mode="after")
    def _one_size(self) -> RolloutContract:
        if self.devices is not None and self.cluster_devices is not None:
            raise ValueError("give rollout.devices (pin the pool) or rollout.cluster_devices (split a total), not both")
        return self


class PublishingContract(Strict):
    """BF16 → FP8 weight publishing to the rollout pool (seed 003 §7). Rates are effective GB/s per
    device of the pool doing the stage: quantize and reshard on the training pool, transfer over
    min(training, rollout) device pairs, verify on the rollout pool."""

    block: PositiveInt = Field(default=128, description="FP8 scaling block edge: one scale per block×block weights "
                                                        "(seed 003 §7: 128×128)")
    scale_bytes: PositiveInt = Field(default=2, description="bytes per scale (seed 003 §7: FP16)")
    quantize_gb_s: PositiveFloat | None = Field(default=None, description="BF16 read by the quantize kernel, GB/s per device")
    reshard_gb_s: PositiveFloat | None = Field(default=None, description="FP8 payload resharded, GB/s per device")
    transfer_gb_s: PositiveFloat | None = Field(default=None, description="FP8 payload sent end to end, GB/s per device pair")
    verify_gb_s: PositiveFloat | None = Field(default=None, description="FP8 payload checksummed, GB/s per rollout device")
    switch_s: NonNegativeFloat | None = Field(default=None, description="atomic switch of the rollout pool, seconds")


class GoodputContract(Strict):
    """Effective throughput after failures, checkpoints and restarts (seed 000 §最后看长时间的有效吞吐)."""

    device_mtbf_hours: PositiveFloat | None = Field(
        default=None, description="mean time between failures of one device (the job's MTBF is this / devices)")
    storage_gb_s: PositiveFloat | None = Field(
        default=None, description="aggregate checkpoint storage bandwidth, GB/s (save and restore)")
    restart_s: NonNegativeFloat | None = Field(
        default=None, description="detection, rescheduling and restart of the job after a failure, seconds")


class Contract(Strict):
    """Seed 003's contract inputs; every subsection optional."""

    routing: RoutingContract = RoutingContract()
    long_context: LongContextContract = LongContextContract()
    state: StateContract = StateContract()
    rollout: RolloutContract | None = Field(default=None, description="the rollout pool; absent: no rollout pool")
    publishing: PublishingContract = PublishingContract()
    goodput: GoodputContract = GoodputContract()
