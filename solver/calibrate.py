"""Fit the step-time coefficients to measured runs, and check them by leave-one-model-out.

A measured run (hardware/calibration.py, the format of reference/measured-configs.yaml)
becomes a problem (catalog model, hardware preset of its GPU type, the run's batch and precision)
and a mapping; its coefficient-free workload is built once. The fit then chooses, per GPU type,
the few coefficients in FIT_NAMES that minimise the squared error of log(tokens/s/GPU), with a
weak pull of each towards its default (so a coefficient the runs cannot see stays where the
datasheet or paper puts it). Runs the step model cannot represent are excluded with a reason.

Assumptions for the published tables (printed by `parasol calibrate` and bench/step_time_cv.py):
ETP is 1 for MoE models when the table leaves it empty (the Megatron-Bridge MoE recipes set it);
no recompute (the tables list none); sequence parallelism on with TP > 1; the distributed
optimizer with BF16 gradient reduction; the default split of blocks over PP·VPP stages; LoRA runs
train no base weights; FSDP where the table says fsdp > 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import spearmanr

from parasol.constraints.physics.dtypes import BF16_BYTES
from parasol.constraints.physics.pricing import batch, price
from parasol.constraints.physics.workload import StepSettings, Workload, build_workload
from parasol.errors import InputError, ParasolError
from parasol.files import output_folder, writing
from parasol.hardware.calibration import (
    GPU_PRESETS,
    GPU_TOPOLOGY_OVERRIDES,
    GPU_TYPE_FILES,
    MODEL_IDS,
    SPEC_BY_NAME,
    UNFUSED_ATTENTION,
    UNMODELLED_MODELS,
    Coefficient,
    CoefficientFile,
    MeasuredRun,
    StepCoefficients,
    dump_coefficient_file,
    precision_of,
    recipe_of,
)
from parasol.hardware.presets import hardware_from_spec
from parasol.problems.derived import derive
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.problems.model.architecture import ModelArchitecture, architecture_from_dict
from parasol.problems.model.catalog import catalog_names, load_model
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import Framework, HardwareSection, Precision, ProblemFile, Training

FIT_NAMES: tuple[str, ...] = (
    "gemm_efficiency",
    "attention_efficiency",
    "layer_overhead_us",
    "moe_layer_overhead_us",
    "grouped_gemm_half_tokens",
    "scan_efficiency",
)
"""The coefficients fitted per GPU type; the rest keep their defaults (sources in hardware/calibration.py).
gemm_efficiency is the BF16 GEMM efficiency; FP8 GEMMs speed up from it by the fixed Amdahl share
fp8_tensor_fraction (why it is not fitted: its source in hardware/calibration.py)."""

SCAN_NAMES: tuple[str, ...] = ("scan_efficiency",)
"""Coefficients only runs with Mamba-2 / gated DeltaNet layers exercise: fitted on those runs after the rest."""

PRIOR_WEIGHT = 0.05
"""Weight of the pull of log(coefficient) towards log(default), against residuals of log(tokens/s/GPU)."""
FLOOR = 1e-3
"""Lower bound used for coefficients whose natural lower bound is 0 (fitted in log space)."""

ASSUMPTIONS = (
    "ETP = 1 for MoE runs whose table leaves it empty (Megatron-Bridge MoE recipes); ETP = TP for dense runs.",
    "No activation recompute (the tables list none); sequence parallelism on when TP > 1.",
    "Distributed optimizer with BF16 gradient reduction; FSDP runs gather parameters every microbatch.",
    "Default split of blocks over PP·VPP virtual stages (the tables do not give layouts).",
    "LoRA runs train no base weights (no weight gradients, no gradient reduction, no optimizer step).",
    "FP8, MXFP8, FP8-CS and blockwise FP8 run FP8 GEMMs; NVFP4 runs FP4 GEMMs at the FP4 dense peak.",
    "Routing is balanced (the tables force token balancing); token-dropping runs use the same architecture.",
    "gpt-oss attention (learnable sinks) runs unfused except in containers 26.06 and 26.08 (UNFUSED_ATTENTION).",
    "GB200/GB300 jobs use 64-GPU NVLink segments (16 of 18 trays per rack; GPU_TOPOLOGY_OVERRIDES).",
    "MoE runs use Megatron's flex dispatcher (DeepEP/Hybrid-EP, deduplicated per NVLink domain).",
    "Nemotron 3 Super and Ultra train without MTP layers (their Megatron-LM launch files list none; the tables "
    "do not say).",
)


@dataclass(frozen=True)
class PreparedRun:
    """A measured run resolved to a problem, a mapping and its coefficient-free workload."""

    run: MeasuredRun
    model_id: str
    gpu_file: str
    problem: Problem
    mapping: Mapping
    settings: StepSettings
    workload: Workload

    @property
    def measured(self) -> float:
        """Measured tokens/s/GPU."""
        value = self.run.measured.tokens_per_s_per_gpu
        assert value is not None
        return value


@dataclass(frozen=True)
class Exclusion:
    """A run left out of the fit, and why."""

    run_id: str
    model: str
    gpu_type: str
    reason: str


def _architecture(name: str) -> tuple[str, ModelArchitecture] | str:
    """Catalog architecture of a measured model name, or the reason it cannot be modelled."""
    if name in UNMODELLED_MODELS:
        return UNMODELLED_MODELS[name]
    if name not in MODEL_IDS and name not in catalog_names():
        return (f"model {name!r} is neither a catalog name (`parasol models`) nor a name of the measured tables; "
                "write the catalog name in the runs file")
    model_id, overrides = MODEL_IDS.get(name, (name, {}))
    model = load_model(model_id)
    if overrides:
        model = architecture_from_dict({**model.model_dump(mode="json"), **overrides})
    return model_id, model


def mapping_of(run: MeasuredRun, moe: bool) -> Mapping:
    """The run's parallel mapping (ETP 1 for MoE runs without one; VPP and CP default to 1)."""
    ep = run.ep or 1
    etp = run.etp if run.etp is not None else (1 if moe else None)
    return Mapping(gpus=run.gpus, tp=run.tp, pp=run.pp, cp=run.cp or 1, ep=ep, etp=etp, vpp=run.vpp or 1,
                   mbs=run.mbs, gbs=run.gbs, seq_len=run.seq_len)


