"""One accelerator: dense tensor peaks, HBM capacity and bandwidth, and the HBM a job can really use.

Units are decimal: GB = 1e9 bytes, TB/s = 1e12 bytes/s, TFLOP/s = 1e12 FLOP/s, as in the
datasheets that `reference/hardware-specs.yaml` cites, except HBM capacity: the datasheets' "80 GB" and
"141 GB" count binary gigabytes, and `hbm_gb` is what NVML reports to software, in decimal GB (an H100 80GB
reports 81,559 MiB = 85.52 GB, an A100 80GB 81,920 MiB = 85.90 GB, an H200 143,771 MiB = 150.75 GB:
https://thundergolfer.com/blog/nvidia-gpu-memory-capacity). The Blackwell presets still give their
datasheet figures (no NVML reading with a source yet): a lower bound on their memory.

Usable HBM is not the datasheet capacity (seed 003 §1: subtract runtime, communication buffers,
fragmentation, profiling and checkpoint staging). `runtime_reserve_gb` is that deduction. When a
spec leaves it out it defaults to `default_runtime_reserve_gb`: 2 GB fixed plus 5% of HBM. This is
an assumption, chosen to match these orders of magnitude:
- CUDA context, cuBLAS/cuDNN workspaces and NCCL channel buffers: about 1-2 GB per process.
  NCCL_BUFFSIZE defaults to 4 MiB per channel per peer, and a training job holds several
  communicators (NCCL env docs, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
- Caching-allocator fragmentation grows with the memory in use (PyTorch "CUDA semantics: memory
  management", https://pytorch.org/docs/stable/notes/cuda.html; ZeRO, arXiv 1910.02054 §3.2).
Measure the real figure on the target stack and override it per cluster.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, model_validator

from parasol.errors import InputError

RESERVE_FIXED_GB = 2.0
RESERVE_HBM_FRACTION = 0.05


def default_runtime_reserve_gb(hbm_gb: float) -> float:
    """HBM held back from training when a spec states no reserve: 2 GB + 5% of HBM (module docstring)."""
    return RESERVE_FIXED_GB + RESERVE_HBM_FRACTION * hbm_gb


class GPUSpec(BaseModel):
    """Per-accelerator figures the memory ledger and the step-time model read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="accelerator name, as in hardware-specs.yaml")
    bf16_dense_tflops: PositiveFloat = Field(description="dense (non-sparse) BF16 tensor peak, TFLOP/s")
    fp8_dense_tflops: PositiveFloat | None = Field(
        default=None, description="dense FP8 tensor peak, TFLOP/s; null where the part has no FP8 tensor cores"
    )
    fp4_dense_tflops: PositiveFloat | None = Field(
        default=None, description="dense FP4 (NVFP4) tensor peak, TFLOP/s; null where the part has no FP4 tensor cores"
    )
    hbm_gb: PositiveFloat = Field(description="HBM capacity exposed to software, decimal GB")
    hbm_tb_s: PositiveFloat = Field(description="HBM bandwidth, TB/s")
    runtime_reserve_gb: NonNegativeFloat = Field(
        description="HBM a job cannot use for tensors (runtime, NCCL buffers, fragmentation), decimal GB"
    )

    @model_validator(mode="before")
    @classmethod
    def _default_reserve(cls, data: Any) -> Any:
        """Fill a missing reserve by the stated rule, so inline specs need not know it."""
        if (isinstance(data, dict) and data.get("runtime_reserve_gb") is None
                and isinstance(data.get("hbm_gb"), int | float)):
            return {**data, "runtime_reserve_gb": default_runtime_reserve_gb(data["hbm_gb"])}
        return data

    @model_validator(mode="after")
    def _reserve_below_capacity(self) -> GPUSpec:
        """A reserve at or above capacity would leave no memory for training."""
        if self.runtime_reserve_gb >= self.hbm_gb:
            raise ValueError(
                f"runtime_reserve_gb ({self.runtime_reserve_gb:g}) must be below hbm_gb ({self.hbm_gb:g})"
            )
        return self

    @property
    def usable_hbm_gb(self) -> float:
        """HBM left for weights, gradients, optimizer state, activations and buffers, decimal GB."""
        return self.hbm_gb - self.runtime_reserve_gb

    @property
    def hbm_bytes(self) -> int:
        """HBM capacity in bytes."""
        return round(self.hbm_gb * 1e9)

    @property
    def usable_hbm_bytes(self) -> int:
        """Usable HBM in bytes: the budget the memory rules compare against."""
        return round(self.usable_hbm_gb * 1e9)

    @property
    def precisions(self) -> tuple[str, ...]:
        """Tensor precisions this part has a dense peak for."""
        extra = (("fp8",) if self.fp8_dense_tflops is not None else ()) + (
            ("fp4",) if self.fp4_dense_tflops is not None else ())
        return ("bf16", *extra)

    def peak_flops(self, precision: str) -> float:
        """Dense tensor peak in FLOP/s for 'bf16', 'fp8' or 'fp4', the denominator of MFU."""
        key = precision.lower()
        if key == "bf16":
            return self.bf16_dense_tflops * 1e12
        if key == "fp8" and self.fp8_dense_tflops is not None:
            return self.fp8_dense_tflops * 1e12
        if key == "fp4" and self.fp4_dense_tflops is not None:
            return self.fp4_dense_tflops * 1e12
        raise InputError(
            f"{self.name} has no dense {precision} peak.",
            field="precision",
            value=precision,
            expected="one of " + ", ".join(self.precisions),
            fix="train in a listed precision on this accelerator, or pick hardware with those tensor cores.",
        )


# CUDA compute capability (major·10 + minor) by GPU-name prefix (NVIDIA "CUDA GPUs" table).
_COMPUTE_CAPABILITY = (
    ("A100", 80), ("A800", 80), ("H100", 90), ("H800", 90), ("H200", 90), ("H20", 90),
    ("GB200", 100), ("B200", 100), ("GB300", 103), ("B300", 103),
)


def compute_capability(gpu_name: str) -> int | None:
    """SM version of a known NVIDIA part (90 for Hopper), None when parasol cannot state it."""
    for prefix, sm in _COMPUTE_CAPABILITY:
        if gpu_name.upper().startswith(prefix):
            return sm
    return None


# Streaming multiprocessors by GPU-name prefix (longest prefix first): NVIDIA H100 Tensor Core GPU
# Architecture whitepaper (H100 SXM5 132 SMs; H800 and H200 are the same GH100 configuration, H20 78);
# Blackwell and Blackwell Ultra tuning guides / deviceQuery (B200 and GB200 148, B300 and GB300 160);
# A100 whitepaper (108).
_SM_COUNTS = (
    ("GB300", 160), ("GB200", 148), ("B300", 160), ("B200", 148), ("H200", 132), ("H800", 132), ("H100", 132),
    ("H20", 78), ("A100", 108), ("A800", 108),
)


def sm_count(gpu_name: str) -> int | None:
    """Streaming multiprocessors of a known NVIDIA part, None when parasol cannot state it."""
    for prefix, sms in _SM_COUNTS:
        if gpu_name.upper().startswith(prefix):
            return sms
    return None
