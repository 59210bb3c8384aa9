"""Step time of one mapping: per-stage compute, communication on the real links, and the schedule.

The model in four parts (every coefficient in hardware/calibration.py, with unit, default, source):

1. Compute per microbatch per pipeline stage, from the blocks the stage holds (constraints/physics/flops.py):
   dense GEMMs at e_gemm of the BF16 peak, FP8 and FP4 GEMMs faster by Amdahl shares of their
   peaks; routed experts as grouped GEMMs whose efficiency falls with tokens per expert,
   eff(t) = e_gemm·t/(t + t_half); every GEMM pass at least as long as its weight traffic (read,
   and the main-gradient accumulation of the weight gradient); flash attention at e_attn of the
   BF16 peak (or, for attention variants without a fused kernel, the S×S scores through HBM); Mamba-2
   scans and gated delta rules at e_scan of the BF16 peak times the share of SMs their sequence × head
   recurrences fill (workload.scan_occupancy);
   memory-bound kernels (norms, residuals, activations, casts, MoE permutes, router, loss) as bytes
   at e_hbm of HBM bandwidth; a fixed cost per block and per MoE block. Backward = 2× forward for
   GEMMs (1× with frozen weights), 2.5× for flash attention, 2× for memory-bound work; recompute
   repeats forward work.
2. Communication per microbatch (TP all-gather/reduce-scatter or all-reduce, CP KV exchange, EP
   dispatch and combine of k·T·h bytes each way with an optional hot-expert skew, FSDP parameter
   gathers) and per step (dense and expert gradient reduce-scatter and parameter all-gather over
   their own DP groups, pipeline sends at stage boundaries), priced by constraints/physics/comm.py on the
   links the group's real ranks cross. Overlap is explicit: a kind hides at most overlap_k of its
   time, and never more than the compute it can hide behind.
3. The schedule: 1F1B with uneven stages, T = (m−1)·max_s t_s + Σ_s t_s (the slowest stage sets the
   steady state, warm-up and drain pass through every stage once with its real time); interleaved
   VPP with v chunks per rank, T = m·max_s t_s + (Σ_s t_s − max_s t_s)/v. With equal stages these
   are the seed's bubbles (p−1)/(m+p−1) and (p−1)/(v·m+p−1).
4. Outputs: step time and its breakdown (compute, exposed communication by kind, bubble; they sum
   to the step time), tokens/s, tokens/s/GPU, model TFLOP/s/GPU, MFU on model FLOPs (active experts
   only) against the dense peak of the GEMM precision (and against BF16), and HFU with recompute.

Everything that does not depend on the coefficients is computed once into a `Workload`; pricing a
batch of workloads with a set of coefficients is a handful of numpy operations, so the calibration
fits hundreds of runs in milliseconds and `step_time` prices one mapping the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, get_args

import numpy as np

from parasol.arrays import distinct_rows
from parasol.constraints.physics.comm import NO_COMM, CommTerm, GroupLink
from parasol.constraints.physics.exchanges import (
    Links,
    cp_comm,
    cp_parts,
    dispatch_link,
    ep_comm,
    level_links,
    links_for,
    pp_comm,
    tp_comm,
)
from parasol.constraints.physics.memory import block_kind, rank_holdings, schedule_fits_layout
from parasol.constraints.physics.pricing import (
    BREAKDOWN_KINDS,
    DATA_PARALLEL_TERMS,
    Coefs,
    WorkloadBatch,
    batch,
    batch_from_vectors,
    coefficient_values,
    comm_seconds,
    compute_beside_gemms_per_microbatch,
    cp_unhidden_seconds,
    data_parallel_floor,
    data_parallel_lines,
    data_parallel_unhidden_shares,
    data_parallel_whole_seconds,
    fields_vector,
    linear_compute_per_microbatch,
    optimizer_seconds,
    pipeline_sends_floor,
    price,
    rank_floor_per_microbatch,
    run_batch,
    stage_field,
    unhidden_sends_seconds,
    unhidden_shares,
    vector_columns,
)
from parasol.constraints.physics.schedule import (
    even_stretch,
    heaviest_of_lightest,
    heavy_kinds,
    lightest_blocks,
    pipeline_time_scaled,
)
from parasol.constraints.physics.workload import (
    DATA_PARALLEL_EXCHANGES,
    DATA_PARALLEL_FIELDS,
    PASSES_PER_MICROBATCH,
    StageBlocks,
    StageWeights,
    StepSettings,
    Workload,
    blocks_fields,
    build_workload,
    data_parallel_terms,
    dispatch_received,
    network_bytes_per_step,
    routed,
    run_workload,
    settings_for,
    stage_blocks,
    stage_blocks_after,
    tp_overlap_applies,
)
from parasol.hardware.calibration import StepCoefficients, coefficients_for_gpu
from parasol.problems.derived import Derived
from parasol.problems.empty_stages import least_rank_blocks
from parasol.problems.mapping import Mapping, RankOrder, Recompute
from parasol.problems.model.architecture import Block, BlockKind
from parasol.problems.options import MegatronOptions

# ---- memory-bound traffic --------------------------------------------------------------------


# ---- communication volumes -------------------------------------------------------------------


# ---- the workload of one mapping -------------------------------------------------------------


# ---- batched pricing -------------------------------------------------------------------------


# ---- the result ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTime:
    """Predicted step time of one mapping, where the time goes, and the throughput it implies."""

    step_time_s: float
    breakdown: dict[str, float]
    """compute, exposed tp/cp/ep/pp/dp_dense/dp_expert/optimizer, bubble (seconds; they sum to the step)."""
    compute_parts: dict[str, float]
    """The critical stage's compute by kind (gemm, grouped, attention, memory, overhead, recompute) per step."""
    grouped_gemm_loss_s: float
    """Step time lost because expert GEMMs see few tokens: grouped time × (1 − t/(t + t_half))."""
    stage_forward_s: tuple[float, ...]
    stage_backward_s: tuple[float, ...]
    stage_time_s: tuple[float, ...]
    """Per microbatch per stage: forward + backward + exposed TP/CP/EP/FSDP."""
    critical_stage: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    """Model FLOPs (active experts only, no recompute) over the dense peak of the GEMM precision."""
    mfu_bf16: float
    """The same over the BF16 dense peak (comparable across precisions)."""
    hfu: float
    """Hardware FLOPs (with recompute) over the precision's dense peak."""
    peak_tflops: float
    precision: str
    coefficients: str
    network_bytes: float = 0.0
    """Bytes crossing the scale-out network per step, all GPUs together (network_bytes_per_step)."""
    assumptions: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict:
        """JSON-ready values (seconds, rounded)."""
        return {
            "step_time_s": round(self.step_time_s, 6),
            "breakdown_s": {k: round(v, 6) for k, v in self.breakdown.items()},
            "compute_parts_s": {k: round(v, 6) for k, v in self.compute_parts.items()},
            "grouped_gemm_loss_s": round(self.grouped_gemm_loss_s, 6),
            "critical_stage": self.critical_stage,
            "tokens_per_s": round(self.tokens_per_s, 3),
            "tokens_per_s_per_gpu": round(self.tokens_per_s_per_gpu, 3),
            "model_tflops_per_gpu": round(self.model_tflops_per_gpu, 3),
            "mfu": round(self.mfu, 6),
            "mfu_bf16": round(self.mfu_bf16, 6),
            "hfu": round(self.hfu, 6),
            "peak_tflops": self.peak_tflops,
            "precision": self.precision,
            "coefficients": self.coefficients,
            "network_bytes_per_step": round(self.network_bytes),
            "assumptions": list(self.assumptions),
        }


STEP_ASSUMPTIONS = (
    "Routing is balanced (every expert gets k·T/E assignments) unless the problem's contract.routing skew "
    "model (or hot_expert_skew) says otherwise; the busiest EP rank then sets the expert GEMM time and, "
    "on a flexible all-to-all, its receive volume.",
    "Flash attention and the output head run in BF16 whatever the GEMM precision; FP8 and FP4 GEMMs speed up "
    "over BF16 through the Amdahl shares fp8_tensor_fraction and fp4_tensor_fraction of their dense peaks.",
    "Mamba-2 scans and gated delta rules run at scan_efficiency times the share of SMs their sequence x head "
    "recurrences fill.",
    "TP uses sequence parallelism when the problem says so; CP is ring attention (GQA/MLA) or the V4 "
    "compressed-KV all-gather; EP is an all-to-all with NVLink and NIC shares moving at once.",
    "Overlap follows the Megatron switches: with --overlap-grad-reduce the data-parallel reduction hides in "
    "the last microbatch's backward, with --overlap-param-gather the parameter gather in the first forward, "
    "with --tp-comm-overlap TP inside the block's GEMMs, with --overlap-p2p-communication pipeline sends "
    "beside the stage's compute; each hides at most its window and nothing when off. FSDP gathers "
    "parameters every microbatch.",
)