def settings_of(run: MeasuredRun) -> StepSettings:
    """Precision, FSDP, LoRA and the attention kernel from the run's fields; gradients reduced and parameters
    gathered in BF16, as the shipped coefficients were fitted (solve gathers FP8 parameters in FP8,
    weight_format.WeightFormat.gather; carrying that here moves the fit, so it waits for a refit). The tables
    record no MoE dispatcher: MoE runs take the flex dispatcher with the Hybrid-EP backend, the one Megatron-LM
    names for GB200 NVL72 and multi-node NVLink (megatron/core/transformer/moe/README.md:307-312), whose reach is
    the EP group's NVLink domain; on 8-GPU HGX nodes DeepEP reaches the same 8 GPUs, so it prices alike there."""
    fused_in = UNFUSED_ATTENTION.get(run.model)
    container = str((run.derived or {}).get("container", ""))
    return StepSettings(precision=precision_of(run.precision), grad_reduce_bytes=BF16_BYTES, fsdp=run.fsdp,
                        frozen_weights=run.task.lower() == "lora",
                        unfused_attention=fused_in is not None and container not in fused_in, dispatcher="flex",
                        flex_backend="hybridep")


def problem_of(run: MeasuredRun, model: ModelArchitecture, model_id: str, precision: str) -> Problem:
    """A problem for the run: the catalog model, its GPU type's preset (with the benchmark topology),
    the run's sequence and batch, and the FP8 recipe its precision label names (hardware/calibration.py recipe_of)."""
    preset = GPU_PRESETS[run.gpu_type]
    topology = GPU_TOPOLOGY_OVERRIDES.get(run.gpu_type)
    spec = ProblemFile(
        name=run.id, model=model_id,
        training=Training(seq_len=run.seq_len, global_batch=run.gbs, micro_batch=run.mbs,
                          precision=Precision.bf16 if precision == "bf16" else Precision.fp8,
                          grad_dtype="bf16", sequence_parallel=True,
                          fsdp="megatron-fsdp" if run.fsdp else "none",
                          frozen_base_weights=run.task.lower() == "lora"),
        hardware=HardwareSection(gpus=run.gpus, preset=preset, topology=topology),
        framework=Framework(options=MegatronOptions(fp8_recipe=recipe_of(run.precision))),
    )
    hardware = hardware_from_spec({"preset": preset, **({"topology": topology} if topology else {})})
    return Problem(source=f"run {run.id}", spec=spec, model=model, cluster=hardware, lines={})


