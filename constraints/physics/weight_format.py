"""Bytes per weight a rank holds across a step, by precision, FP8 recipe, --fp8-param-gather and GPU.

Transformer Engine's GEMM weights (attention, MLP, shared and routed expert matrices) are what FP8 changes;
the embedding, the output layer (Megatron's own linear, run in BF16), norms and routers stay BF16.

- BF16 training: the BF16 parameter, 2 B.
- FP8 without --fp8-param-gather: the BF16 parameter plus the FP8 copy TE quantizes on the first microbatch and
  keeps for the others (Megatron passes is_first_microbatch unless --disable-parameter-transpose-cache,
  megatron/core/extensions/transformer_engine.py:1338-1345; TE module/linear.py:1958-2071 stores it in
  `_fp8_workspaces`; grouped_linear.py:2261-2312 per expert).
- FP8 with --fp8-param-gather: the FP8 parameter alone (its data in the distributed optimizer's uint8 buffer,
  param_and_grad_buffer.py:921-923; the optimizer keeps the FP32 master as always).
- Under FSDP the parameter is sharded, TE's cached copy is not (it has the unsharded weight's shape); TE caches
  nothing for a module torch FSDP2 wraps (module/linear.py:1958, base.py:1036-1047), and Megatron turns FP8
  parameters off there (arguments.py:1051-1056): the BF16 parameter alone.

The FP8 copy holds the row-wise data the forward GEMM reads and the column-wise data the backward's dgrad
reads. Per-tensor scaling (delayed, tensorwise) stores the latter as a transposed copy only on GPUs whose FP8
GEMMs take the TN layout alone (TE tensor/storage/float8_tensor_storage.py update_usage; utils.py:658: SM
10.x, 11.x and 13+ take other layouts and keep none; Megatron creates it after each gather, fp8_utils.py:687-707).
MXFP8 keeps both directions, each with one E8M0 scale per 32 values (mxfp8_tensor_storage.py); blockwise
keeps both (float8_blockwise_tensor_storage.py:459-499), each with one FP32 scale per 128×128 block.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from parasol.constraints.physics.dtypes import BF16_BYTES, FP8_BYTES
from parasol.hardware.gpu import compute_capability
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import Precision, Training

MXFP8_SCALE = Fraction(1, 32)
"""Bytes of E8M0 scale per MXFP8 value (one byte per 32-value block)."""

BLOCKWISE_SCALE = Fraction(4, 128 * 128)
"""Bytes of FP32 scale per value of a 128×128-block-scaled FP8 weight."""


def non_tn_fp8_gemms(gpu_sm: int | None) -> bool:
    """Whether the GPU's FP8 GEMMs take layouts other than TN (TE utils.py:658: SM 10.x, 11.x, 13+); an
    unknown GPU is taken as TN-only, the larger figure."""
    if gpu_sm is None:
        return False
    return 100 <= gpu_sm < 120 or gpu_sm >= 130


def fp8_param_gather_on(training: Training, options: MegatronOptions) -> bool:
    """Whether TE's GEMM weights are FP8 parameters: FP8 training with --fp8-param-gather, or (flag unset)
    parasol's choice wherever Megatron accepts it: the distributed optimizer or Megatron-FSDP
    (arguments.py:1095-1097) and, with the optimizer on the host, delayed scaling (1888-1891). Megatron turns
    it off under torch FSDP2 (arguments.py:1051-1056, TE 2.0 and later)."""
    if training.precision is not Precision.fp8 or training.fsdp == "torch-fsdp2":
        return False
    if options.fp8_param_gather is not None:
        return options.fp8_param_gather
    sharded = training.distributed_optimizer or training.fsdp == "megatron-fsdp"
    return sharded and not (options.optimizer_cpu_offload and options.fp8_recipe != "delayed")


def fp8_copy_bytes(recipe: str, gpu_sm: int | None) -> Fraction:
    """Bytes per element of a TE FP8 weight with both GEMM directions: 1 B row-wise, plus a 1 B transposed copy
    under per-tensor scaling on a TN-only GPU; MXFP8 and blockwise 2 B and their scales. A custom quantizer is
    priced as per-tensor scaling."""
    if recipe == "mxfp8":
        return 2 * (FP8_BYTES + MXFP8_SCALE)
    if recipe == "blockwise":
        return 2 * (FP8_BYTES + BLOCKWISE_SCALE)
    return Fraction(FP8_BYTES if non_tn_fp8_gemms(gpu_sm) else 2 * FP8_BYTES)


@dataclass(frozen=True)
class WeightFormat:
    """Bytes per parameter a rank holds for TE GEMM weights and for the others (BF16), the bytes per GEMM weight
    the data-parallel parameter all-gather moves, and what it rests on."""

    gemm: Fraction
    other: Fraction
    fp8_params: bool
    description: str
    gather: Fraction = Fraction(BF16_BYTES)
    """1 B for FP8 parameters under per-tensor or blockwise scaling (the uint8 parameter buffer); 2 B for BF16
    parameters and for MXFP8 ones, which Megatron gathers in BF16 inside the gradient buffer and quantizes after
    (param_and_grad_buffer.py:1160-1180)."""
    cached: Fraction = Fraction(0)
    """The part of `gemm` that is TE's cached FP8 copy of a BF16 parameter: it has the unsharded weight's shape, so
    FSDP does not shard it (Megatron-FSDP leaves TE's cache on; under torch FSDP2 TE keeps none)."""

    @property
    def parameter(self) -> Fraction:
        """Bytes per GEMM weight of the parameter itself (what FSDP shards and gathers): `gemm` less the cache."""
        return self.gemm - self.cached


BF16_WEIGHTS = WeightFormat(Fraction(BF16_BYTES), Fraction(BF16_BYTES), False, "BF16 2 B")
"""The weights of a BF16 run."""


@lru_cache(maxsize=256)
def weight_format(training: Training, options: MegatronOptions, gpu_sm: int | None) -> WeightFormat:
    """The weight bytes of a run (module docstring): BF16 2 B; FP8 2 B plus the cached FP8 copy, or the FP8
    parameter alone under --fp8-param-gather; under torch FSDP2 the BF16 parameter alone, since TE caches no
    copy for a module FSDP2 wraps (module/linear.py:1958, base.py:1036-1047). Kept per run: solve asks for it
    once per row's settings."""
    if training.precision is not Precision.fp8:
        return BF16_WEIGHTS
    copy = fp8_copy_bytes(options.fp8_recipe, gpu_sm)
    if options.fp8_recipe in ("mxfp8", "blockwise"):
        parts = "row- and column-wise with scales"
    else:
        parts = "row-wise" if non_tn_fp8_gemms(gpu_sm) else "row-wise + transpose"
    fp8 = f"FP8 {options.fp8_recipe} ({parts}) {float(copy):g} B"
    if fp8_param_gather_on(training, options):
        gather = Fraction(BF16_BYTES if options.fp8_recipe == "mxfp8" else FP8_BYTES)
        return WeightFormat(copy, Fraction(BF16_BYTES), True, fp8, gather)
    if training.fsdp == "torch-fsdp2":
        return WeightFormat(Fraction(BF16_BYTES), Fraction(BF16_BYTES), False,
                            "BF16 2 B (under torch FSDP2 TE keeps no FP8 copy)")
    return WeightFormat(BF16_BYTES + copy, Fraction(BF16_BYTES), False, f"BF16 2 B + cached {fp8}", cached=copy)


def problem_weight_format(problem, options: MegatronOptions) -> WeightFormat:  # noqa: ANN001 - Problem
    """weight_format of a problem's run under `options`, on its GPU."""
    return weight_format(problem.training, options, compute_capability(problem.hardware.gpu.name))