def result_from_prices(w: Workload, p: dict[str, np.ndarray], source: str, i: int = 0) -> StepTime:
    """The StepTime of run `i` of a priced batch."""
    step = float(p["step"][i])
    n = len(w.stages)
    tokens_per_s = w.tokens_per_step / step
    per_gpu = tokens_per_s / w.gpus
    model_flops = per_gpu * w.model_flops_per_token
    return StepTime(
        step_time_s=step,
        breakdown={k: float(p[k][i]) for k in BREAKDOWN_KINDS},
        compute_parts={k: float(p[k][i]) for k in ("gemm", "grouped", "attention", "scan", "memory", "overhead",
                                                                "recompute")},
        grouped_gemm_loss_s=float(p["grouped_loss"][i]),
        stage_forward_s=tuple(float(x) for x in p["forward"][i, :n]),
        stage_backward_s=tuple(float(x) for x in p["backward"][i, :n]),
        stage_time_s=tuple(float(x) for x in p["stage"][i, :n]),
        critical_stage=int(p["critical"][i]),
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=per_gpu,
        model_tflops_per_gpu=model_flops / 1e12,
        mfu=model_flops / w.peak_flops,
        mfu_bf16=model_flops / w.bf16_flops,
        hfu=per_gpu * w.hardware_flops_per_token / w.peak_flops,
        peak_tflops=w.peak_flops / 1e12,
        precision=w.precision,
        coefficients=source,
        network_bytes=network_bytes_per_step(w),
        assumptions=STEP_ASSUMPTIONS,
    )


def step_time(problem, mapping: Mapping, derived: Derived,  # noqa: ANN001 - Problem
              coefficients: StepCoefficients | None = None, settings: StepSettings | None = None) -> StepTime:
    """Predict the step time of a fully specified mapping (layout covering the blocks with PP·VPP stages).

    Coefficients default to the calibration file of the problem's GPU (hardware/coefficients/)."""
    coefs = coefficients or coefficients_for_gpu(problem.hardware.gpu.name)
    work = build_workload(problem, mapping, derived, settings)
    prices = price(batch([work]), coefficient_values(coefs))
    return result_from_prices(work, prices, coefs.source)


def step_time_or_none(problem, mapping: Mapping, derived: Derived,  # noqa: ANN001 - Problem
                      coefficients: StepCoefficients | None = None,
                      options: MegatronOptions | None = None) -> StepTime | None:
    """The step time when the mapping can be priced, else None: the grids must divide the GPUs, the
    microbatches the batch, the layout must cover the blocks with PP·VPP stages and the GPU must have
    a peak for the training precision (rules report each of these failures themselves)."""
    d = derived
    whole = all(x.denominator == 1 for x in (d.dp_attn, d.dp_expert, d.num_microbatches))
    covers = (len(d.layout) == mapping.pp * mapping.vpp and sum(d.layout) == problem.model.num_layers
              and schedule_fits_layout(d.layout, mapping.pp, problem.training.pipeline_schedule))
    settings = settings_for(problem, options)
    if not (whole and covers and d.num_microbatches > 0) or settings.precision not in problem.hardware.gpu.precisions:
        return None
    return step_time(problem, mapping, derived, coefficients, settings)


@dataclass(frozen=True)
class RankWork:
    """A mapping's rank work (pricing.STAGE_VECTOR) as a function of the blocks of each kind a rank holds: per
    rank, the vector with no block, each kind's slope per block, and the onset its first block adds (the
    latency of a data-parallel exchange that runs only once the rank holds parameters of its group).
    Every field of StageWork is a sum over blocks, so this is the rank's work exactly."""

    empty: np.ndarray
    """ranks × fields"""
    slope: np.ndarray
    """ranks × kinds × fields"""
    onset: np.ndarray
    """ranks × kinds × fields"""

    def vectors(self, counts: np.ndarray) -> np.ndarray:
        """Rank work of N cuts: counts N × ranks × kinds → N × ranks × fields."""
        linear = self.empty[None] + np.einsum("nrk,rkf->nrf", counts.astype(float), self.slope)
        jump = np.where(counts[..., None] > 0, self.onset[None], 0.0).max(axis=2)
        return linear + jump


@dataclass(frozen=True)
class _FloorParts:
    """What step_floor_s reads of a mapping less its VPP."""

    ranks: float
    """All ranks' rank floor and unhidden EP/CP seconds of one microbatch: at most the stage times' sum."""
    optimizer: float
    """The optimizer step of all ranks' work."""
    summed: WorkloadBatch
    """The one-stage batch of all ranks' work."""
    exposure: tuple[float, float]
    """pricing.data_parallel_floor of `summed`: an average stage's exposed and whole data-parallel seconds."""
    rank_least: np.ndarray
    """Each rank's stage seconds of one microbatch holding no block, at least: its compute
    (pricing.linear_compute_per_microbatch) and, for the MoE blocks it holds besides (the last rank's MTP blocks),
    what block_least adds for one."""
    block_least: np.ndarray
    """The stage seconds one block of each kind the model holds adds to each rank at least (ranks × those kinds):
    its compute (linear_compute_per_microbatch of the rank work's slopes), for an MoE block its least exposed EP
    exchange (CalibratedStageTimes.exposed_ep_per_block_s) and, under full recompute, its least exposed recomputed
    one (CalibratedStageTimes.recomputed_ep_per_block_s), and its least exposed CP exchange
    (CalibratedStageTimes.exposed_cp_per_block_s)."""
    held: np.ndarray
    """The blocks of each kind the model holds (the kinds of block_least)."""
    data_parallel: tuple[np.ndarray, np.ndarray]
    """Per rank, a_r and per kind b_rk with a_r + Σ_k b_rk·n_k below its whole data-parallel exchange seconds
    holding n_k blocks of each kind, at least one (pricing.data_parallel_lines of its work with no block,
    the least onset and each kind's slope)."""
    empty_exchange: np.ndarray
    """Per rank, its whole data-parallel exchange seconds holding no block (pricing.data_parallel_whole_seconds)."""
    ceiling: tuple[np.ndarray, np.ndarray]
    """Per rank, c_r and per kind u_rk with c_r + Σ_k u_rk·n_k at least its compute seconds of one microbatch
    holding n_k blocks of each kind (compute_ceiling_lines)."""
    unhidden: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    """As data_parallel, the lines below the data-parallel seconds no overlap switch hides whatever the window
    (pricing.data_parallel_unhidden_shares), and per rank those seconds holding no block; None where every switch
    is on."""

    @cached_property
    def compute_ceiling(self) -> float:
        """All ranks' compute seconds of one microbatch at most, whatever the cut: each rank's with no block and each
        block at its kind's dearest slope over the ranks."""
        base, per_block = self.ceiling
        return float(base.sum() + self.held @ per_block.max(axis=0))

    def _exchange_base(self, vpp: int) -> np.ndarray:
        """Per rank, the least whole data-parallel exchange seconds with no block counted (_line_base of
        data_parallel's)."""
        return _line_base(self.data_parallel[0], self.empty_exchange, vpp)

    @cached_property
    def exposure_lightest(self) -> np.ndarray | None:
        """schedule.lightest_blocks of each block's data-parallel exchange less its compute at most, per rank, built
        once for every VPP and `most` heaviest_exposure is asked (None where a block's is negative)."""
        weights = self.data_parallel[1] - self.ceiling[1]
        return lightest_blocks(weights, self.held, self.blocks) if (weights >= 0).all() else None

    @cached_property
    def blocks(self) -> int:
        """The model's blocks (held's sum)."""
        return int(self.held.sum())

    @cached_property
    def exchange_lightest(self) -> np.ndarray | None:
        """schedule.lightest_blocks of data_parallel's lines over every block, built once for every VPP and
        `most` heaviest_exchange is asked (None where a line falls with blocks)."""
        weights = self.data_parallel[1]
        return lightest_blocks(weights, self.held, self.blocks) if (weights >= 0).all() else None

    @cached_property
    def compute_lightest(self) -> np.ndarray | None:
        """schedule.lightest_blocks of block_least over every block, built once for every VPP and `most`
        slowest_compute is asked (None where a block's compute is negative)."""
        if (self.block_least < 0).any():
            return None
        return lightest_blocks(self.block_least, self.held, self.blocks)

    @cached_property
    def compute_lightest_of_kinds(self) -> tuple[tuple[np.ndarray, int], ...]:
        """schedule.lightest_blocks of block_least over the blocks of the heaviest kinds alone (schedule.heavy_kinds)
        with those blocks' number, built once for every VPP and `most` slowest_compute is asked
        (none where a block's compute is negative)."""
        if self.compute_lightest is None:
            return ()
        out = []
        for kinds in heavy_kinds(self.block_least):
            blocks = int(self.held[kinds].sum())
            out.append((lightest_blocks(self.block_least[:, kinds], self.held[kinds], blocks), blocks))
        return tuple(out)

    def whole_exchanges(self, vpp: int) -> float:
        """A bound on all ranks' whole data-parallel exchange seconds together when the ranks hold the model's whole
        blocks, at least empty_stages.least_rank_blocks each: each rank's line (data_parallel) where it holds a
        block, the lesser of it and its exchange with none where it may hold none, and each block at its kind's
        least slope over the ranks. Unlike the summed work's (pricing.data_parallel_floor), every rank's
        exchange pays its own latency."""
        return float(self._exchange_base(vpp).sum() + self.held @ self.data_parallel[1].min(axis=0))

    def heaviest_exposure(self, vpp: int, most: np.ndarray | None = None) -> float:
        """A bound on the largest rank's whole data-parallel exchange less its compute when the ranks hold the model's
        whole blocks, at least empty_stages.least_rank_blocks each and at most `most`: what no overlap hides, since a
        rank hides its exchange only behind its own forward and backward (schedule.least_heaviest_rank over the
        exchange lines less the compute ceiling's; 0 where a block's falls)."""
        lightest = self.exposure_lightest
        if lightest is None:
            return 0.0
        base = self._exchange_base(vpp) - self.ceiling[0]
        return heaviest_of_lightest(base, lightest, self.blocks, least_rank_blocks(vpp, len(base)), most)

    @cached_property
    def unhidden_lightest(self) -> np.ndarray | None:
        """schedule.lightest_blocks of the unhidden lines over every block, built once for every VPP and `most`
        heaviest_unhidden is asked (None where there are none or a line falls with blocks)."""
        if self.unhidden is None or (self.unhidden[1] < 0).any():
            return None
        return lightest_blocks(self.unhidden[1], self.held, self.blocks)

    def heaviest_unhidden(self, vpp: int, most: np.ndarray | None = None) -> float:
        """A bound on the largest rank's data-parallel seconds no overlap switch hides when the ranks hold the
        model's whole blocks, at least empty_stages.least_rank_blocks each and at most `most` (schedule's
        least-heaviest-rank bound over the unhidden lines, _line_base where a rank may hold none; 0 where there are
        none): the slowest stage's exposure is at least any stage's (pricing._data_parallel_exposure), and a
        stage's at least what its switches leave."""
        lightest = self.unhidden_lightest
        if lightest is None:
            return 0.0
        base = _line_base(self.unhidden[0], self.unhidden[2], vpp)
        return heaviest_of_lightest(base, lightest, self.blocks, least_rank_blocks(vpp, len(base)), most)

    def heaviest_exchange(self, vpp: int, most: np.ndarray | None = None) -> float:
        """A bound on the largest rank's whole data-parallel exchange seconds when the ranks hold the model's
        whole blocks, at least empty_stages.least_rank_blocks each and at most `most` (schedule.least_heaviest_rank
        over data_parallel's lines; 0 where a line falls with blocks)."""
        lightest = self.exchange_lightest
        least = least_rank_blocks(vpp, len(self.rank_least))
        return 0.0 if lightest is None else heaviest_of_lightest(self.data_parallel[0], lightest, self.blocks, least, most)

    def slowest_compute(self, vpp: int, most: np.ndarray | None = None) -> float:
        """A bound on the slowest rank's seconds of one microbatch: its compute, its MoE blocks' least exposed EP
        exchanges, recomputed ones included, and its blocks' least exposed CP exchanges (rank_least and block_least:
        never above its stage time) when the ranks hold the
        model's whole blocks, at least empty_stages.least_rank_blocks each and at most `most`
        (schedule.least_heaviest_rank; 0 where a block's compute is negative), and over the heaviest kinds' blocks alone, as schedule.least_heaviest_rank_of_kinds
        bounds them (compute_lightest_of_kinds: over every kind each rank would take DeepSeek-V3's 3 dense blocks
        first)."""
        lightest = self.compute_lightest
        if lightest is None:
            return 0.0
        least = least_rank_blocks(vpp, len(self.rank_least))
        slowest = heaviest_of_lightest(self.rank_least, lightest, self.blocks, least, most)
        for table, blocks in self.compute_lightest_of_kinds:
            slowest = max(slowest, heaviest_of_lightest(self.rank_least, table, blocks, 0, most))
        return slowest