def prepare_run(run: MeasuredRun) -> PreparedRun | Exclusion:
    """Resolve one run, or say why it is excluded."""
    def excluded(reason: str) -> Exclusion:
        return Exclusion(run.id, run.model, run.gpu_type, reason)

    if not run.measured.tokens_per_s_per_gpu:
        return excluded("no measured tokens/s/GPU")
    resolved = _architecture(run.model)
    if isinstance(resolved, str):
        return excluded(resolved)
    model_id, model = resolved
    if run.gpu_type not in GPU_PRESETS:
        return excluded(f"GPU type {run.gpu_type!r} has no preset (add it to GPU_PRESETS)")
    mapping = mapping_of(run, model.moe is not None)
    derived = derive(model, mapping)
    if derived.dp_attn.denominator != 1 or derived.dp_expert.denominator != 1 or \
            derived.num_microbatches.denominator != 1:
        return excluded("the degrees do not divide the GPUs and batch (inconsistent table row)")
    settings = settings_of(run)
    try:
        problem = problem_of(run, model, model_id, settings.precision)
        work = build_workload(problem, mapping, derived, settings)
    except ParasolError as exc:
        return excluded(str(exc))
    return PreparedRun(run, model_id, GPU_TYPE_FILES[run.gpu_type], problem, mapping, settings, work)


def prepare_runs(runs: list[MeasuredRun]) -> tuple[list[PreparedRun], list[Exclusion]]:
    """Resolve every run; the excluded ones come back with their reasons."""
    kept, dropped = [], []
    for run in runs:
        result = prepare_run(run)
        (dropped if isinstance(result, Exclusion) else kept).append(result)
    return kept, dropped


# ---- prediction and fit ----------------------------------------------------------------------


def predict(runs: list[PreparedRun], coefficients: dict[str, StepCoefficients]) -> np.ndarray:
    """Predicted tokens/s/GPU of every run with the coefficients of its GPU file."""
    b = batch([r.workload for r in runs])
    names = list(SPEC_BY_NAME)
    values = {n: np.array([getattr(coefficients[r.gpu_file], n) for r in runs]) for n in names}
    step = price(b, values)["step"]
    return b.run["tokens_per_step"] / step / b.run["gpus"]


def _bounds(name: str) -> tuple[float, float]:
    """Log-space bounds of one fitted coefficient."""
    spec = SPEC_BY_NAME[name]
    return math.log(max(spec.lower, FLOOR)), math.log(spec.upper)


@dataclass(frozen=True)
class FitResult:
    """Fitted coefficients of one GPU type and how well they reproduce its runs."""

    gpu_file: str
    coefficients: StepCoefficients
    names: tuple[str, ...]
    run_ids: tuple[str, ...]
    models: tuple[str, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]

    @property
    def ape(self) -> np.ndarray:
        """Absolute percentage error of tokens/s/GPU per run."""
        m, p = np.array(self.measured), np.array(self.predicted)
        return np.abs(p / m - 1) * 100

    @property
    def mape(self) -> float:
        """Median absolute percentage error (%)."""
        return float(np.median(self.ape)) if len(self.measured) else math.nan


