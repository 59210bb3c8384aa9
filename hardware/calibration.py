"""Step-time coefficients per GPU type, and the measured-run format they are fitted on.

The step-time model (constraints/physics/step_time.py) is physics with a few free numbers: how close GEMMs,
attention and memory-bound kernels come to the datasheet peaks, how much of each kind of
communication hides behind compute, and a fixed cost per block. Every number has a name, a unit,
a default with its source, and, once `parasol calibrate` has fitted it, the runs it was fitted on.

Fitted values live in `hardware/coefficients/<gpu>.yaml` (package `parasol.hardware.coefficients`),
one file per GPU type; `coefficients_for_gpu` finds the file for a preset's GPU by name (H800 and
H200 share the H100's GH100 silicon and use its file; links are priced by the topology, not here).
Without a file, every coefficient takes its default.

Measured runs use the format of reference/measured-configs.yaml: one entry per run with
model, GPUs, gpu_type, seq_len, gbs, mbs, tp, pp, cp, ep, etp, vpp, precision and
measured.tokens_per_s_per_gpu, so a team can fit its own cluster. This module only reads and
writes; the fit lives in solver/calibrate.py. It imports nothing above the hardware layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parasol.errors import InputError
from parasol.files import SAFE_LOADER, bundled_yaml, read_input_text

COEFFICIENT_PACKAGE = "parasol.hardware.coefficients"


@dataclass(frozen=True)
class CoefficientSpec:
    """What one coefficient means: name, unit, default and where the default comes from, fit bounds."""

    name: str
    unit: str
    default: float
    source: str
    lower: float
    upper: float
    meaning: str


SPECS: tuple[CoefficientSpec, ...] = (
    CoefficientSpec(
        "gemm_efficiency", "fraction of BF16 dense peak", 0.70,
        "assumption: large BF16 GEMMs sustain 60-80% of the dense tensor peak (typical cuBLAS results on "
        "H100 and B200); fitted per GPU type", 0.45, 0.90,
        "fraction of the BF16 dense tensor peak a large dense GEMM sustains"),
    CoefficientSpec(
        "fp8_tensor_fraction", "fraction of BF16 GEMM time", 0.70,
        "assumption: FP8 tensor cores double the BF16 peak, but a training GEMM also quantizes its inputs (amax "
        "and scale, cast and transpose; block scales for MXFP8) and keeps BF16 epilogues, so its time falls "
        "about 1.5x, an Amdahl share of 0.7. Not fitted: the BF16 runs of most GPU types in "
        "measured-configs.yaml are gpt-oss runs whose attention kernel is itself an assumption "
        "(UNFUSED_ATTENTION); fitted on them the share sat at its lower bound (0.5) on four of five GPU types, "
        "and the leave-one-model-out error was higher (7.9% against 7.8%, BF16 runs 19.9% against 17.5%)",
        0.5, 1.0,
        "share of a BF16 GEMM's time that halves at the FP8 peak (FP8, MXFP8 and blockwise recipes)"),
    CoefficientSpec(
        "fp4_tensor_fraction", "fraction of FP8 GEMM time", 0.70,
        "paper: NVFP4 pretraining adds random Hadamard transforms, 2-D scaling and keeps selected layers in "
        "higher precision (NVIDIA, arXiv 2509.25149), so FP4 gains less than its 2x peak over FP8; 0.7 "
        "matches the Llama NVFP4/FP8 pairs of measured-configs.yaml (1.35-1.5x)", 0.3, 1.0,
        "share of an FP8 GEMM's time that halves again at the FP4 peak (NVFP4 recipes)"),
    CoefficientSpec(
        "grouped_gemm_half_tokens", "tokens per expert", 256.0,
        "assumption: grouped GEMM loses half its efficiency when an expert's GEMM has a few hundred rows "
        "(one 128-row tile per SM wave; seed 000 §CP: fewer tokens per expert, lower GEMM efficiency)", 16.0, 4096.0,
        "t_half of eff(t) = e_gemm · t/(t + t_half), t = routed assignments per expert per microbatch"),
    CoefficientSpec(
        "attention_efficiency", "fraction of BF16 dense peak", 0.45,
        "paper: FlashAttention-3 (arXiv 2407.08608) reaches up to 75% of the H100 BF16 peak forward, less "
        "backward and at short sequences; flash attention runs in BF16 in FP8 recipes", 0.25, 0.85,
        "fraction of the BF16 peak flash attention sustains, forward and backward"),
    CoefficientSpec(
        "scan_efficiency", "fraction of BF16 dense peak", 0.05,
        "assumption: the Mamba-2 SSD runs as five kernels (chunk cumsum, BMM, chunk state, state passing, chunk "
        "scan) bound by memory bandwidth and latency, not tensor cores (PyTorch blog 'Accelerating Mamba2 with "
        "kernel fusion', 2025), and Megatron's 7·d_inner·N counts less than they do (training.py:887-888), so "
        "the counted FLOPs run an order of magnitude below flash attention's share", 0.005, 0.85,
        "fraction of the BF16 peak the Mamba-2 scan / gated delta rule sustains on its counted FLOPs when its "
        "sequence × head recurrences fill every SM (fewer scale it down: workload.scan_occupancy)"),
    CoefficientSpec(
        "hbm_efficiency", "fraction of HBM bandwidth", 0.90,
        "assumption: fused elementwise, permute and optimizer kernels stream at 80-90% of HBM bandwidth "
        "(STREAM-like copies)", 0.4, 0.95,
        "fraction of HBM bandwidth norms, activations, casts, permutes and the optimizer reach"),
    CoefficientSpec(
        "layer_overhead_us", "microseconds per block per microbatch pass", 30.0,
        "assumption: 30-60 kernels per block at a few microseconds of launch and synchronisation each", 0.0, 400.0,
        "fixed time per block per forward (twice per backward): launches, syncs, small kernels"),
    CoefficientSpec(
        "moe_layer_overhead_us", "microseconds per MoE block per microbatch pass", 100.0,
        "assumption: the token dispatcher waits on the host for per-expert token counts (a device-to-host "
        "synchronisation per MoE layer) and launches per-expert kernels, which stalls the launch pipeline",
        0.0, 3000.0, "extra fixed time per MoE block per forward (twice per backward) on top of layer_overhead_us"),
    CoefficientSpec(
        "nvlink_efficiency", "fraction of NVLink bandwidth", 0.75,
        "assumption: NCCL collectives reach about 75% of the nominal NVLink per-direction rate (nccl-tests "
        "bus bandwidth)",
        0.05, 1.0, "achievable fraction of the nominal NVLink rate"),
    CoefficientSpec(
        "network_efficiency", "fraction of NIC bandwidth", 0.80,
        "assumption: NCCL over InfiniBand/RoCE reaches about 80% of the NIC line rate (nccl-tests bus "
        "bandwidth)", 0.05, 1.0,
        "achievable fraction of the nominal NIC rate"),
    CoefficientSpec(
        "overlap_cp", "fraction hidden", 0.50,
        "paper: ring attention overlaps each KV exchange with the previous chunk's attention (Liu et al., "
        "arXiv 2310.01889; Megatron CP p2p); about half hides once the causal chunks shrink", 0.0, 1.0,
        "share of CP KV exchange hidden behind core attention"),
    CoefficientSpec(
        "overlap_ep", "fraction hidden", 0.30,
        "assumption: without --overlap-moe-expert-parallel-comm, dispatch/combine still overlap shared "
        "experts and the dispatcher's own pipelining; with it, EP hides behind the other microbatch's "
        "compute mechanistically (constraints/physics/pricing.py)", 0.0, 1.0,
        "share of EP dispatch/combine time hidden behind compute"),
)

SPEC_BY_NAME = {s.name: s for s in SPECS}


@dataclass(frozen=True)
class StepCoefficients:
    """Values of every step-time coefficient (units in SPECS); defaults are SPECS' defaults."""

    gemm_efficiency: float = SPEC_BY_NAME["gemm_efficiency"].default
    fp8_tensor_fraction: float = SPEC_BY_NAME["fp8_tensor_fraction"].default
    fp4_tensor_fraction: float = SPEC_BY_NAME["fp4_tensor_fraction"].default
    grouped_gemm_half_tokens: float = SPEC_BY_NAME["grouped_gemm_half_tokens"].default
    attention_efficiency: float = SPEC_BY_NAME["attention_efficiency"].default
    scan_efficiency: float = SPEC_BY_NAME["scan_efficiency"].default
    hbm_efficiency: float = SPEC_BY_NAME["hbm_efficiency"].default
    layer_overhead_us: float = SPEC_BY_NAME["layer_overhead_us"].default
    moe_layer_overhead_us: float = SPEC_BY_NAME["moe_layer_overhead_us"].default
    nvlink_efficiency: float = SPEC_BY_NAME["nvlink_efficiency"].default
    network_efficiency: float = SPEC_BY_NAME["network_efficiency"].default
    overlap_cp: float = SPEC_BY_NAME["overlap_cp"].default
    overlap_ep: float = SPEC_BY_NAME["overlap_ep"].default
    source: str = "defaults"
    """Where the values come from: 'defaults' or the coefficient file and its fit."""

    def values(self) -> dict[str, float]:
        """Coefficient name → value (without `source`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "source"}

    def with_values(self, source: str | None = None, **values: float) -> StepCoefficients:
        """A copy with some values replaced (and optionally a new source)."""
        unknown = sorted(set(values) - set(SPEC_BY_NAME))
        if unknown:
            raise InputError(f"Unknown step-time coefficient(s) {unknown}.", field="coefficients",
                             expected="one of " + ", ".join(SPEC_BY_NAME))
        return replace(self, **values, **({"source": source} if source is not None else {}))


class Coefficient(BaseModel):
    """One coefficient as written to a calibration file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    unit: str
    value: float
    default: float
    source: str = Field(description="'fitted' (with the runs in fitted_on), 'datasheet', 'paper' or 'assumption'")
    fitted_on: str = ""