def _line_base(base: np.ndarray, empty: np.ndarray, vpp: int) -> np.ndarray:
    """Per rank, the least data-parallel seconds with no block counted: its line's `base` where it holds a block
    (empty_stages.least_rank_blocks), the lesser of it and its seconds with none (`empty`) where it may hold none."""
    holds = np.broadcast_to(least_rank_blocks(vpp, len(base)), base.shape) > 0
    return np.where(holds, base, np.minimum(base, empty))


class _AllBlocks(NamedTuple):
    """What exposed_floor_s reads of one rank holding every block (CalibratedStageTimes._all_blocks)."""

    compute: float
    """Its forward and backward compute seconds of one microbatch (pricing.compute_beside_gemms_per_microbatch)."""
    beside: float
    """The part of `compute` beside the GEMMs (pricing.compute_beside_gemms_per_microbatch)."""
    weights: StageWeights
    """Its weights (workload.StageBlocks.weights)."""


DISPATCHERS = get_args(MegatronOptions.model_fields["moe_token_dispatcher_type"].annotation)
"""Every MoE token dispatcher Megatron offers (--moe-token-dispatcher-type)."""
FLEX_BACKENDS = get_args(MegatronOptions.model_fields["moe_flex_dispatcher_backend"].annotation)
"""The flex dispatcher's backends (--moe-flex-dispatcher-backend)."""
CP_COMM_KINDS = get_args(MegatronOptions.model_fields["cp_comm_type"].annotation)
"""Every CP communication type Megatron offers (--cp-comm-type)."""
EpOption = tuple[str, str]
"""A MoE token dispatcher and the flex backend it runs (read only under flex)."""
EVERY_EP_OPTION: tuple[EpOption, ...] = tuple((kind, backend) for kind in DISPATCHERS for backend in FLEX_BACKENDS)
"""The EP options the exchange floors range over when a row's are not given: every dispatcher and backend."""


def vpp_free(mapping: Mapping) -> Mapping:
    """The mapping with VPP 1 and no explicit layout: a rank's work per block (stage_work) and the group
    placement read neither, so what is built from them is shared by a row's VPP variants."""
    if mapping.vpp == 1 and mapping.layout is None:
        return mapping
    return mapping.model_copy(update={"vpp": 1, "layout": None})


def compute_ceiling_lines(work: RankWork, run: WorkloadBatch, held: np.ndarray, coefs: Coefs
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, (c_r, u_rk) with c_r + Σ_k u_rk·n_k at least its forward and backward compute seconds of one
    microbatch holding n_k blocks of each kind `held` marks (pricing.compute_beside_gemms_per_microbatch of its
    work): its empty work's and each block's alone. A rank's compute is sublinear in its work (sums of maxima of
    linear terms: a GEMM pass is bound by its FLOPs or its weight traffic), so it is at most the sum of its parts';
    the onset carries no compute (a data-parallel latency)."""
    pp, width = work.empty.shape
    vectors = np.concatenate([work.empty, work.slope[:, held].reshape(-1, width)])
    compute = compute_beside_gemms_per_microbatch(batch_from_vectors(run, vectors[None]), coefs)[0][0]
    return compute[:pp], compute[pp:].reshape(pp, -1)


DATA_PARALLEL_COLUMNS = vector_columns(DATA_PARALLEL_FIELDS)
"""The STAGE_VECTOR columns of a rank's data-parallel terms (workload.data_parallel_terms): zero in a stage
vector of its blocks-and-edges half alone (workload.blocks_fields), then replaced."""


class _RankParts:
    """The stage vectors rank_work reads of one mapping (held: no block, then one, then two of each kind),
    from halves the model's family (FAMILY_MEMOS) keeps for every mapping and problem that share what they read
    (STAGE_BLOCKS_READS, DATA_PARALLEL_READS): the blocks and edges (workload.StageBlocks:
    its vector and weights) once per what they read, which leaves out PP, VPP, the rank order and the
    data-parallel groups, and the data-parallel terms (DATA_PARALLEL_COLUMNS) once per what those read, which
    leaves out MBS, recompute and the dispatcher and CP types, and of the blocks all but their weights. Each
    half is computed by the functions stage_work runs, so every vector is stage_work's exactly. Only arrays
    and numbers are kept, so the collector has few more objects to walk."""

    def __init__(self, model: CalibratedStageTimes, mapping: Mapping, derived: Derived) -> None:
        self.model, self.mapping, self.derived = model, mapping, derived
        self.settings = settings = routed(model.problem, mapping, model.settings)
        self.links = links = model.links(mapping)
        m, d = mapping, derived
        self.blocks = model._stage_blocks.setdefault(
            (model._stage_blocks_reads, settings.hot_expert_skew, m.tp, m.cp, m.mbs, m.seq_len, m.expert_tp,
             m.recompute, d.experts_per_rank, links.tp, links.cp, links.cp_levels,
             dispatch_link(links, settings.dispatcher, settings.flex_backend)), {})
        self.exchanges = model._exchange_vectors.setdefault(
            (model._data_parallel_reads, m.tp, m.cp, d.dp_attn, d.dp_expert, d.experts_per_rank, links.dp_cp,
             links.dp_expert), {})
        reps = list(model.kinds.values())
        self.held: list[list[Block]] = [[], *([b] for b in reps), *([b, b] for b in reps)]
        self.known: dict = {}
        self.bodies: dict[int, StageBlocks] = {}

    def vectors(self, first: bool, last: bool) -> np.ndarray:
        """The stage vectors of a rank at this position holding each of `held` (MTP blocks on the last)."""
        problem = self.model.problem
        tail = list(problem.model.mtp_blocks) if last else []
        halves, terms = [], []
        for j in range(len(self.held)):
            entry = self.blocks.get((first, last, j))
            if entry is None:
                blocks = self._stage_blocks(j, tail, first, last)
                entry = self.blocks[first, last, j] = (fields_vector(blocks_fields(blocks)),
                                                       blocks.weights)
            vector, weights = entry
            exchanges = self.exchanges.get((first, weights))
            if exchanges is None:
                exchanges = self.exchanges[first, weights] = fields_vector(data_parallel_terms(
                    problem.model, self.mapping, self.derived, problem.training, self.settings, self.links, weights,
                    first))
            halves.append(vector)
            terms.append(exchanges)
        return np.where(DATA_PARALLEL_COLUMNS, np.array(terms), np.array(halves))

    def _stage_blocks(self, j: int, tail: list[Block], first: bool, last: bool) -> StageBlocks:
        """workload.stage_blocks of held[j] and `tail` at this position; with three ranks or more, the end ranks'
        go on from the middle rank's (workload.stage_blocks_after: the same values, fewer blocks added)."""
        problem = self.model.problem
        args = (problem.model, self.mapping, self.derived, problem.training, self.settings, self.links)
        if self.mapping.pp < 3:
            return stage_blocks(*args, self.held[j] + tail, first, last, self.known)
        body = self.bodies.get(j)
        if body is None:
            body = self.bodies[j] = stage_blocks(*args, self.held[j], False, False, self.known)
        if not (first or last):
            return body
        return stage_blocks_after(body, *args, self.held[j], tail, first, last, self.known)