def _fit_once(runs: list[PreparedRun], gpu_file: str, names: tuple[str, ...],
              start: StepCoefficients | None = None, prior_weight: float = PRIOR_WEIGHT) -> FitResult:
    """Least-squares fit of `names` on log(tokens/s/GPU) of `runs` (all of one GPU file), each
    coefficient pulled towards its default with `prior_weight` (in log units)."""
    start = start or StepCoefficients()
    b = batch([r.workload for r in runs])
    measured = np.array([r.measured for r in runs])
    base = {n: float(v) for n, v in start.values().items()}
    defaults = np.array([math.log(max(SPEC_BY_NAME[n].default, FLOOR)) for n in names])
    lo, hi = np.array([_bounds(n)[0] for n in names]), np.array([_bounds(n)[1] for n in names])
    x0 = np.clip(np.array([math.log(max(base[n], FLOOR)) for n in names]), lo + 1e-9, hi - 1e-9)

    def coefs(x: np.ndarray) -> dict[str, float]:
        return {**base, **{n: float(math.exp(v)) for n, v in zip(names, x, strict=True)}}

    def residuals(x: np.ndarray) -> np.ndarray:
        step = price(b, coefs(x))["step"]
        pred = b.run["tokens_per_step"] / step / b.run["gpus"]
        return np.concatenate([np.log(pred / measured), prior_weight * (x - defaults)])

    sol = least_squares(residuals, x0, bounds=(lo, hi), x_scale=1.0, method="trf")
    values = coefs(sol.x)
    fitted = start.with_values(source=f"fitted on {len(runs)} runs ({gpu_file})",
                               **{n: values[n] for n in names})
    step = price(b, values)["step"]
    pred = b.run["tokens_per_step"] / step / b.run["gpus"]
    return FitResult(gpu_file, fitted, names, tuple(r.run.id for r in runs), tuple(sorted({r.model_id for r in runs})),
                     tuple(measured.tolist()), tuple(pred.tolist()))


def uses_scan(run: PreparedRun) -> bool:
    """Whether a run's model has Mamba-2 or gated DeltaNet layers (scan work to price)."""
    return any(stage.scan_flops > 0 for stage in run.workload.stages)


def fit(runs: list[PreparedRun], gpu_file: str, names: tuple[str, ...] = FIT_NAMES,
        start: StepCoefficients | None = None, prior_weight: float = PRIOR_WEIGHT) -> FitResult:
    """Fit `names` to `runs` of one GPU file in two stages: the shared coefficients on the runs without
    scan work (all runs when every one has it), then the SCAN_NAMES on the runs with it, the others
    held. A coefficient only hybrid models exercise is thus fitted on them alone, and they cannot bend
    the coefficients the transformer runs share (fitted jointly, the other models' leave-one-model-out
    error rose from 8.1% to 9.0%)."""
    shared = tuple(n for n in names if n not in SCAN_NAMES)
    scanning = [r for r in runs if uses_scan(r)]
    plain = [r for r in runs if not uses_scan(r)] or runs
    first = _fit_once(plain, gpu_file, shared, start, prior_weight)
    scan_names = tuple(n for n in names if n in SCAN_NAMES)
    coefficients = first.coefficients
    if scanning and scan_names:
        coefficients = _fit_once(scanning, gpu_file, scan_names, coefficients, prior_weight).coefficients
    coefficients = coefficients.with_values(source=f"fitted on {len(runs)} runs ({gpu_file})")
    pred = predict(runs, {gpu_file: coefficients})
    return FitResult(gpu_file, coefficients, names, tuple(r.run.id for r in runs),
                     tuple(sorted({r.model_id for r in runs})), tuple(r.measured for r in runs), tuple(pred.tolist()))


def by_gpu_file(runs: list[PreparedRun]) -> dict[str, list[PreparedRun]]:
    """Runs grouped by coefficient file (GPU type), in a stable order."""
    groups: dict[str, list[PreparedRun]] = defaultdict(list)
    for r in runs:
        groups[r.gpu_file].append(r)
    return dict(sorted(groups.items()))


def fit_all(runs: list[PreparedRun], names: tuple[str, ...] = FIT_NAMES) -> dict[str, FitResult]:
    """One fit per GPU type."""
    return {g: fit(rs, g, names) for g, rs in by_gpu_file(runs).items()}


def _described(runs: list[PreparedRun]) -> str:
    """'N runs of M models: …' for a calibration file."""
    models = sorted({r.model_id for r in runs})
    return f"{len(runs)} runs of {len(models)} models: {', '.join(models)}"