class CoefficientFile(BaseModel):
    """A calibration file: the GPU type, the coefficients and how well they fit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_type: str
    description: str = ""
    fitted_on: str = ""
    fit_error: dict[str, float] = Field(default_factory=dict, description="MAPE of tokens/s/GPU and run counts")
    coefficients: tuple[Coefficient, ...]

    def step_coefficients(self, source: str) -> StepCoefficients:
        """The values as StepCoefficients (missing names keep their defaults)."""
        known = {c.name: c.value for c in self.coefficients if c.name in SPEC_BY_NAME}
        return StepCoefficients().with_values(source=source, **known)


def default_coefficient_file(gpu_type: str) -> CoefficientFile:
    """Every coefficient at its default, with its source: the starting point of a fit."""
    return CoefficientFile(gpu_type=gpu_type, coefficients=tuple(
        Coefficient(name=s.name, unit=s.unit, value=s.default, default=s.default, source=s.source)
        for s in SPECS))


GPU_FILES: dict[str, str] = {
    "H100": "h100",
    "H800": "h100",
    "H200": "h100",
    "B200": "b200",
    "B300": "b300",
    "GB200": "gb200",
    "GB300": "gb300",
}
"""GPU name prefix → coefficient file stem. H800 and H200 are GH100 parts like the H100 (same SMs and
tensor peaks, hardware-specs.yaml); their different NVLink and HBM are priced from the preset."""


def coefficient_file_stem(gpu_name: str) -> str | None:
    """The coefficient file stem for a GPU name (e.g. 'H800-SXM-80GB' → 'h100'), or None."""
    for prefix in sorted(GPU_FILES, key=len, reverse=True):
        if gpu_name.upper().startswith(prefix):
            return GPU_FILES[prefix]
    return None


@cache
def bundled_coefficient_files() -> tuple[str, ...]:
    """Stems of the bundled coefficient files, sorted (listed once per process, as each file is read once:
    every explain asks for its GPU's file)."""
    root = resources.files(COEFFICIENT_PACKAGE)
    return tuple(sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml")))


@cache
def load_coefficient_file(stem: str) -> CoefficientFile:
    """Read one bundled coefficient file by stem."""
    text = resources.files(COEFFICIENT_PACKAGE).joinpath(f"{stem}.yaml").read_text(encoding="utf-8")
    return parse_coefficient_file(bundled_yaml(text), where=f"hardware/coefficients/{stem}.yaml")


def parse_coefficient_file(data: Any, where: str) -> CoefficientFile:
    """Validate a coefficient mapping, naming the file and field on error."""
    try:
        return CoefficientFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"Invalid coefficient file: {err['msg']}.", file=where,
                         field=".".join(str(p) for p in err["loc"]),
                         fix="write the file with `parasol calibrate` or copy a bundled one.") from None


def read_coefficient_file(path: str | Path) -> CoefficientFile:
    """Read a coefficient file from disk (what `parasol calibrate --out` wrote)."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"Cannot read coefficient file {str(p)!r}: {exc}.", file=str(p),
                         fix="give a YAML file written by `parasol calibrate`.") from None
    return parse_coefficient_file(data, where=str(p))


def coefficients_for_gpu(gpu_name: str) -> StepCoefficients:
    """The fitted coefficients for a GPU (bundled file by name), else the defaults."""
    stem = coefficient_file_stem(gpu_name)
    if stem is None or stem not in bundled_coefficient_files():
        return StepCoefficients(source=f"defaults (no calibration file for {gpu_name})")
    note = "" if gpu_name.upper().startswith(stem.upper()) else f", used for {gpu_name}"
    return load_coefficient_file(stem).step_coefficients(source=f"hardware/coefficients/{stem}.yaml{note}")


def dump_coefficient_file(data: CoefficientFile) -> str:
    """YAML text of a coefficient file, keys in schema order."""
    header = ("# Step-time coefficients for one GPU type, written by `parasol calibrate`.\n"
              "# Each coefficient: name, unit, value, default, source ('fitted' values list the runs in fitted_on).\n")
    body = yaml.safe_dump(data.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=110)
    return header + body


# ---- measured runs ---------------------------------------------------------------------------


class Measured(BaseModel):
    """What a run measured: throughput per GPU (required for fitting) and the source's own TFLOP/s and MFU."""

    model_config = ConfigDict(extra="allow", frozen=True)

    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    mfu: float | None = None


class MeasuredRun(BaseModel):
    """One measured training run (an entry of measured-configs.yaml); unknown keys are kept, not checked."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    model: str
    gpus: int = Field(gt=0)
    gpu_type: str
    seq_len: int = Field(gt=0)
    gbs: int = Field(gt=0)
    mbs: int = Field(gt=0)
    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    cp: int | None = Field(default=None, gt=0)
    ep: int | None = Field(default=None, gt=0)
    etp: int | None = Field(default=None, gt=0)
    vpp: int | None = Field(default=None, gt=0)
    recompute: str | None = None
    precision: str = "BF16"
    task: str = "pretrain"
    measured: Measured = Measured()
    derived: dict | None = None
    notes: str | None = None

    @property
    def fsdp(self) -> bool:
        """Megatron-FSDP sharding (derived.fsdp > 0 in the Megatron-Bridge tables)."""
        return bool((self.derived or {}).get("fsdp"))


def read_runs(path: str | Path) -> list[MeasuredRun]:
    """Read a RUNS.yaml file (`entries:` list, or a bare list) into MeasuredRun records."""
    p = Path(path)
    text = read_input_text(p, "runs file", "RUNS")
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise InputError(f"Runs file {str(p)!r} is not valid YAML: {exc}.", file=str(p),
                         fix="fix the YAML syntax.") from None
    entries = data.get("entries") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise InputError("A runs file needs a non-empty `entries:` list.", file=str(p), field="entries",
                         fix="use the format of reference/measured-configs.yaml.")
    runs = []
    for i, entry in enumerate(entries):
        try:
            runs.append(MeasuredRun.model_validate(entry))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(f"Run {i} is invalid: {err['msg']}.", file=str(p),
                             field=f"entries.{i}." + ".".join(str(x) for x in err["loc"]),
                             value=err.get("input") if not isinstance(err.get("input"), dict) else None,
                             fix="compare with an entry of reference/measured-configs.yaml.") from None
    return runs


GPU_PRESETS: dict[str, str] = {
    "H100-SXM-80GB": "h100-hgx",
    "H100": "h100-hgx",
    "B200": "b200-hgx",
    "B300": "b300-hgx",
    "GB200-NVL72": "gb200-nvl72",
    "GB300-NVL72": "gb300-nvl72",
}
"""gpu_type of a measured run → hardware preset (DGX systems as the tables say)."""

GPU_TOPOLOGY_OVERRIDES: dict[str, dict[str, int]] = {
    "GB200-NVL72": {"gpus_per_nvlink_domain": 64},
    "GB300-NVL72": {"gpus_per_nvlink_domain": 64},
}
"""Topology of the benchmark jobs where it differs from the preset. NVL72 jobs are allocated in
segments of 16 of a rack's 18 compute trays (64 GPUs), and the Megatron-Bridge MoE recipes set
NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN to the EP size on GB200/GB300 (EP groups up to 64 stay
inside one NVLink domain); with 72-GPU domains a contiguous EP64 group would straddle two racks."""

GPU_TYPE_FILES: dict[str, str] = {
    "H100-SXM-80GB": "h100", "H100": "h100", "B200": "b200", "B300": "b300",
    "GB200-NVL72": "gb200", "GB300-NVL72": "gb300",
}
"""gpu_type of a measured run → coefficient file stem (one fit per GPU type)."""

MODEL_IDS: dict[str, tuple[str, dict]] = {
    "GPT3-5B": ("gpt-3-5b", {}),
    "GPT3-20B": ("gpt-3-20b", {}),
    "GPT3-175B": ("gpt-3-175b", {}),
    "LLAMA2-7B": ("llama-2-7b", {}),
    "LLAMA2-13B": ("llama-2-13b", {}),
    "LLAMA2-70B": ("llama-2-70b", {}),
    "LLAMA3-8B": ("llama-3-8b", {}),
    "LLAMA3_8B": ("llama-3-8b", {}),
    "LLAMA3-70B": ("llama-3-70b", {}),
    "LLAMA3_70B": ("llama-3-70b", {}),
    "LLAMA3-405B": ("llama-3.1-405b", {}),
    "LLAMA3.1-405B": ("llama-3.1-405b", {}),
    "LLAMA3.1_405B": ("llama-3.1-405b", {}),
    "Nemotron-8B": ("nemotron-3-8b", {}),
    "Nemotron-15B": ("nemotron-4-15b", {}),
    "Nemotron-22B": ("nemotron-3-22b", {}),
    "Nemotron-340B": ("nemotron-4-340b", {}),
    "Mixtral-8x7B": ("mixtral-8x7b", {}),
    "Mixtral-8x22B": ("mixtral-8x22b", {}),
    "DeepSeekV3": ("deepseek-v3", {}),
    "DeepSeekV3 (w/ MTP)": ("deepseek-v3", {}),
    "DeepSeekV3 (w/o MTP)": ("deepseek-v3", {"mtp_layers": 0}),
    "DeepSeekV3 (tokendrop)": ("deepseek-v3", {}),
    "DeepSeekV3 (dropless)": ("deepseek-v3", {}),
    "DeepSeekV4 Flash": ("deepseek-v4-flash", {}),
    "Kimi_K2": ("kimi-k2", {}),
    "GPT OSS 120B": ("gpt-oss-120b", {}),
    "Qwen3_30B_a3B": ("qwen3-30b-a3b", {}),
    "Qwen3_30B_a3B (tokendrop)": ("qwen3-30b-a3b", {}),
    "Qwen3_235B_a22B": ("qwen3-235b-a22b", {}),
    "Qwen3_235B_a22B (tokendrop)": ("qwen3-235b-a22b", {}),
    "Nemotron_3_Nano": ("nemotron-3-nano-30b-a3b", {}),
    "Nemotron_3_Super": ("nemotron-3-super-120b-a12b", {}),
    "Nemotron_3_Ultra": ("nemotron-3-ultra-550b-a55b", {}),
}
"""Model name in the measured tables → (catalog id, architecture overrides). Token-dropping runs use
the same architecture: with force-balanced routing (the tables' footnote) every expert gets its
capacity either way."""

UNFUSED_ATTENTION: dict[str, tuple[str, ...]] = {
    "GPT OSS 120B": ("26.06", "26.08"),
}
"""Models whose attention variant has no fused kernel in some containers → containers where it has one.
gpt-oss uses learnable softmax sinks: Transformer Engine runs them in UnfusedDotProductAttention unless
cuDNN supports the layout (TransformerEngine issues #2318 and #2483, PR #2568: packed THD sink attention
needs cuDNN 9.18), and the 26.06.01 table footnotes a gpt-oss regression (cudnn-frontend #256). Runs of
these models in other containers are priced with materialised attention scores."""

UNMODELLED_MODELS: dict[str, str] = {
    "Nemotron_3_5_Lightning": "Nemotron 3.5 Lightning: no public architecture (layer pattern, widths) to build it from",
    "LLAMA4-Scout-LLM": "Llama 4 Scout: chunked/interleaved attention and MoE interleave are not in the catalog",
}
"""Measured models the step model cannot represent, with the reason printed when they are excluded."""


def precision_of(text: str) -> str:
    """The GEMM precision of a run's precision label: 'fp4' (NVFP4), 'fp8' (FP8, MXFP8, FP8-CS, blockwise) or 'bf16'.

    The 25.09 tables mark MXFP8 values only by parentheses; every FP8 flavour runs FP8 tensor cores."""
    label = text.upper()
    if "NVFP4" in label or re.search(r"\bFP4\b", label):
        return "fp4"
    if "FP8" in label or "PARENTHESIZED" in label:
        return "fp8"
    return "bf16"


def recipe_of(text: str) -> str:
    """The FP8 recipe a run's precision label names, as --fp8-recipe spells it (what the memory ledger's weights
    read, constraints/physics/weight_format.py): MXFP8 (also FP8-MX and the 25.09 tables' parenthesized values, which
    say MXFP8), per-tensor current scaling (FP8-CS) as tensorwise, FP8-blockwise, and plain FP8 as Megatron's
    default, delayed. NVFP4 runs (precision_of's fp4) take MXFP8's weights: the ledger has no FP4 format, and
    MXFP8's 2 B and scales per GEMM weight are more than NVFP4's two 4-bit copies with their scales (1.125 B)."""
    label = text.upper()
    if "MX" in label or precision_of(text) == "fp4":
        return "mxfp8"
    if "BLOCKWISE" in label:
        return "blockwise"
    if "FP8-CS" in label or "CURRENT SCALING" in label:
        return "tensorwise"
    return "delayed"