class _Reads(NamedTuple):
    """The StepSettings and Training fields one memoised part of CalibratedStageTimes reads besides the mapping
    and what every model of a family shares (same_family): its values key the part in the family's memo."""

    settings: tuple[str, ...]
    training: tuple[str, ...]

    def of(self, settings: StepSettings, training) -> tuple:  # noqa: ANN001 - Training
        """The values of these fields in `settings` and `training`."""
        return (*(getattr(settings, f) for f in self.settings), *(getattr(training, f) for f in self.training))


ALL_BLOCKS_READS = _Reads(("precision", "unfused_attention", "hot_expert_skew", "grad_reduce_bytes", "frozen_weights"),
                          ("sequence_parallel", "recompute_modules", "optimizer", "capacity_factor"))
"""What _all_blocks reads of the settings and training: its compute (pricing._compute_times) reads of the blocks'
work the FLOPs, HBM bytes, blocks and weights (workload.block_work and add_edges: the precision, the attention
kernel, sequence parallelism, the recomputed modules) and of the run the precision, the hot-rank skew (the
settings' times workload.routed's, which reads the capacity factor), the main-gradient bytes and whether
weights are frozen; its weights read the optimizer (Muon's Newton–Schulz FLOPs). The exchanges, links,
overlap switches, FSDP, offloads and dispatcher and CP types enter only other fields."""
TP_EXCHANGE_READS = _Reads((), ("sequence_parallel",))
"""What tp_exchange_s reads of the settings and training (exchanges.tp_comm of each block and the head)."""
EXCHANGE_FLOOR_READS = _Reads(("ep_overlap", "dispatch_amplification", "fixed_size_all_to_all", "hot_expert_skew"),
                              ("capacity_factor",))
"""What exchange_floor_s reads of the settings and training: the EP overlap switch and what the busiest EP rank
receives (workload.dispatch_received of the routed settings); it takes the least over every dispatcher and CP
type, so it reads neither."""
RUN_READS = _Reads(("precision", "grad_reduce_bytes", "frozen_weights", "hot_expert_skew", "tp_overlap",
                    "grad_reduce_overlap", "param_gather_overlap", "p2p_overlap", "ep_overlap",
                    "optimizer_offload_fraction"),
                   ("sequence_parallel", "recompute_modules", "pipeline_schedule", "capacity_factor"))
"""What _run reads of the settings and training (workload.run_workload of the routed settings: the pipeline sends,
precision, skew, gradient bytes, frozen weights, overlap switches, host optimizer share and schedule)."""
STAGE_BLOCKS_READS = _Reads(("precision", "unfused_attention", "dispatcher", "flex_backend", "dispatch_amplification",
                             "fixed_size_all_to_all", "cp_comm", "cp_levels", "cpu_offload_layers", "offload_modules"),
                            ("precision", "sequence_parallel", "recompute_modules", "optimizer"))
"""What a rank's blocks-and-edges half (_RankParts.blocks: workload.stage_blocks, its vector and weights) reads of the
settings and training besides the routed hot-rank skew its key holds: everything but the FSDP, frozen-weight,
gradient-wire, overlap and host-optimizer switches, which only the data-parallel terms and the run read."""
DATA_PARALLEL_READS = _Reads(("fsdp", "frozen_weights", "grad_reduce_bytes", "gemm_gather_bytes"),
                             ("distributed_optimizer", "optimizer"))
"""What a rank's data-parallel terms (_RankParts.exchanges: workload.data_parallel_terms) read of the settings and
training."""
FAMILY_MEMOS = ("_links", "_workloads", "_stage_blocks", "_exchange_vectors", "_compute", "_tp_exchanges",
                "_exchange_floors", "_exchange_parts", "_cp_blocks")
"""The memos a model shares with its family (for_problem): each keyed by all it reads besides what same_family
holds equal (the group placements by the grid, rank order and CP levels; the others by the mapping fields and
the _Reads of their part; the exchange floor's EP and CP parts and each block's CP by their tokens, degrees,
links and received share), so models whose problems differ in a saving or a row's options share every value
computed from equal inputs, and only those."""


def same_family(a, b) -> bool:  # noqa: ANN001 - Problem
    """Whether two problems differ at most in their training section and framework options (a saving, a row's
    options), so that their models may share FAMILY_MEMOS: the same model, cluster, hardware section and
    routing contract (the step-time model reads nothing else of a problem)."""
    return (a.model is b.model and a.cluster is b.cluster and a.spec.hardware is b.spec.hardware
            and a.spec.contract is b.spec.contract)