def coefficient_file(result: FitResult, runs: list[PreparedRun], gpu_type: str) -> CoefficientFile:
    """The calibration file of one fit: every coefficient with its unit, default and source."""
    fitted_on = _described(runs)
    values = result.coefficients.values()
    scanning = [r for r in runs if uses_scan(r)]
    plain = [r for r in runs if not uses_scan(r)] or runs
    stage_runs = {n: _described(scanning if n in SCAN_NAMES else plain) for n in result.names}
    coefficients = tuple(
        Coefficient(name=spec.name, unit=spec.unit, value=round(values[spec.name], 6), default=spec.default,
                    source="fitted" if spec.name in result.names else spec.source,
                    fitted_on=stage_runs.get(spec.name, ""))
        for spec in SPEC_BY_NAME.values())
    ape = result.ape
    return CoefficientFile(
        gpu_type=gpu_type,
        description=f"Step-time coefficients for {gpu_type}, least squares on log(tokens/s/GPU).",
        fitted_on=fitted_on,
        fit_error={"median_ape_pct": round(float(np.median(ape)), 3), "mean_ape_pct": round(float(ape.mean()), 3),
                   "max_ape_pct": round(float(ape.max()), 3), "runs": float(len(ape))},
        coefficients=coefficients,
    )


# ---- leave-one-model-out cross-validation ----------------------------------------------------


@dataclass(frozen=True)
class HeldOut:
    """Predictions for one (model, GPU type) group by coefficients fitted without that model."""

    model_id: str
    gpu_file: str
    run_ids: tuple[str, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]

    @property
    def ape(self) -> np.ndarray:
        return np.abs(np.array(self.predicted) / np.array(self.measured) - 1) * 100

    @property
    def spearman(self) -> float | None:
        """Rank correlation of predicted and measured tokens/s/GPU inside the group (>= 3 distinct runs)."""
        if len(self.measured) < 3 or len(set(self.measured)) < 2 or len(set(self.predicted)) < 2:
            return None
        return float(spearmanr(self.measured, self.predicted).statistic)


def leave_one_model_out(runs: list[PreparedRun], names: tuple[str, ...] = FIT_NAMES) -> list[HeldOut]:
    """For every GPU type and model: fit on that GPU type's other models, predict the held-out model."""
    out = []
    for gpu_file, group in by_gpu_file(runs).items():
        models = sorted({r.model_id for r in group})
        for model_id in models:
            train = [r for r in group if r.model_id != model_id]
            test = [r for r in group if r.model_id == model_id]
            coefs = fit(train, gpu_file, names).coefficients if train else StepCoefficients()
            pred = predict(test, {gpu_file: coefs})
            out.append(HeldOut(model_id, gpu_file, tuple(r.run.id for r in test),
                               tuple(r.measured for r in test), tuple(pred.tolist())))
    return out


# ---- families and ranking groups --------------------------------------------------------------


def family(run: PreparedRun) -> str:
    """'hybrid' (Mamba-2 / gated DeltaNet layers), else 'moe' (routed experts) or 'dense': the families the
    fidelity figures are reported by (a hybrid with experts counts as hybrid)."""
    if uses_scan(run):
        return "hybrid"
    return "moe" if run.problem.model.moe is not None else "dense"


def workload_key(run: PreparedRun) -> tuple:
    """What makes two runs the same workload, so that only their mapping differs: model, GPU type and
    count, sequence, GEMM precision (FP8 recipes alike, as the step model prices them), task and software
    release (container)."""
    r = run.run
    return (run.model_id, r.gpu_type, r.gpus, r.seq_len, run.settings.precision, r.task.lower(),
            str((r.derived or {}).get("container", "")))


def mapping_key(run: PreparedRun) -> tuple:
    """The run's parallel mapping (degrees, micro-batch, FSDP)."""
    m = run.mapping
    return (m.tp, m.pp, m.cp, m.ep, m.expert_tp, m.vpp, m.mbs, run.settings.fsdp)


@dataclass(frozen=True)
class RankingGroup:
    """Runs of one workload under several mappings, with measured and (held-out) predicted tokens/s/GPU."""

    key: tuple
    run_ids: tuple[str, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]

    @property
    def spearman(self) -> float:
        """Rank correlation of predicted and measured throughput inside the group (±1 for two runs)."""
        if len(set(self.predicted)) < 2 or len(set(self.measured)) < 2:
            return 0.0
        return float(spearmanr(self.measured, self.predicted).statistic)

    @property
    def best_found(self) -> bool:
        """Whether the mapping measured fastest is also predicted fastest."""
        return int(np.argmax(self.measured)) == int(np.argmax(self.predicted))