class CalibratedStageTimes:
    """The step-time model as the solver reads it (solver/search/costs.py StageTimeModel): per-microbatch time
    of a pipeline rank holding given numbers of each kind of block, and the per-step time outside the
    pipeline. Stage times are priced exactly as `step_time` prices a stage; the per-step part (exposed
    pipeline sends, gradient reduction, optimizer) is taken from the default layout, since it hardly
    depends on the cut."""

    def __init__(self, problem, coefficients: StepCoefficients | None = None,  # noqa: ANN001 - Problem
                 options: MegatronOptions | None = None) -> None:
        self.problem = problem
        self.coefficients = coefficients or coefficients_for_gpu(problem.hardware.gpu.name)
        self.coefs = coefficient_values(self.coefficients)
        """The coefficients as `price` reads them, once (never changed)."""
        self.settings = settings_for(problem, options)
        self.kinds: dict[tuple, Block] = {}
        for b in problem.model.blocks:
            self.kinds.setdefault(block_kind(b), b)
        self._links: dict[tuple, Links] = {}
        self._workloads: dict[tuple, WorkloadBatch] = {}
        self._siblings: dict[int, CalibratedStageTimes] = {}
        self._rank_work: dict[Mapping, RankWork] = {}
        self._stage_blocks: dict[tuple, dict] = {}
        self._exchange_vectors: dict[tuple, dict] = {}
        self._floors: dict[tuple[Mapping, bytes], _FloorParts] = {}
        self._compute: dict[tuple, _AllBlocks] = {}
        self._whole_exchange_s: dict[tuple, dict[str, float]] = {}
        self._sends: dict[tuple, float] = {}
        self._tp_exchanges: dict[tuple, float] = {}
        self._exchange_floors: dict[tuple, float] = {}
        self._exchange_parts: dict[tuple, float] = {}
        self._cp_blocks: dict[tuple, np.ndarray] = {}
        training = problem.training
        self._run_reads = RUN_READS.of(self.settings, training)
        self._stage_blocks_reads = STAGE_BLOCKS_READS.of(self.settings, training)
        self._data_parallel_reads = DATA_PARALLEL_READS.of(self.settings, training)
        self._all_blocks_reads = ALL_BLOCKS_READS.of(self.settings, training)
        self._tp_exchange_reads = TP_EXCHANGE_READS.of(self.settings, training)
        self._exchange_floor_reads = EXCHANGE_FLOOR_READS.of(self.settings, training)
        self._totals = np.array([sum(block_kind(b) == k for b in problem.model.blocks) for k in self.kinds],
                                dtype=np.int64)
        self._row: tuple[Mapping, dict[str, np.ndarray]] | None = None
        self._layouts: dict[tuple[tuple[int, ...], int], np.ndarray] = {}

    def for_problem(self, problem) -> CalibratedStageTimes:  # noqa: ANN001 - Problem
        """The model of `problem`, a variant of this one's problem with other framework options or training
        settings (a row's dispatcher or CP communication type, a saving): this model when it is the same
        problem, else a sibling with the same coefficients, built once per problem, which joins this model's
        family (shares its FAMILY_MEMOS) when the two problems differ in nothing else (same_family)."""
        if problem is self.problem:
            return self
        sibling = self._siblings.get(id(problem))
        if sibling is None or sibling.problem is not problem:
            sibling = CalibratedStageTimes(problem, self.coefficients)
            if same_family(problem, self.problem):
                for name in FAMILY_MEMOS:
                    setattr(sibling, name, getattr(self, name))
            self._siblings[id(problem)] = sibling
        return sibling

    def exchange_keys(self, ep: CommTerm, cp: CommTerm, blocking: CommTerm) -> tuple[float, float, float]:
        """(EP seconds, CP seconds, the CP seconds an endless attention window leaves exposed) of one block's
        exchanges at the coefficients' link rates: pricing.py exposes a non-decreasing share of the EP
        exchange and max(whole − window, whole − overlap_cp·ring) of the CP exchange (ring = whole − blocking),
        so a variant whose three keys are no larger than another's is no slower on any stage, whatever the
        window (solver/search/choices.py compares a row's dispatcher and CP communication variants by them)."""
        coefs = self.coefs
        whole = comm_seconds(cp, coefs)
        return comm_seconds(ep, coefs), whole, cp_unhidden_seconds(whole, comm_seconds(blocking, coefs), coefs)

    def links(self, mapping: Mapping) -> Links:
        """Group placement of a mapping, computed once per grid: its sizes and rank order (all exchanges.links_for
        reads), keyed by those alone, without a VPP-free copy of the mapping to hash."""
        m = mapping
        key = (m.gpus, m.tp, m.cp, m.pp, m.ep, m.expert_tp, m.rank_order, self.settings.cp_levels)
        if key not in self._links:
            self._links[key] = links_for(self.problem.hardware.topology, mapping, self.settings.cp_levels)
        return self._links[key]

    def _run(self, mapping: Mapping, derived: Derived) -> WorkloadBatch:
        """The mapping's run-level workload (no stage: rank work comes as vectors) as a batch of one run,
        built once (pricing.batch_from_vectors)."""
        key = (self._run_reads, mapping)
        if key not in self._workloads:
            self._workloads[key] = run_batch(run_workload(self.problem, mapping, derived,
                                                          routed(self.problem, mapping, self.settings),
                                                          self.links(mapping)))
        return self._workloads[key]

    def _default_counts(self, mapping: Mapping, derived: Derived) -> np.ndarray:
        """Blocks of each kind per pipeline rank under the mapping's own (or the default) layout, 1 × PP × kinds
        (built once per layout and PP)."""
        key = (tuple(derived.layout), mapping.pp)
        if key not in self._layouts:
            kinds = list(self.kinds)
            blocks = self.problem.model.blocks
            out = np.zeros((1, mapping.pp, len(kinds)), dtype=np.int64)
            for r, holding in enumerate(rank_holdings(derived.layout, mapping.pp,
                                                      self.problem.training.pipeline_schedule)):
                for i in holding.blocks:
                    out[0, r, kinds.index(block_kind(blocks[i]))] += 1
            self._layouts[key] = out
        return self._layouts[key]

    def rank_work(self, mapping: Mapping, derived: Derived) -> RankWork:
        """The mapping's rank work per block count (RankWork), built once from ranks holding no block,
        one and two blocks of each kind, per rank position (first, middle, last)."""
        key = vpp_free(mapping)
        if key not in self._rank_work:
            parts = _RankParts(self, mapping, derived)
            by_position: dict[tuple[bool, bool], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
            for s in range(mapping.pp):
                first, last = s == 0, s == mapping.pp - 1
                if (first, last) not in by_position:
                    vectors = parts.vectors(first, last)
                    empty, one, two = vectors[0], vectors[1:1 + len(self.kinds)], vectors[1 + len(self.kinds):]
                    by_position[first, last] = (empty, two - one, one - empty - (two - one))
            pos = [by_position[s == 0, s == mapping.pp - 1] for s in range(mapping.pp)]
            self._rank_work[key] = RankWork(np.array([p[0] for p in pos]), np.array([p[1] for p in pos]),
                                            np.array([p[2] for p in pos]))
        return self._rank_work[key]

    def cut_step_times_s(self, mapping: Mapping, derived: Derived, counts: np.ndarray) -> np.ndarray:
        """Step seconds of N cuts of one mapping, exactly as `step_time` prices them (the same `price`):
        counts N × PP × kinds are the blocks of each kind on each pipeline rank."""
        return self._priced_cuts(mapping, derived, counts)["step"]

    def cut_stage_times_s(self, mapping: Mapping, derived: Derived, counts: np.ndarray) -> np.ndarray:
        """Each pipeline rank's stage seconds of one microbatch in N cuts (counts N × PP × kinds → N × PP), as
        cut_step_times_s's `price` has them: each distinct (rank, blocks) priced once (stage_times_s), since a
        stage's price reads only its rank's work and the run."""
        n, pp, kinds = counts.shape
        rows = np.concatenate([np.broadcast_to(np.arange(pp)[None, :, None], (n, pp, 1)), counts], axis=2)
        rows = rows.reshape(n * pp, kinds + 1)
        first, same = distinct_rows(rows)
        seconds = self.stage_times_s(mapping, derived, [(rank, tuple(held)) for rank, *held in rows[first].tolist()])
        return np.array(seconds)[same].reshape(n, pp)

    def _priced_cuts(self, mapping: Mapping, derived: Derived, counts: np.ndarray) -> dict[str, np.ndarray]:
        """`price` of N cuts of one mapping (counts N × PP × kinds blocks per pipeline rank)."""
        vectors = self.rank_work(mapping, derived).vectors(counts)
        return price(batch_from_vectors(self._run(mapping, derived), vectors), self.coefs)

    def step_floor_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray,
                     most: np.ndarray | None = None, ep_options: tuple[EpOption, ...] | None = None,
                     slowest_s: float = 0.0) -> float:
        """A lower bound on the step seconds of every cut of the mapping (`totals`: blocks of each kind in
        the model) holding at most most_r blocks on each pipeline rank r (None: any number; e.g. what fits
        its memory), under every CP communication type and every MoE dispatcher and backend of `ep_options`
        (None: all, EVERY_EP_OPTION): the pipeline time (Σ_s t_s + (v·m − 1)·T)/v, T = max_s t_s, with the
        stage times' sum at least all ranks' compute and the TP and FSDP seconds no overlap hides
        (pricing.rank_floor_per_microbatch) plus the least exposed EP and CP exchange seconds any of those gives
        (exchange_floor_s), and T at least their mean and at least the
        slowest rank's compute and exposed EP (recomputed too) and CP when ranks hold whole blocks
        (_FloorParts.slowest_compute), and at least `slowest_s` (a bound on the slowest rank's stage seconds the
        caller knows of the cuts it asks about, e.g. from their memory cap: reprice.tail_floor_units);
        plus the unhidden pipeline sends (pricing.pipeline_sends_floor), the data-parallel exchanges at least as
        exposed as the largest of: what their switches leave; the largest rank's whole exchange less T (at least
        the mean, pricing.data_parallel_floor and _FloorParts.whole_exchanges, and at least the heaviest rank's
        when ranks hold whole blocks, _FloorParts.heaviest_exchange); a rank's whole exchange less its own
        forward and backward, the only windows it hides behind, on average (the mean whole exchange less
        _FloorParts.compute_ceiling's mean) and on the heaviest rank when ranks hold whole blocks
        (_FloorParts.heaviest_exposure); what the overlap switches leave of the heaviest rank's exchange whatever its
        windows (_FloorParts.heaviest_unhidden); and the optimizer step of an average rank. Sound
        because a rank's compute and exchanges are sublinear in its work (sums of maxima of linear terms:
        the price of all ranks' summed work is at most the sum of their prices), every field grows with
        blocks (the summed work takes the least slope over rank positions; a rank's own bound its own
        slope per kind), and the step grows with the stage times' sum and, but for the data-parallel term
        at one microbatch, with T: there T takes the least value of the bound's convex function of it."""
        parts = self._floor_parts(mapping, derived, totals, ep_options)
        coefs = self.coefs
        m, pp, vpp = float(derived.num_microbatches), mapping.pp, mapping.vpp
        exposed, whole = parts.exposure
        whole = max(whole, parts.whole_exchanges(vpp) / pp)
        exposed = max(exposed, whole - parts.compute_ceiling / pp, parts.heaviest_exposure(vpp, most),
                      parts.heaviest_unhidden(vpp, most))
        whole = max(whole, parts.heaviest_exchange(vpp, most))
        least = max(parts.ranks / pp, parts.slowest_compute(vpp, most), slowest_s)
        slowest = least if vpp * m - 1 >= vpp else max(least, whole - exposed)
        return (pipeline_time_scaled(parts.ranks, slowest, m, vpp) / vpp + max(exposed, whole - slowest)
                + float(pipeline_sends_floor(parts.summed, coefs, vpp)[0]) + parts.optimizer / pp)

    def stage_floor_lines(self, mapping: Mapping, derived: Derived, totals: np.ndarray,
                          ep_options: tuple[EpOption, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(a_r per rank, b_rk per rank and kind the model holds) with a_r + Σ_k b_rk·n_k at most rank r's stage
        seconds of one microbatch holding n_k blocks of each kind, under every option of `ep_options`
        (_FloorParts.rank_least and block_least: the lines step_floor_s bounds the slowest rank by)."""
        parts = self._floor_parts(mapping, derived, totals, ep_options)
        return parts.rank_least, parts.block_least

    def _floor_parts(self, mapping: Mapping, derived: Derived, totals: np.ndarray,
                     ep_options: tuple[EpOption, ...] | None = None) -> _FloorParts:
        """step_floor_s's parts, built once per mapping less its VPP and EP options: neither the rank work, the
        run's prices nor the exchanges read VPP (the schedule and the pipeline sends' count do)."""
        key = (vpp_free(mapping), totals.tobytes(), ep_options)
        if key not in self._floors:
            work = self.rank_work(mapping, derived)
            total = work.empty.sum(axis=0) + totals.astype(float) @ work.slope.min(axis=0)
            run = self._run(mapping, derived)
            summed = batch_from_vectors(run, total[None, None, :])
            coefs = self.coefs
            optimizer = float(optimizer_seconds(summed, coefs)[0])
            held = totals > 0
            linear = linear_compute_per_microbatch(
                batch_from_vectors(run, np.concatenate([work.empty, work.slope[:, held].reshape(-1, work.empty.shape[1])])
                                   [None]), coefs)[0]
            onset = work.empty + work.onset[:, held].min(axis=1)
            lines = data_parallel_lines(onset, work.slope[:, held], coefs)
            exposure = tuple(float(x[0]) for x in data_parallel_floor(summed, coefs))
            recompute = self.recompute_exchange_floor_s(mapping, totals, ep_options)
            ranks = (float(rank_floor_per_microbatch(summed, coefs, recompute)[0, 0])
                     + self.exchange_floor_s(mapping, totals, ep_options))
            moe = np.array([b.mlp is BlockKind.moe for b in self.kinds.values()])[held]
            edge_moe = stage_field(work.empty, "moe_blocks")
            moe_block = (self.exposed_ep_per_block_s(mapping, ep_options)
                         + self.recomputed_ep_per_block_s(mapping, ep_options)) if moe.any() or edge_moe.any() else 0.0
            per_block = (linear[mapping.pp:].reshape(mapping.pp, -1) + np.where(moe, moe_block, 0.0)[None, :]
                         + self.exposed_cp_per_block_s(mapping)[held][None, :])
            shares = data_parallel_unhidden_shares(run)
            empty = batch_from_vectors(run, work.empty[None])
            self._floors[key] = _FloorParts(
                ranks=ranks, optimizer=optimizer, summed=summed, exposure=exposure,
                rank_least=linear[:mapping.pp] + edge_moe * moe_block, block_least=per_block,
                held=totals[held].astype(np.int64), data_parallel=lines,
                empty_exchange=data_parallel_whole_seconds(empty, coefs)[0],
                ceiling=compute_ceiling_lines(work, run, held, coefs),
                unhidden=(*data_parallel_lines(onset, work.slope[:, held], coefs, shares),
                          data_parallel_whole_seconds(empty, coefs, shares)[0]) if any(shares) else None)
        return self._floors[key]

    def exposed_floor_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray,
                        ep_options: tuple[EpOption, ...] | None = None) -> float:
        """The least rank floor (rank_floor_s) with the least exposed EP and CP seconds of one microbatch under
        `ep_options` added (exchange_floor_s), spread over the pipeline as step_floor_s spreads them, plus the
        data-parallel exposure step_floor_s adds at that slowest stage (data_parallel_floor_s: what the overlap
        switches leave, and the whole exchange less the stage; the first alone at one microbatch, where a longer
        stage may hide more) and the same unhidden pipeline sends (pipeline_sends_floor_s): between the compute
        floor and step_floor_s (whose summed work has that rank floor, whose exchange floor is the same, whose
        data-parallel floor is at least this one's and whose pipeline time grows with the slowest stage at least as
        fast as the exchange shrinks), for a share of step_floor_s's cost, since its parts are kept per the
        degrees, rank order and MBS they read."""
        ranks = self.rank_floor_s(mapping, derived, totals, ep_options) + self.exchange_floor_s(mapping, totals, ep_options)
        m, pp, vpp = float(derived.num_microbatches), mapping.pp, mapping.vpp
        exposed, whole = self.data_parallel_floor_s(mapping, derived, totals)
        data_parallel = max(exposed, whole - ranks / pp) if vpp * m - 1 >= vpp else exposed
        return ranks * even_stretch(pp, vpp, m) + data_parallel + self.pipeline_sends_floor_s(mapping, derived)

    def pipeline_sends_floor_s(self, mapping: Mapping, derived: Derived) -> float:
        """The pipeline sends no overlap hides (pricing.unhidden_sends_seconds), as step_floor_s adds them
        (pricing.pipeline_sends_floor of the run's send): one send priced once per the grid, rank order, MBS and
        sequence, all it reads."""
        key = (mapping.tp, mapping.cp, mapping.ep, mapping.expert_tp, mapping.pp, mapping.rank_order, mapping.mbs,
               mapping.seq_len)
        if key not in self._sends:
            tokens = mapping.mbs * mapping.seq_len / mapping.cp
            self._sends[key] = comm_seconds(pp_comm(self.problem.model, tokens, mapping.tp,
                                                    self.problem.training.sequence_parallel,
                                                    self.links(mapping).pp), self.coefs)
        return float(unhidden_sends_seconds(self._sends[key], float(derived.num_microbatches), mapping.pp,
                                            mapping.vpp, float(self.settings.p2p_overlap)))

    def data_parallel_floor_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray) -> tuple[float, float]:
        """(exposed, whole): an average stage's data-parallel seconds its overlap switches leave exposed whatever
        the window (pricing.data_parallel_unhidden_shares), and its whole data-parallel exchange seconds, at
        least: the DATA_PARALLEL_TERMS of every weight on one rank (_all_blocks' weights and the embedding)
        without their latencies, over PP. pricing.data_parallel_floor of step_floor_s's summed work is at least
        these (the same bytes; a term's seconds grow with its bytes). Once per the grid and rank order."""
        seconds = self._whole_exchanges(mapping, derived, totals)
        terms = [seconds[t] for t in DATA_PARALLEL_TERMS]
        shares = unhidden_shares(float(self.settings.grad_reduce_overlap), float(self.settings.param_gather_overlap))
        return (sum(s * x for s, x in zip(shares, terms, strict=True)) / mapping.pp, sum(terms) / mapping.pp)

    def _whole_exchanges(self, mapping: Mapping, derived: Derived, totals: np.ndarray) -> dict[str, float]:
        """Per data-parallel exchange (workload.DATA_PARALLEL_EXCHANGES), the seconds of every weight's term on one
        rank (_all_blocks' weights and the embedding, workload.data_parallel_terms) without its latency: a rank
        holding none of a group's weights has none, and the other seconds add up over ranks. Once per the grid and
        rank order, all they read (the FSDP and data-parallel floors share them)."""
        key = (mapping.tp, mapping.cp, mapping.ep, mapping.expert_tp, mapping.pp, mapping.rank_order,
               totals.tobytes())
        if key not in self._whole_exchange_s:
            problem = self.problem
            terms = data_parallel_terms(problem.model, mapping, derived, problem.training, self.settings,
                                        self.links(mapping), self._all_blocks(mapping, derived, totals).weights, True)
            self._whole_exchange_s[key] = {f: comm_seconds(CommTerm(terms[f].nvlink_s, terms[f].network_s), self.coefs)
                                           for f in DATA_PARALLEL_EXCHANGES}
        return self._whole_exchange_s[key]

    def rank_floor_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray,
                     ep_options: tuple[EpOption, ...] | None = None) -> float:
        """A floor on pricing.rank_floor_per_microbatch of step_floor_s's summed work (all ranks' compute and TP
        and FSDP seconds of one microbatch), at least compute_per_microbatch_s: each of its terms with what
        only that work gives dropped (the head's and MTP blocks' TP, the FSDP exchanges' latencies, the FSDP
        seconds the overlap switches leave exposed beside the compute), every term growing with those. For
        FSDP rows its gathers and reduce-scatters of every weight, several times the compute, so such a row
        waits by them before its step floor is priced. Under full recompute the TP exchange carries the recomputed
        forward's TP and EP exchanges (recompute_exchange_floor_s, the least under `ep_options`), as `price` does."""
        whole = self._all_blocks(mapping, derived, totals)
        tp = self.tp_exchange_s(mapping, totals) + self.recompute_exchange_floor_s(mapping, totals, ep_options)
        tp_left = (1.0 - float(tp_overlap_applies(self.settings.tp_overlap, self.links(mapping).tp))) * tp
        fsdp = self._fsdp_floor(mapping, derived, totals) if self.settings.fsdp else 0.0
        return max(whole.compute + tp_left, fsdp + tp_left, whole.beside + tp)

    def compute_per_microbatch_s(self, mapping: Mapping, derived: Derived, totals: np.ndarray) -> float:
        """The forward and backward compute seconds of one microbatch over all blocks, edges and MTP blocks
        (pricing.compute_beside_gemms_per_microbatch, a part of step_floor_s's rank floor): spread over the pipeline as
        step_floor_s spreads it (reprice.compute_floor_units), a floor on every cut's step. It reads only TP,
        CP, EP, ETP, MBS and recompute, so it is built once per those for all rows sharing them (_all_blocks),
        a small share of what step_floor_s builds per row."""
        return self._all_blocks(mapping, derived, totals).compute

    def _all_blocks(self, mapping: Mapping, derived: Derived, totals: np.ndarray) -> _AllBlocks:
        """One rank holding every block, edge and MTP block (the compute fields and weights of the rank work add
        up over blocks): its blocks-and-edges half alone (workload.stage_blocks, since the compute reads no
        data-parallel term), once per TP, CP, EP, ETP, MBS, sequence and recompute and what ALL_BLOCKS_READS names,
        all its compute and weights read, for the model's whole family (FAMILY_MEMOS): a saving's model and a row's
        options read the plain model's values."""
        key = (self._all_blocks_reads, mapping.tp, mapping.cp, mapping.ep, mapping.expert_tp, mapping.mbs,
               mapping.seq_len, mapping.recompute, totals.tobytes())
        if key not in self._compute:
            model = self.problem.model
            held = [b for b, n in zip(self.kinds.values(), totals.tolist(), strict=True) for _ in range(n)]
            blocks = stage_blocks(model, mapping, derived, self.problem.training,
                                  routed(self.problem, mapping, self.settings), self.links(mapping),
                                  held + list(model.mtp_blocks), True, True)
            vector = fields_vector(blocks_fields(blocks))
            one = batch_from_vectors(self._run(mapping, derived), vector[None, None, :])
            compute, beside = compute_beside_gemms_per_microbatch(one, self.coefs)
            self._compute[key] = _AllBlocks(float(compute[0, 0]), float(beside[0, 0]), blocks.weights)
        return self._compute[key]

    def _fsdp_floor(self, mapping: Mapping, derived: Derived, totals: np.ndarray) -> float:
        """All ranks' FSDP gather and reduce-scatter seconds of one microbatch without their latencies
        (_whole_exchanges: every weight and the embedding on the data-parallel links)."""
        seconds = self._whole_exchanges(mapping, derived, totals)
        return sum(PASSES_PER_MICROBATCH[f] * seconds[f] for f in ("fsdp_gather", "fsdp_reduce"))

    def tp_exchange_s(self, mapping: Mapping, totals: np.ndarray) -> float:
        """Seconds of the TP collectives of one microbatch over all ranks' blocks (forward and backward),
        before any overlap hides them (--tp-comm-overlap may hide them behind the GEMMs up to their length):
        an estimate for ordering rows, and a part of rank_floor_s. Once per TP, CP, MBS, sequence, TP link and
        sequence parallelism for the model's family (FAMILY_MEMOS)."""
        links = self.links(mapping)
        if links.tp.size <= 1:
            return 0.0
        key = (self._tp_exchange_reads, mapping.tp, mapping.cp, mapping.mbs, mapping.seq_len, links.tp, totals.tobytes())
        if key not in self._tp_exchanges:
            model = self.problem.model
            tokens = mapping.mbs * mapping.seq_len / mapping.cp
            sp = self.problem.training.sequence_parallel
            term = self._over_blocks(lambda b: tp_comm(model, b, tokens, links.tp, sp), totals)
            self._tp_exchanges[key] = PASSES_PER_MICROBATCH["tp"] * comm_seconds(term, self.coefs)
        return self._tp_exchanges[key]

    def recompute_exchange_floor_s(self, mapping: Mapping, totals: np.ndarray,
                                   ep_options: tuple[EpOption, ...] | None = None) -> float:
        """Seconds of one microbatch's recomputed-forward exchanges that all ranks together cannot go below under
        full recompute (0 otherwise): each block's forward TP exchange and each MoE block's EP dispatch and combine
        run again before its backward (workload._StageSums.add_block), priced with the TP exchange, so they hide
        only where it hides, behind the GEMMs (pricing._exposed_per_microbatch). The least over the dispatchers
        and backends of `ep_options` (None: all, EVERY_EP_OPTION); seconds of summed terms are at most the sum of
        the ranks' seconds. Built once per the grid, rank order, MBS and sequence and what EXCHANGE_FLOOR_READS and
        TP_EXCHANGE_READS name, for the model's family (FAMILY_MEMOS)."""
        if mapping.recompute is not Recompute.full:
            return 0.0
        key = ("recompute", self._exchange_floor_reads, self._tp_exchange_reads, mapping.gpus, mapping.tp, mapping.cp,
               mapping.ep, mapping.expert_tp, mapping.pp, mapping.rank_order, mapping.mbs, mapping.seq_len,
               totals.tobytes(), ep_options)
        if key not in self._exchange_floors:
            self._exchange_floors[key] = self._least_recomputed(mapping, totals, ep_options or EVERY_EP_OPTION)
        return self._exchange_floors[key]

    def _least_recomputed(self, mapping: Mapping, totals: np.ndarray, ep_options: tuple[EpOption, ...]) -> float:
        """recompute_exchange_floor_s, computed: the forward TP exchange of `totals` blocks plus the EP exchange of
        their MoE blocks under the dispatcher and backend of `ep_options` that gives the least."""
        model = self.problem.model
        links = self.links(mapping)
        tokens = mapping.mbs * mapping.seq_len / mapping.cp
        received = dispatch_received(routed(self.problem, mapping, self.settings))
        sp = self.problem.training.sequence_parallel
        tp = self._over_blocks(lambda b: tp_comm(model, b, tokens, links.tp, sp), totals)
        moe_blocks = sum(int(n) for b, n in zip(self.kinds.values(), totals, strict=True) if b.mlp is BlockKind.moe)
        if not moe_blocks or links.ep.size <= 1:
            return PASSES_PER_MICROBATCH["recompute_comm"] * comm_seconds(tp, self.coefs)
        return PASSES_PER_MICROBATCH["recompute_comm"] * min(
            comm_seconds(tp + ep.scaled(moe_blocks), self.coefs)
            for ep in self._ep_terms(mapping, links, tokens, received, ep_options))

    def _over_blocks(self, term_of: Callable[[Block], CommTerm], totals: np.ndarray) -> CommTerm:
        """One block's exchange (`term_of` its kind's representative) summed over `totals` blocks of each kind."""
        return sum((term_of(b).scaled(int(n)) for b, n in zip(self.kinds.values(), totals, strict=True)), NO_COMM)

    def exchange_floor_s(self, mapping: Mapping, totals: np.ndarray,
                         ep_options: tuple[EpOption, ...] | None = None) -> float:
        """Exposed EP and CP seconds of one microbatch that all ranks together cannot go below, under any CP
        communication type and any dispatcher and backend of `ep_options` (None: all, EVERY_EP_OPTION; the
        least over them, so it holds whichever of them a row chooses): a rank hides at most the overlap_ep
        share of its EP exchange unless --overlap-moe-expert-parallel-comm is on, and at most overlap_cp of its
        CP exchange's ring part,
        none of its blocking part (pricing.py _exposed_per_microbatch); seconds of summed terms are at most
        the sum of the ranks' seconds. Built once per the grid, rank order, MBS and sequence (no recompute or VPP
        reads it) and what EXCHANGE_FLOOR_READS names, for the model's family (FAMILY_MEMOS)."""
        key = (self._exchange_floor_reads, mapping.gpus, mapping.tp, mapping.cp, mapping.ep, mapping.expert_tp,
               mapping.pp, mapping.rank_order, mapping.mbs, mapping.seq_len, totals.tobytes(), ep_options)
        if key not in self._exchange_floors:
            self._exchange_floors[key] = self._exchange_floor(mapping, totals, ep_options or EVERY_EP_OPTION)
        return self._exchange_floors[key]

    def _exchange_floor(self, mapping: Mapping, totals: np.ndarray, ep_options: tuple[EpOption, ...]) -> float:
        """exchange_floor_s, computed (its EP part one MoE block's times their number, exposed_ep_per_block_s; its
        parts kept per what each reads: _least_ep, _least_cp)."""
        links = self.links(mapping)
        tokens = mapping.mbs * mapping.seq_len / mapping.cp
        moe_blocks = sum(int(n) for b, n in zip(self.kinds.values(), totals, strict=True) if b.mlp is BlockKind.moe)
        floor = moe_blocks * self.exposed_ep_per_block_s(mapping, ep_options) if moe_blocks else 0.0
        if links.cp.size > 1:
            levels = self._cp_levels(mapping)
            least = self._kept_part((tokens, mapping.tp, links.cp, levels, totals.tobytes()),
                                    lambda: self._least_cp(mapping, links, tokens, levels, totals))
            floor += PASSES_PER_MICROBATCH["cp"] * least
        return floor

    def exposed_ep_per_block_s(self, mapping: Mapping, ep_options: tuple[EpOption, ...] | None = None) -> float:
        """Exposed EP seconds one MoE block adds to the stage time of the rank holding it, at least, under any
        dispatcher and backend of `ep_options` (None: all, EVERY_EP_OPTION): every MoE block's exchange is the
        same term (exchanges.ep_comm reads no block), so a rank's is its MoE blocks times one block's, latency
        included, and a rank hides at most the overlap_ep share of it unless --overlap-moe-expert-parallel-comm is
        on (pricing._exposed_per_microbatch). 0 without an EP exchange. Its seconds are kept per what they read
        for the model's family (_kept_part)."""
        settings = routed(self.problem, mapping, self.settings)
        hidden_ep = 1.0 if settings.ep_overlap else min(float(self.coefs["overlap_ep"]), 1.0)
        if self.links(mapping).ep.size <= 1 or hidden_ep >= 1.0:
            return 0.0
        return PASSES_PER_MICROBATCH["ep"] * (1.0 - hidden_ep) * self._least_ep_kept(mapping, settings, ep_options)

    def recomputed_ep_per_block_s(self, mapping: Mapping, ep_options: tuple[EpOption, ...] | None = None) -> float:
        """Exposed seconds one MoE block's recomputed EP exchange adds to the stage time of the rank holding it, at
        least, under any dispatcher and backend of `ep_options` (None: all, EVERY_EP_OPTION): under full recompute
        every block's forward exchanges run again before its backward and are priced with the TP exchange
        (workload._StageSums.add_block), which hides only behind the GEMMs and only under TP overlap
        (pricing._exposed_per_microbatch). Without that overlap all of it is exposed, and a rank's recomputed
        exchanges cost at least its MoE blocks times one block's EP exchange (the other terms only add to them).
        0 without full recompute or an EP exchange, or under TP overlap."""
        if mapping.recompute is not Recompute.full:
            return 0.0
        settings = routed(self.problem, mapping, self.settings)
        links = self.links(mapping)
        if links.ep.size <= 1 or tp_overlap_applies(settings.tp_overlap, links.tp):
            return 0.0
        return PASSES_PER_MICROBATCH["recompute_comm"] * self._least_ep_kept(mapping, settings, ep_options)

    def _least_ep_kept(self, mapping: Mapping, settings: StepSettings, ep_options: tuple[EpOption, ...] | None) -> float:
        """_least_ep under the routed `settings`, kept per what it reads for the model's family (_kept_part)."""
        links = self.links(mapping)
        tokens = mapping.mbs * mapping.seq_len / mapping.cp
        options = ep_options or EVERY_EP_OPTION
        received = dispatch_received(settings)
        return self._kept_part(("ep", tokens, mapping.tp, mapping.expert_tp, links.ep, links.ep_deepep, received, options),
                               lambda: self._least_ep(mapping, links, tokens, received, options))

    def exposed_cp_per_block_s(self, mapping: Mapping) -> np.ndarray:
        """Per kind (in `kinds`' order), exposed CP seconds of one microbatch one block adds to the stage time of the
        rank holding it, at least, under any CP communication type and a2a+p2p split: a rank hides at most the
        overlap_cp share of its exchange's ring part (pricing.cp_unhidden_seconds), and its summed terms' seconds
        are at least each term's one link part plus its latency summed over the blocks (the part the model's
        blocks carry most of, per type), so a rank's is at least its blocks' sum. Zeros without a CP exchange."""
        links = self.links(mapping)
        if links.cp.size <= 1:
            return np.zeros(len(self.kinds))
        tokens = mapping.mbs * mapping.seq_len / mapping.cp
        levels = self._cp_levels(mapping)
        key = (tokens, mapping.tp, links.cp, levels)
        if key not in self._cp_blocks:
            self._cp_blocks[key] = PASSES_PER_MICROBATCH["cp"] * np.min(
                [self._cp_lines(mapping.tp, links.cp, tokens, kind, level) for kind in CP_COMM_KINDS for level in levels],
                axis=0)
        return self._cp_blocks[key]

    def _cp_lines(self, tp: int, cp_link: GroupLink, tokens: float, kind: str, level: tuple) -> np.ndarray:
        """Per kind, one block's exposed CP seconds under one CP type and split as exposed_cp_per_block_s bounds
        them: pricing.cp_unhidden_seconds of its whole exchange and its blocking part, each at _link_lines'."""
        parts = [cp_parts(self.problem.model, b, tokens, tp, cp_link, kind, level) for b in self.kinds.values()]
        return cp_unhidden_seconds(self._link_lines([ring + blocking for ring, blocking in parts]),
                                   self._link_lines([blocking for _, blocking in parts]), self.coefs)

    def _link_lines(self, terms: list[CommTerm]) -> np.ndarray:
        """Per kind, the seconds of its block's term (`terms`, in `kinds`' order) on one link part, the one the
        model's blocks carry most of, plus its latency: summed over any blocks, at most the seconds of their
        summed term (pricing.comm_seconds takes the larger part)."""
        coefs = self.coefs
        nvlink = np.array([t.nvlink_s for t in terms]) / float(coefs["nvlink_efficiency"])
        network = np.array([t.network_s for t in terms]) / float(coefs["network_efficiency"])
        part = network if self._totals @ network > self._totals @ nvlink else nvlink
        return part + np.array([t.latency_s for t in terms])

    def _kept_part(self, key: tuple, build: Callable[[], float]) -> float:
        """build()'s seconds, kept under `key` (all it reads), so mappings of other pipeline, EP or data-parallel
        placements whose exchanges run on equal links share them."""
        if key not in self._exchange_parts:
            self._exchange_parts[key] = build()
        return self._exchange_parts[key]

    def _least_ep(self, mapping: Mapping, links: Links, tokens: float, received: float,
                  ep_options: tuple[EpOption, ...]) -> float:
        """The least seconds of one MoE block's EP exchange under any dispatcher and flex backend of `ep_options`
        (`received`: workload.dispatch_received of the routed settings)."""
        return min(comm_seconds(ep, self.coefs) for ep in self._ep_terms(mapping, links, tokens, received, ep_options))

    def _ep_terms(self, mapping: Mapping, links: Links, tokens: float, received: float,
                  ep_options: tuple[EpOption, ...]) -> list[CommTerm]:
        """One MoE block's forward EP exchange (exchanges.ep_comm) under each dispatcher and flex backend of
        `ep_options`, on the link it runs on."""
        return [ep_comm(self.problem.model, tokens, mapping.tp, mapping.expert_tp, dispatch_link(links, kind, backend),
                        received, kind) for kind, backend in ep_options]

    def _least_cp(self, mapping: Mapping, links: Links, tokens: float, levels: tuple[tuple, ...],
                  totals: np.ndarray) -> float:
        """The least exposed seconds of the CP exchange of `totals` blocks under any CP communication type and
        a2a+p2p split (`levels`: _cp_levels)."""
        coefs, model = self.coefs, self.problem.model

        def exposed(kind: str, level: tuple) -> float:
            """What no window hides of the exchange (pricing.cp_unhidden_seconds; subadditive in the terms)."""
            args = (tokens, mapping.tp, links.cp, kind, level)
            whole = comm_seconds(self._over_blocks(lambda b: cp_comm(model, b, *args), totals), coefs)
            blocking = comm_seconds(self._over_blocks(lambda b: cp_parts(model, b, *args)[1], totals), coefs)
            return cp_unhidden_seconds(whole, blocking, coefs)

        return min(exposed(kind, level) for kind in CP_COMM_KINDS for level in levels)

    def _cp_levels(self, mapping: Mapping) -> tuple[tuple, ...]:
        """Every two-level placement a2a+p2p may run under this mapping's CP (each split CP = A·P), and no
        levels (the flat types): the floor holds whatever hierarchical sizes a row chooses."""
        cp, topology = mapping.cp, self.problem.hardware.topology
        return ((), *(level_links(topology, mapping.gpus, mapping.tp, cp, mapping.pp, RankOrder(mapping.rank_order),
                                  (a, cp // a)) for a in range(2, cp) if cp % a == 0))

    def stage_times_s(self, mapping: Mapping, derived: Derived,
                      stages: list[tuple[int, tuple[int, ...]]]) -> list[float]:
        """Forward + backward + exposed TP/CP/EP/FSDP seconds of one microbatch on each (stage, counts),
        counts in the order of the problem's block kinds (first appearance in the model): each priced as
        a run of its own from the mapping's rank work (RankWork, exact)."""
        if not stages:
            return []
        counts = np.zeros((len(stages), mapping.pp, len(self.kinds)), dtype=np.int64)
        for n, (stage, held) in enumerate(stages):
            counts[n, stage] = held
        ranks = [stage for stage, _ in stages]
        vectors = self.rank_work(mapping, derived).vectors(counts)[np.arange(len(stages)), ranks]
        prices = price(batch_from_vectors(self._run(mapping, derived), vectors[:, None, :]),
                       self.coefs)
        return [float(x) for x in prices["stage"][:, 0]]

    def _shares(self, mapping: Mapping) -> np.ndarray:
        """Blocks of each kind block_times_s probes a rank with: its share over the pipeline ranks, at least one."""
        return np.array([max(round(int(n) / mapping.pp), 1) for n in self._totals], dtype=np.int64)

    def _row_prices(self, mapping: Mapping, derived: Derived) -> dict[str, np.ndarray]:
        """`price` of the cuts a row's cost tables read, in one call (kept for the last mapping: row_costs
        asks edge_times_s, block_times_s and step_extra_s in turn): the default cut, a cut holding no
        block, and per kind a cut whose first rank holds that kind's share (_shares). A stage's price
        reads only its rank's work and the run, so each rank is priced as it would be alone."""
        if self._row is None or self._row[0] != mapping:
            kinds = len(self.kinds)
            counts = np.zeros((2 + kinds, mapping.pp, kinds), dtype=np.int64)
            counts[0] = self._default_counts(mapping, derived)[0]
            counts[2 + np.arange(kinds), 0, np.arange(kinds)] = self._shares(mapping)
            self._row = (mapping, self._priced_cuts(mapping, derived, counts))
        return self._row[1]

    def edge_times_s(self, mapping: Mapping, derived: Derived) -> list[float]:
        """Seconds of each pipeline rank holding no block: embedding on the first, head, loss and MTP
        on the last (the solver's stage time is this edge plus its blocks' times)."""
        return [float(x) for x in self._row_prices(mapping, derived)["stage"][1]]

    def block_times_s(self, mapping: Mapping, derived: Derived, blocks: list[Block]) -> list[float]:
        """Seconds each block kind adds to a stage, linearised at the stage's typical load: the first
        rank's time with its share (blocks of that kind / PP) of the kind, less the empty rank, per
        block. Stage pricing is nearly linear in its blocks (compute-bound GEMMs, communication hidden
        up to a window); the solver adds these up, `step_time` prices the exact stage."""
        kinds = list(self.kinds)
        first, shares = self._row_prices(mapping, derived)["stage"][:, 0], self._shares(mapping)
        empty = float(first[1])
        return [(float(first[2 + j]) - empty) / int(shares[j]) for j in (kinds.index(block_kind(b)) for b in blocks)]

    def step_extra_s(self, mapping: Mapping, derived: Derived) -> float:
        """Per-step seconds outside the pipeline: exposed sends, gradient reduction, optimizer."""
        prices = self._row_prices(mapping, derived)
        return float(prices["step"][0] - prices["pipeline"][0])