def ranking_groups(runs: list[PreparedRun], predicted: dict[str, float]) -> list[RankingGroup]:
    """Groups of runs of one workload (workload_key) measured under at least two mappings, with the
    prediction of each run (by run id)."""
    groups: dict[tuple, list[PreparedRun]] = defaultdict(list)
    for r in runs:
        groups[workload_key(r)].append(r)
    out = []
    for key, group in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len({mapping_key(r) for r in group}) < 2:
            continue
        out.append(RankingGroup(key, tuple(r.run.id for r in group), tuple(r.measured for r in group),
                                tuple(predicted[r.run.id] for r in group)))
    return out


def held_out_predictions(held: list[HeldOut]) -> dict[str, float]:
    """Run id → held-out predicted tokens/s/GPU."""
    return {i: p for h in held for i, p in zip(h.run_ids, h.predicted, strict=True)}


# ---- the `parasol calibrate` command ---------------------------------------------------------


@dataclass(frozen=True)
class CalibrationReport:
    """Per GPU type: the fit, the calibration file it makes, and the runs left out."""

    fits: dict[str, FitResult]
    files: dict[str, CoefficientFile]
    exclusions: tuple[Exclusion, ...]

    @property
    def overall_mape(self) -> float:
        """Median absolute percentage error of tokens/s/GPU over every fitted run."""
        ape = np.concatenate([f.ape for f in self.fits.values()]) if self.fits else np.array([math.nan])
        return float(np.median(ape))


def _gpu_labels(runs: list[PreparedRun]) -> str:
    """The gpu_type labels of a group of runs, as one string."""
    return ", ".join(sorted({r.run.gpu_type for r in runs}))


def select_gpu_type(runs: list[PreparedRun], gpu_type: str | None) -> list[PreparedRun]:
    """Runs of one GPU type (a run's gpu_type or a coefficient file stem), or all runs."""
    if gpu_type is None:
        return runs
    wanted = gpu_type.lower()
    chosen = [r for r in runs if r.run.gpu_type.lower() == wanted or r.gpu_file == wanted]
    if not chosen:
        known = sorted({r.run.gpu_type for r in runs} | {r.gpu_file for r in runs})
        raise InputError(f"No usable runs of GPU type {gpu_type!r}.", field="--gpu-type", value=gpu_type,
                         expected="one of " + ", ".join(known),
                         fix="pick a GPU type present in the runs file (its gpu_type or file stem).")
    return chosen


def calibrate_runs(runs: list[MeasuredRun], gpu_type: str | None = None,
                   names: tuple[str, ...] = FIT_NAMES) -> CalibrationReport:
    """Prepare the runs, fit each GPU type (or only `gpu_type`) and build its calibration file."""
    kept, dropped = prepare_runs(runs)
    if not kept:
        raise InputError("None of the runs can be modelled.", field="entries",
                         fix="use catalog model names (`parasol models`) and the GPU types of `parasol hardware` "
                             "in the runs file; the exclusion reasons are: "
                             + "; ".join(sorted({d.reason for d in dropped})))
    chosen = select_gpu_type(kept, gpu_type)
    fits, files = {}, {}
    for stem, group in by_gpu_file(chosen).items():
        fits[stem] = fit(group, stem, names)
        files[stem] = coefficient_file(fits[stem], group, _gpu_labels(group))
    return CalibrationReport(fits=fits, files=files, exclusions=tuple(dropped))


def write_calibration(report: CalibrationReport, out: Path) -> list[Path]:
    """Write each GPU type's file: `out` is a directory (one <stem>.yaml each) or, for one GPU type,
    a .yaml file path."""
    if out.suffix in (".yaml", ".yml"):
        if len(report.files) != 1:
            raise InputError("--out names one file but the runs cover several GPU types.", field="--out",
                             value=str(out), fix="give a directory, or pick one type with --gpu-type.")
        targets = {next(iter(report.files)): out}
    else:
        targets = {stem: out / f"{stem}.yaml" for stem in report.files}
    written = []
    for stem, path in targets.items():
        output_folder(path.parent, "--out")
        with writing(path, "--out") as target:
            target.write_text(dump_coefficient_file(report.files[stem]), encoding="utf-8")
        written.append(path)
    return written
