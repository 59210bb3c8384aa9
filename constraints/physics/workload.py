"""The coefficient-free work of one mapping's step: per pipeline rank its GEMM, grouped-GEMM and attention
FLOPs, memory-bound bytes, the exchanges of every group, recompute, and the per-step data-parallel and
optimizer work; and the run's settings the mapping does not say (precision, dispatcher, FSDP, skew)."""

from __future__ import annotations

from collections import abc
from dataclasses import dataclass, replace
from itertools import groupby
from typing import NamedTuple, TypeVar

from parasol.constraints.physics.activations import saved_bytes_per_token
from parasol.constraints.physics.comm import (
    NO_COMM,
    CommTerm,
    GroupLink,
    all_gather,
    reduce_scatter,
)
from parasol.constraints.physics.dtypes import BF16_BYTES, FP32_BYTES
from parasol.constraints.physics.exchanges import (
    Links,
    cp_parts,
    dispatch_link,
    dp_comm,
    ep_comm,
    links_for,
    pp_comm,
    tp_comm,
)
from parasol.constraints.physics.flops import (
    BACKWARD_TO_FORWARD,
    block_flops,
    hardware_flops_per_token,
    head_flops,
    materialised_core_flops,
    model_flops_per_token,
    newton_schulz_flops,
    recomputed_flops,
)
from parasol.constraints.physics.memory import (
    activation_context,
    block_kind,
    megatron_param_gather,
    rank_holdings,
)
from parasol.constraints.physics.routing_load import hot_rank_skew
from parasol.constraints.physics.traffic import (
    block_memory_bytes,
    embedding_memory_bytes,
    loss_memory_bytes,
    unfused_attention_bytes,
)
from parasol.constraints.physics.weight_format import problem_weight_format
from parasol.hardware.gpu import sm_count
from parasol.problems.derived import Derived
from parasol.problems.mapping import Mapping, Recompute
from parasol.problems.model.architecture import (
    Block,
    BlockKind,
    Mixer,
    ModelArchitecture,
)
from parasol.problems.model.params import block_params
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import Optimizer, Training

T = TypeVar("T")

ADAM_BYTES_PER_PARAM = 30
"""Optimizer HBM traffic per local parameter shard: read FP32 master, FP32 grad, m, v (16 B), write master,
m, v (12 B) and the BF16 copy (2 B)."""


MUON_BYTES_PER_PARAM = 22
"""Muon: read FP32 master, grad and momentum (12 B), write master and momentum (8 B) and the BF16 copy (2 B);
its Newton–Schulz iterations are priced as GEMMs."""


SCHEDULES = ("megatron", "dualpipe", "dualpipev")
"""Pipeline schedules, in the order of Workload.schedule levels."""


PRECISIONS = ("bf16", "fp8", "fp4")
"""GEMM precisions, in the order of StepSettings.precision levels."""


WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1 / 16}
"""Bytes per weight a GEMM reads, by precision: FP8 and FP4 weights are cast once per step and cached
(Transformer Engine); NVFP4 adds one FP8 scale per 16 values."""


@dataclass(frozen=True)
class StepSettings:
    """What a run does that the mapping does not say: GEMM precision, gradient wire format, FSDP, LoRA."""

    precision: str = "bf16"
    """GEMM precision: bf16, fp8 (FP8 and MXFP8 recipes) or fp4 (NVFP4)."""
    grad_reduce_bytes: int = FP32_BYTES
    """Bytes per gradient element in the data-parallel reduction (FP32 4, BF16 2)."""
    fsdp: bool = False
    """Megatron-FSDP: parameters gathered and gradients reduce-scattered every microbatch."""
    frozen_weights: bool = False
    """Base weights frozen (LoRA): no weight gradients, no gradient reduction, no optimizer step for them."""
    hot_expert_skew: float = 1.0
    """Busiest EP rank's tokens over the mean (1.0 = balanced routing, as the measured tables force)."""
    unfused_attention: bool = False
    """Attention materialises the S×S scores (no flash kernel for the attention variant): full S² matmuls
    and the scores' HBM traffic instead of a fused causal kernel."""
    dispatcher: str = "alltoall"
    """Megatron's MoE token dispatcher (--moe-token-dispatcher-type): allgather, alltoall or flex."""
    flex_backend: str = "deepep"
    """The flex dispatcher's backend (--moe-flex-dispatcher-backend; deepep under --moe-enable-deepep)."""
    cp_comm: str = "p2p"
    """Megatron's CP communication type (--cp-comm-type): p2p, a2a, allgather or a2a+p2p."""
    cp_levels: tuple[int, ...] = ()
    """--hierarchical-context-parallel-sizes under a2a+p2p (empty otherwise)."""
    dispatch_amplification: float = 1.0
    """EP bytes sent over the balanced k·T·h: the capacity factor when expert buffers are fixed-size
    (seed 003 §4: a fixed-size whole-group all-to-all moves at least CF times the ideal)."""
    fixed_size_all_to_all: bool = False
    """The collective sends fixed buffers whatever the routing, so routing skew does not change its bytes."""
    tp_overlap: bool = True
    """--tp-comm-overlap: TP all-gathers/reduce-scatters run inside the adjacent GEMMs (userbuffers), for a TP
    group inside one NVLink domain (tp_overlap_applies)."""
    grad_reduce_overlap: bool = True
    """--overlap-grad-reduce: bucketed gradient reductions run during the last microbatch's backward."""
    param_gather_overlap: bool = True
    """--overlap-param-gather: parameter all-gathers run during the first microbatch's forward."""
    p2p_overlap: bool = True
    """--overlap-p2p-communication: steady-state pipeline sends/receives run beside compute."""
    ep_overlap: bool = False
    """--overlap-moe-expert-parallel-comm: one microbatch's dispatch/combine runs behind another's compute."""
    optimizer_offload_fraction: float = 0.0
    """Share of the optimizer state and step on the host (--optimizer-cpu-offload)."""
    offload_modules: tuple[str, ...] = ()
    """Modules whose saved inputs go to the host and back (--fine-grained-activation-offloading)."""
    cpu_offload_layers: int = 0
    """Blocks (the first N) whose saved activations --cpu-offloading sends to the host and back."""
    gemm_gather_bytes: float = BF16_BYTES
    """Bytes per Transformer Engine GEMM weight in the data-parallel (or FSDP) parameter all-gather
    (weight_format.WeightFormat.gather: 1 with FP8 parameters, 2 in BF16)."""


def settings_for(problem, options: MegatronOptions | None = None) -> StepSettings:  # noqa: ANN001 - Problem
    """Settings from a problem's training section and Megatron options (the problem's unless given)."""
    training: Training = problem.training
    opts = options if options is not None else problem.spec.framework.options
    fixed = problem.hardware.topology.fixed_size_all_to_all
    amplification = training.capacity_factor or (training.dispatch_headroom if fixed else 1.0)
    return StepSettings(precision=training.precision.value,
                        grad_reduce_bytes=FP32_BYTES if training.grad_dtype == "fp32" else BF16_BYTES,
                        dispatcher=opts.moe_token_dispatcher_type, cp_comm=opts.cp_comm_type,
                        flex_backend="deepep" if opts.moe_enable_deepep else opts.moe_flex_dispatcher_backend,
                        cp_levels=tuple(opts.hierarchical_context_parallel_sizes or ())
                        if opts.cp_comm_type == "a2a+p2p" else (),
                        dispatch_amplification=amplification,
                        fixed_size_all_to_all=fixed, fsdp=training.fsdp != "none",
                        frozen_weights=training.frozen_base_weights,
                        gemm_gather_bytes=float(problem_weight_format(problem, opts).gather),
                        **overlap_settings(training, opts))


def overlap_settings(training: Training, opts: MegatronOptions) -> dict:
    """Which transfers may hide behind compute, from the Megatron flags; an unset flag (None) is parasol's
    choice, on wherever Megatron allows it (TP overlap needs SP and no deterministic mode, arguments.py:1441;
    the parameter gather needs the distributed optimizer or Megatron-FSDP and the gradient reduce's overlap,
    arguments.py:1024-1029; torch FSDP2 prefetches its gathers itself, whatever the flag). DualPipe/DualPipeV
    pair a forward and a backward chunk so that each one's dispatch/combine runs during the other's
    compute (DeepSeek-V3 report §3.2.1)."""
    def chosen(flag: bool | None, allowed: bool) -> bool:
        return allowed if flag is None else flag

    grad_reduce = chosen(opts.overlap_grad_reduce, True)
    gathered = grad_reduce and megatron_param_gather(training)
    return {
        "tp_overlap": chosen(opts.tp_comm_overlap, training.sequence_parallel and not opts.deterministic_mode),
        "grad_reduce_overlap": grad_reduce,
        "param_gather_overlap": True if training.fsdp == "torch-fsdp2" else chosen(opts.overlap_param_gather, gathered),
        "p2p_overlap": opts.overlap_p2p_comm,
        "ep_overlap": opts.overlap_moe_expert_parallel_comm or training.pipeline_schedule != "megatron",
        "optimizer_offload_fraction": opts.optimizer_offload_fraction if opts.optimizer_cpu_offload else 0.0,
        "offload_modules": tuple(opts.offload_modules),
        "cpu_offload_layers": opts.cpu_offloading_num_layers if opts.cpu_offloading and opts.cpu_offloading_activations
        else 0,
    }


USERBUFFERS = ("TransformerEngine@d0067d0 transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers-host.cpp"
               ":233-245,514 (register_user_buffer_collective maps every TP peer's buffer: POSIX-FD IPC or fabric "
               "handles) and transformer_engine/pytorch/module/base.py:305-326 (initialize_ub: a TP group is an "
               "NVLink domain)")
"""Where --tp-comm-overlap's buffers are mapped: over NVLink only."""


def tp_overlap_applies(switch: bool, tp_link: GroupLink) -> bool:
    """Whether --tp-comm-overlap (`switch`) hides a TP group's collectives: only for TP > 1 and inside one NVLink
    domain. At TP 1 Megatron switches sequence parallelism off (arguments.py:1430-1439), which the overlap needs
    (arguments.py:1441), so nothing the TP column carries (at TP 1, the recomputed forward's EP exchanges) hides
    behind the GEMMs. Transformer Engine's userbuffers map every TP peer's buffer into each rank's memory, with IPC
    handles inside a node or fabric handles inside a multi-node NVLink domain (USERBUFFERS); a group that reaches
    over the network runs its collectives exposed. The launch line has the flag only where this holds."""
    return switch and tp_link.size > 1 and tp_link.domains <= 1


@dataclass(frozen=True)
class StageWork:
    """Coefficient-free work of one pipeline rank: forward per microbatch, and per step."""

    blocks: int
    moe_blocks: int
    dense_weights: float
    """GEMM weights on the rank outside routed experts (TP shards, router, output head)."""
    expert_weights: float
    """Routed-expert weights on the rank: MoE blocks × E/EP experts / ETP."""
    gemm_flops: float
    grouped_flops: float
    attention_flops: float
    memory_bytes: float
    recompute_gemm_flops: float
    recompute_grouped_flops: float
    recompute_attention_flops: float
    recompute_memory_bytes: float
    tp: CommTerm
    cp: CommTerm
    """The whole CP exchange; cp_blocking is the part of it no attention hides (exchanges.cp_parts)."""
    ep: CommTerm
    recompute_comm: CommTerm
    fsdp_gather: CommTerm
    fsdp_reduce: CommTerm
    dp_dense_reduce: CommTerm
    dp_dense_gather: CommTerm
    dp_expert_reduce: CommTerm
    dp_expert_gather: CommTerm
    optimizer_bytes: float
    optimizer_flops: float
    optimizer_params: float
    """Trainable parameters whose optimizer step this rank runs (its shard)."""
    offload_bytes: float
    """Activation bytes of one microbatch this rank copies to the host in forward and back in backward."""
    scan_flops: float = 0.0
    """Mamba-2 scan and gated-delta-rule FLOPs (forward, per microbatch)."""
    recompute_scan_flops: float = 0.0
    cp_blocking: CommTerm = NO_COMM
    head_flops: float = 0.0
    """Output-head (logits) GEMM FLOPs, forward per microbatch: Megatron's output layer is a plain
    ColumnParallelLinear, not a Transformer Engine module, so it runs in BF16 whatever the FP8/FP4 recipe
    (megatron/core/models/gpt/gpt_model.py, output_layer)."""


@dataclass(frozen=True)
class Workload:
    """Everything about one mapping's step that the coefficients do not change."""

    stages: tuple[StageWork, ...]
    microbatches: float
    pp: int
    vpp: int
    p2p: CommTerm
    tokens_per_expert: float
    skew: float
    weight_bytes: float
    """Bytes per weight a GEMM reads (BF16 2; cached FP8 1; NVFP4 0.5 plus scales)."""
    main_grad_bytes: float
    """Bytes per weight the weight-gradient GEMM moves accumulating into the main gradient (read + write)."""
    frozen_weights: bool
    precision_level: int
    """0 BF16, 1 FP8, 2 FP4 GEMMs."""
    peak_flops: float
    fp8_flops: float
    bf16_flops: float
    hbm_bytes_per_s: float
    tokens_per_step: float
    gpus: int
    model_flops_per_token: float
    hardware_flops_per_token: float
    precision: str
    tp_overlap: float = 1.0
    grad_reduce_overlap: float = 1.0
    param_gather_overlap: float = 1.0
    p2p_overlap: float = 1.0
    ep_overlap: float = 0.0
    """The overlap switches of StepSettings as 0/1 (pricing multiplies the hideable time by them)."""
    optimizer_offload_fraction: float = 0.0
    schedule: float = 0.0
    """Pipeline schedule: 0 Megatron (1F1B/interleaved), 1 DualPipe, 2 DualPipeV."""
    host_bytes_per_s: float = 64e9
    """GPU to host bandwidth per direction (offloaded activations and optimizer state)."""
    scan_occupancy: float = 1.0
    """Share of the GPU's SMs the Mamba-2 / gated-delta-rule recurrence fills (scan_occupancy)."""


@dataclass(frozen=True)
class _StageContext:
    """What every block of one stage is priced with: the mapping, the run's settings and the links."""

    model: ModelArchitecture
    mapping: Mapping
    derived: Derived
    training: Training
    settings: StepSettings
    links: Links

    @property
    def tokens(self) -> float:
        """Tokens of one microbatch on a rank before TP splits: b·S/CP."""
        return self.mapping.mbs * self.mapping.seq_len / self.mapping.cp


@dataclass
class _StageSums:
    """Running sums of one stage's forward work while its blocks are added."""

    gemm: float = 0.0
    grouped: float = 0.0
    attention: float = 0.0
    memory: float = 0.0
    r_gemm: float = 0.0
    r_grouped: float = 0.0
    r_attention: float = 0.0
    r_memory: float = 0.0
    tp: CommTerm = NO_COMM
    cp: CommTerm = NO_COMM
    cp_blocking: CommTerm = NO_COMM
    ep: CommTerm = NO_COMM
    r_comm: CommTerm = NO_COMM
    dense_weights: float = 0.0
    dense_gemm_weights: float = 0.0
    expert_weights: float = 0.0
    ns_dense: float = 0.0
    ns_routed: float = 0.0
    scan: float = 0.0
    r_scan: float = 0.0
    head: float = 0.0

    def copied(self) -> _StageSums:
        """A copy to add further blocks to (the sums are numbers and unchanged CommTerms)."""
        out = object.__new__(_StageSums)
        out.__dict__.update(self.__dict__)
        return out

    def add_block(self, ctx: _StageContext, b: Block, count: int = 1, known: dict | None = None) -> None:
        """Add `count` copies of one block's GEMMs, attention, memory traffic, TP/CP/EP exchanges and
        recompute (the solver prices a stage as kinds × counts, so equal blocks are priced once). `known`
        holds the additions of blocks already priced under the same context (block_work)."""
        key = (block_kind(b), ctx.model.mtp_shares_weights(b), count)
        work = known.get(key) if known is not None else None
        if work is None:
            work = block_work(ctx, b, count)
            if known is not None:
                known[key] = work
        self.dense_weights += work.dense_weights
        self.dense_gemm_weights += work.dense_gemm_weights
        self.expert_weights += work.expert_weights
        self.gemm += work.gemm
        self.grouped += work.grouped
        self.attention += work.attention
        self.scan += work.scan
        self.memory += work.memory
        self.tp, self.ep = self.tp + work.tp, self.ep + work.ep
        self.cp, self.cp_blocking = self.cp + work.cp, self.cp_blocking + work.cp_blocking
        self.r_gemm += work.r_gemm
        self.r_grouped += work.r_grouped
        self.r_attention += work.r_attention
        self.r_scan += work.r_scan
        if work.full_recompute:
            self.r_memory += work.memory
            self.r_comm = self.r_comm + work.tp + work.ep
        if work.muon:
            self.ns_dense, self.ns_routed = self.ns_dense + work.ns_dense, self.ns_routed + work.ns_routed

    def add_edges(self, ctx: _StageContext, first: bool, last: bool) -> None:
        """The embedding lookup on the first stage; the output head and loss (once per MTP block too) on the last."""
        model, m = ctx.model, ctx.mapping
        sp = ctx.training.sequence_parallel
        if first:
            self.memory += embedding_memory_bytes(model, ctx.tokens, m.tp, sp)
        if last:
            heads = 1 + model.mtp_layers
            self.head += heads * head_flops(model) * ctx.tokens / m.tp
            self.dense_weights += model.vocab_size * model.hidden_size / m.tp
            self.memory += heads * loss_memory_bytes(model, ctx.tokens, m.tp)
            self.tp = self.tp + tp_comm(model, None, ctx.tokens, ctx.links.tp, sp).scaled(heads)


@dataclass(frozen=True)
class _BlockWork:
    """What `count` copies of one block add to each running sum of a stage (_StageSums.add_block)."""

    dense_weights: float
    dense_gemm_weights: float
    """The TP-sharded attention, MLP and shared-expert matrices among dense_weights (Transformer Engine GEMMs)."""
    expert_weights: float
    gemm: float
    grouped: float
    attention: float
    scan: float
    memory: float
    tp: CommTerm
    ep: CommTerm
    cp: CommTerm
    cp_blocking: CommTerm
    r_gemm: float
    r_grouped: float
    r_attention: float
    r_scan: float
    full_recompute: bool
    muon: bool
    ns_dense: float
    ns_routed: float


def block_work(ctx: _StageContext, b: Block, count: int) -> _BlockWork:
    """The additions of `count` copies of block `b` under `ctx`: they read the block's kind (block_kind)
    and whether it is a repeated MTP block, never its position, so equal kinds share them."""
    model, m, settings = ctx.model, ctx.mapping, ctx.settings
    sp = ctx.training.sequence_parallel
    bp = block_params(model, b)
    held = 0 if model.mtp_shares_weights(b) else count
    bf = block_flops(model, b, m.seq_len)
    share = count * ctx.tokens / m.tp
    nbytes = block_memory_bytes(model, b, ctx.tokens, m.tp, sp, settings.precision != "bf16")
    if settings.unfused_attention and b.mixer is Mixer.attention:
        bf = replace(bf, attention_core=materialised_core_flops(model, b, m.seq_len))
        nbytes += unfused_attention_bytes(model, ctx.tokens, m.tp, m.seq_len)
    nbytes *= count
    block_tp = tp_comm(model, b, ctx.tokens, ctx.links.tp, sp).scaled(count)
    block_ep = NO_COMM if b.mlp is not BlockKind.moe else ep_comm(
        model, ctx.tokens, m.tp, m.expert_tp, dispatch_link(ctx.links, settings.dispatcher, settings.flex_backend),
        dispatch_received(settings), settings.dispatcher).scaled(count)
    cp_ring, cp_blocking = cp_parts(model, b, ctx.tokens, m.tp, ctx.links.cp, settings.cp_comm, ctx.links.cp_levels)
    block_cp, block_cp_blocking = (cp_ring + cp_blocking).scaled(count), cp_blocking.scaled(count)
    again = recomputed_flops(m.recompute, tuple(ctx.training.recompute_modules), bf)
    muon = ctx.training.optimizer is Optimizer.muon
    nd, nr = newton_schulz_flops(model, b) if muon else (0, 0)
    tp_split = held * (bp.attention + bp.dense_mlp + bp.shared_experts) / m.tp
    return _BlockWork(
        dense_weights=tp_split + held * (bp.router + bp.extra), dense_gemm_weights=tp_split,
        expert_weights=held * float(ctx.derived.experts_per_rank or 0) * bp.per_expert / m.expert_tp,
        gemm=bf.gemm * share, grouped=bf.routed_gemm * share, attention=bf.attention_core * share,
        scan=bf.scan * share, memory=nbytes, tp=block_tp, ep=block_ep, cp=block_cp,
        cp_blocking=block_cp_blocking,
        r_gemm=again.gemm * share, r_grouped=again.routed_gemm * share, r_attention=again.attention_core * share,
        r_scan=again.scan * share, full_recompute=m.recompute is Recompute.full, muon=muon,
        ns_dense=count * nd / m.tp, ns_routed=count * nr)


DATA_PARALLEL_EXCHANGES = ("fsdp_gather", "fsdp_reduce", "dp_dense_reduce", "dp_dense_gather", "dp_expert_reduce",
                           "dp_expert_gather")
"""The exchanges of a stage's parameters over its data-parallel groups (_data_parallel_terms)."""
DATA_PARALLEL_FIELDS = (*DATA_PARALLEL_EXCHANGES, "optimizer_bytes", "optimizer_flops", "optimizer_params")
"""The StageWork fields _data_parallel_terms gives: the only ones that read PP or the data-parallel groups."""


class StageWeights(NamedTuple):
    """All a stage's data-parallel terms read of its blocks (_data_parallel_terms): the weights it holds, the
    Transformer Engine GEMM share of the dense ones, and their Newton–Schulz FLOPs."""

    dense: float
    expert: float
    ns_dense: float
    ns_routed: float
    dense_gemm: float


def _data_parallel_terms(ctx: _StageContext, weights: StageWeights, first: bool) -> dict:
    """Per-step gradient reduction and parameter gathers (or per-microbatch FSDP gathers) of a stage's
    parameters over the dense (D_a·CP) and expert (D_e) DP groups, and its optimizer traffic and FLOPs
    (DATA_PARALLEL_FIELDS). They read of the settings the FSDP, frozen-weight and gradient-wire switches, of
    the mapping TP, CP, the data-parallel sizes and experts per rank, and the data-parallel links."""
    model, m, d, training, settings = ctx.model, ctx.mapping, ctx.derived, ctx.training, ctx.settings
    embedding = (model.vocab_size + model.learned_position_embeddings) * model.hidden_size / m.tp if first else 0.0
    dense, expert = weights.dense + embedding, weights.expert
    trainable = (0.0, 0.0) if settings.frozen_weights else (dense, expert)
    wire, gemm = settings.grad_reduce_bytes, settings.gemm_gather_bytes
    gathered = ((dense - weights.dense_gemm) * BF16_BYTES + weights.dense_gemm * gemm, expert * gemm)
    terms: dict = dict.fromkeys(DATA_PARALLEL_EXCHANGES, NO_COMM)
    if settings.fsdp:
        terms["fsdp_gather"] = all_gather(gathered[0], ctx.links.dp_cp) + all_gather(gathered[1], ctx.links.dp_expert)
        terms["fsdp_reduce"] = reduce_scatter(trainable[0] * wire, ctx.links.dp_cp) + \
            reduce_scatter(trainable[1] * wire, ctx.links.dp_expert)
    else:
        distributed = training.distributed_optimizer
        terms["dp_dense_reduce"], terms["dp_dense_gather"] = dp_comm(trainable[0], wire, ctx.links.dp_cp, distributed,
                                                                     gathered[0])
        terms["dp_expert_reduce"], terms["dp_expert_gather"] = dp_comm(trainable[1], wire, ctx.links.dp_expert,
                                                                       distributed, gathered[1])
    dense_shard, expert_shard = float(d.dp_attn * m.cp), float(d.dp_expert)
    sharded = training.distributed_optimizer or settings.fsdp
    local = trainable[0] / (dense_shard if sharded else 1.0) + trainable[1] / (expert_shard if sharded else 1.0)
    per_param = MUON_BYTES_PER_PARAM if training.optimizer is Optimizer.muon else ADAM_BYTES_PER_PARAM
    routed_here = float(d.experts_per_rank or 0) / (model.moe.num_experts if model.moe else 1)
    ns = 0.0 if settings.frozen_weights else (weights.ns_dense / dense_shard
                                              + weights.ns_routed * routed_here / expert_shard)
    terms["optimizer_bytes"] = local * per_param
    terms["optimizer_flops"] = ns
    terms["optimizer_params"] = local
    return terms


@dataclass(frozen=True)
class StageBlocks:
    """What a stage's blocks and edges add up to, before its data-parallel terms (stage_work less
    _data_parallel_terms): they read the mapping's TP, CP, MBS, ETP and recompute, the experts per rank, the
    settings and the TP, CP and EP links, never PP or the data-parallel groups. Never changed once built."""

    sums: _StageSums
    blocks: int
    moe_blocks: int
    offloaded: float

    @property
    def weights(self) -> StageWeights:
        """What the stage's data-parallel terms read of it."""
        sums = self.sums
        return StageWeights(sums.dense_weights, sums.expert_weights, sums.ns_dense, sums.ns_routed, sums.dense_gemm_weights)


def _runs(held: list[Block]) -> list[tuple[Block, int]]:
    """The held blocks as runs of equal blocks: (the first, how many)."""
    return [(group[0], len(group)) for group in (list(run) for _, run in groupby(held, key=vars))]


def _runs_key(model: ModelArchitecture, settings: StepSettings, runs: list[tuple[Block, int]]) -> tuple:
    """All a stage reads of its runs of blocks (block_key and counts)."""
    return tuple((block_key(model, settings, b), count) for b, count in runs)


def stage_blocks(model: ModelArchitecture, m: Mapping, d: Derived, training: Training, settings: StepSettings,
                 links: Links, held: list[Block], first: bool, last: bool, known: dict | None = None) -> StageBlocks:
    """The blocks-and-edges half of stage_work (StageBlocks); `known` as stage_work's, and it may be shared by
    every mapping that agrees on what StageBlocks reads."""
    runs = _runs(held)
    return _kept(known, lambda: ("blocks", first, last, _runs_key(model, settings, runs)),
                 lambda: _stage_blocks(_StageContext(model, m, d, training, settings, links), held, runs, first, last,
                                       known))


def _kept(known: dict | None, key: abc.Callable[[], tuple], build: abc.Callable[[], T]) -> T:
    """build()'s value, kept in `known` under key() and read from there again (None: built, not kept)."""
    if known is None:
        return build()
    k = key()
    if k not in known:
        known[k] = build()
    return known[k]


def _stage_blocks(ctx: _StageContext, held: list[Block], runs: list[tuple[Block, int]], first: bool, last: bool,
                  known: dict | None) -> StageBlocks:
    """stage_blocks, computed."""
    sums = _StageSums()
    offloaded = _add_runs(ctx, sums, runs, 0.0, known)
    sums.add_edges(ctx, first, last)
    return StageBlocks(sums, len(held), _moe_blocks(held), offloaded)


def _add_runs(ctx: _StageContext, sums: _StageSums, runs: list[tuple[Block, int]], offloaded: float,
              known: dict | None) -> float:
    """Add the runs' blocks to `sums`; `offloaded` with the bytes they send to the host added, run by run."""
    for b, count in runs:
        sums.add_block(ctx, b, count, known)
        offloaded += count * offloaded_bytes(ctx.model, ctx.mapping, ctx.training, ctx.settings, b)
    return offloaded


def _moe_blocks(held: list[Block]) -> int:
    """How many of the blocks are MoE blocks."""
    return sum(b.mlp is BlockKind.moe for b in held)


def stage_blocks_after(body: StageBlocks, model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                       settings: StepSettings, links: Links, held: list[Block], tail: list[Block], first: bool,
                       last: bool, known: dict | None = None) -> StageBlocks:
    """stage_blocks of `held` then `tail` at this position, from `body` (stage_blocks of `held` on a middle rank:
    no edges, the same other arguments): its sums go on with the tail's runs and then the edges, each sum in
    the order stage_blocks adds to it, so the values are stage_blocks' exactly (computed afresh where the
    tail's first block would join the last run of `held`)."""
    if held and tail and len(_runs([held[-1], tail[0]])) == 1:
        return stage_blocks(model, m, d, training, settings, links, held + tail, first, last, known)
    ctx = _StageContext(model, m, d, training, settings, links)
    sums = body.sums.copied()
    offloaded = _add_runs(ctx, sums, _runs(tail), body.offloaded, known)
    sums.add_edges(ctx, first, last)
    return StageBlocks(sums, body.blocks + len(tail), body.moe_blocks + _moe_blocks(tail), offloaded)


def data_parallel_terms(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                        settings: StepSettings, links: Links, weights: StageWeights, first: bool) -> dict:
    """The data-parallel half of stage_work: its DATA_PARALLEL_FIELDS by name (_data_parallel_terms) for a
    stage holding `weights` (StageBlocks.weights)."""
    return _data_parallel_terms(_StageContext(model, m, d, training, settings, links), weights, first)


def stage_from_parts(blocks: StageBlocks, terms: abc.Mapping[str, float | CommTerm]) -> StageWork:
    """The StageWork of a stage's blocks-and-edges half and its data-parallel terms."""
    return StageWork(**blocks_fields(blocks), **terms)


def blocks_fields(blocks: StageBlocks) -> dict[str, float | CommTerm]:
    """The StageWork fields of a stage's blocks-and-edges half by name: all but DATA_PARALLEL_FIELDS."""
    sums = blocks.sums
    return dict(
        blocks=blocks.blocks, moe_blocks=blocks.moe_blocks,
        dense_weights=sums.dense_weights, expert_weights=sums.expert_weights, gemm_flops=sums.gemm,
        grouped_flops=sums.grouped, attention_flops=sums.attention, memory_bytes=sums.memory,
        recompute_gemm_flops=sums.r_gemm, recompute_grouped_flops=sums.r_grouped,
        recompute_attention_flops=sums.r_attention, recompute_memory_bytes=sums.r_memory,
        tp=sums.tp, cp=sums.cp, ep=sums.ep, recompute_comm=sums.r_comm,
        offload_bytes=blocks.offloaded, scan_flops=sums.scan, recompute_scan_flops=sums.r_scan, head_flops=sums.head,
        cp_blocking=sums.cp_blocking,
    )


def stage_work(model: ModelArchitecture, m: Mapping, d: Derived, training: Training, settings: StepSettings,
                links: Links, held: list[Block], first: bool, last: bool, known: dict | None = None) -> StageWork:
    """Work of one pipeline rank holding `held` blocks (MTP blocks included on the last stage); `known`
    carries block additions and whole stages between the stages of one mapping under the same settings and
    links (a stage reads of its blocks only their runs' kinds and counts, block_key)."""
    runs = _runs(held)

    def build() -> StageWork:
        ctx = _StageContext(model, m, d, training, settings, links)
        blocks = _stage_blocks(ctx, held, runs, first, last, known)
        return stage_from_parts(blocks, _data_parallel_terms(ctx, blocks.weights, first))

    return _kept(known, lambda: ("stage", first, last, _runs_key(model, settings, runs)), build)


def block_key(model: ModelArchitecture, settings: StepSettings, b: Block) -> tuple:
    """All a stage's work reads of one block besides its count: its kind, whether it is a repeated MTP
    block (weights shared) and whether --cpu-offloading sends its activations to the host."""
    return block_kind(b), model.mtp_shares_weights(b), b.index < settings.cpu_offload_layers and not b.mtp


def offloaded_bytes(model: ModelArchitecture, m: Mapping, training: Training, settings: StepSettings,
                    block: Block) -> float:
    """Bytes of one block's saved activations per microbatch sent to the host: all of them for the first
    N blocks under --cpu-offloading, else what the ledger no longer holds for the modules fine-grained
    offloading names."""
    tokens = m.mbs * m.seq_len / m.cp
    if block.index < settings.cpu_offload_layers and not block.mtp:
        return saved_bytes_per_token(model, block, activation_context(m, training)) * tokens
    if not settings.offload_modules:
        return 0.0
    ctx = activation_context(m, training)
    off = replace(ctx, offloaded=frozenset(settings.offload_modules))
    return (saved_bytes_per_token(model, block, ctx) - saved_bytes_per_token(model, block, off)) * tokens


def dispatch_received(settings: StepSettings) -> float:
    """What the busiest EP rank receives over the balanced share: the buffer multiple (capacity factor or
    dispatch headroom) times the hot-rank skew, which a fixed-size all-to-all does not see."""
    return settings.dispatch_amplification * (1.0 if settings.fixed_size_all_to_all else settings.hot_expert_skew)


def scan_parallelism(model: ModelArchitecture, mbs: int, tp: int) -> float:
    """Independent recurrences a rank runs per linear-mixer layer: sequences × heads on the rank (Mamba-2
    heads, gated DeltaNet value heads, split by TP); 0 without such layers."""
    if model.mamba is not None:
        return mbs * model.mamba.num_heads / tp
    if model.linear_attention is not None:
        return mbs * model.linear_attention.num_value_heads / tp
    return 0.0


def scan_occupancy(model: ModelArchitecture, mbs: int, tp: int, sms: int | None) -> float:
    """Share of the SMs the linear-recurrence kernels fill: min(1, sequences × heads / SMs).

    The SSD state passing walks a sequence's chunks one after another, one program per (dim block,
    sequence, head) (mamba_ssm ops/triton/ssd_state_passing.py, _state_passing_fwd_kernel; the chunked
    gated delta rule likewise per sequence and head), so fewer sequence-head pairs than SMs leave SMs
    idle and the scan runs at that share of its efficiency. 1 where the part's SM count is unknown."""
    units = scan_parallelism(model, mbs, tp)
    if not sms or units <= 0:
        return 1.0
    return min(1.0, units / sms)


def routed(problem, mapping: Mapping, settings: StepSettings) -> StepSettings:  # noqa: ANN001 - Problem
    """The settings with the mapping's hot-rank skew under the problem's routing model folded in."""
    return replace(settings, hot_expert_skew=settings.hot_expert_skew * hot_rank_skew(problem, mapping))


def build_workload(problem, mapping: Mapping, derived: Derived,  # noqa: ANN001 - Problem
                   settings: StepSettings | None = None, links: Links | None = None) -> Workload:
    """The coefficient-free workload of `mapping`: per-stage work, communication on the placed groups,
    schedule sizes and peaks. The layout must cover the blocks with PP·VPP stages."""
    model: ModelArchitecture = problem.model
    training: Training = problem.training
    settings = routed(problem, mapping, settings or settings_for(problem))
    links = links or links_for(problem.hardware.topology, mapping, settings.cp_levels)
    all_blocks = [*model.blocks, *model.mtp_blocks]
    stages, known = [], {}
    for r in rank_holdings(derived.layout, mapping.pp, training.pipeline_schedule):
        held = [all_blocks[i] for i in r.blocks] + (list(model.mtp_blocks) if r.last else [])
        stages.append(stage_work(model, mapping, derived, training, settings, links, held, r.first, r.last, known))
    return replace(run_workload(problem, mapping, derived, settings, links), stages=tuple(stages))


def run_workload(problem, mapping: Mapping, derived: Derived,  # noqa: ANN001 - Problem
                 routed_settings: StepSettings, links: Links) -> Workload:
    """The workload's run-level fields (schedule sizes, pipeline sends, precision, peaks) with no stage:
    what pricing reads besides the ranks' work, for callers that supply rank work as vectors
    (pricing.batch_from_vectors). `routed_settings`: the problem's settings after `routed`."""
    model: ModelArchitecture = problem.model
    training: Training = problem.training
    settings, m, d = routed_settings, mapping, derived
    gpu = problem.hardware.gpu
    tokens = m.mbs * m.seq_len / m.cp
    modules = tuple(training.recompute_modules)
    return Workload(
        stages=(), microbatches=float(d.num_microbatches), pp=m.pp, vpp=m.vpp,
        p2p=pp_comm(model, tokens, m.tp, training.sequence_parallel, links.pp),
        tokens_per_expert=float(d.assignments_per_expert) if d.assignments_per_expert is not None else 0.0,
        skew=settings.hot_expert_skew, weight_bytes=WEIGHT_BYTES[settings.precision],
        main_grad_bytes=2 * settings.grad_reduce_bytes, frozen_weights=settings.frozen_weights,
        precision_level=PRECISIONS.index(settings.precision), peak_flops=gpu.peak_flops(settings.precision),
        fp8_flops=gpu.peak_flops("fp8" if "fp8" in gpu.precisions else "bf16"), bf16_flops=gpu.peak_flops("bf16"),
        hbm_bytes_per_s=gpu.hbm_tb_s * 1e12, tokens_per_step=float(m.gbs * m.seq_len), gpus=m.gpus,
        model_flops_per_token=model_flops_per_token(model, m.seq_len) * (
            (1 + 1) / (1 + BACKWARD_TO_FORWARD) if settings.frozen_weights else 1.0),
        hardware_flops_per_token=hardware_flops_per_token(model, m.seq_len, m.recompute, modules),
        precision=settings.precision,
        tp_overlap=float(tp_overlap_applies(settings.tp_overlap, links.tp)),
        grad_reduce_overlap=float(settings.grad_reduce_overlap),
        param_gather_overlap=float(settings.param_gather_overlap), p2p_overlap=float(settings.p2p_overlap),
        ep_overlap=float(settings.ep_overlap), optimizer_offload_fraction=settings.optimizer_offload_fraction,
        host_bytes_per_s=problem.hardware.topology.host_link_gb_s * 1e9,
        schedule=float(SCHEDULES.index(training.pipeline_schedule)),
        scan_occupancy=scan_occupancy(model, m.mbs, m.tp, sm_count(gpu.name)),
    )


STEP_EXCHANGES = ("dp_dense_reduce", "dp_dense_gather", "dp_expert_reduce", "dp_expert_gather")
"""Exchanges that run once per step: the data-parallel gradient reduction and parameter gather."""


def network_bytes_per_step(w: Workload) -> float:
    """Bytes that cross the scale-out network (leave a GPU through its NIC) in one step, summed over
    all GPUs: every pipeline rank's per-microbatch exchanges × m, its per-step DP exchanges, and the
    pipeline sends of its (v·p − 1)/p chunk boundaries per microbatch, times the GPUs per pipeline
    rank (N/PP). Overlap hides time, not bytes, so nothing is discounted."""
    per_rank = 0.0
    for s in w.stages:
        per_rank += w.microbatches * sum(n * getattr(s, k).network_bytes for k, n in PASSES_PER_MICROBATCH.items())
        per_rank += sum(getattr(s, k).network_bytes for k in STEP_EXCHANGES)
    boundaries = (w.vpp * w.pp - 1) / w.pp if w.pp > 1 else 0.0
    per_rank += w.pp * w.microbatches * boundaries * w.p2p.network_bytes
    return per_rank * w.gpus / w.pp


PASSES_PER_MICROBATCH = {"tp": 2, "recompute_comm": 1, "cp": 3, "ep": 2, "fsdp_gather": 2, "fsdp_reduce": 1}
"""Times each per-microbatch exchange runs: forward and backward (TP, EP, FSDP's parameter gather),
CP's backward moving K, V and their gradients, recompute's extra forward and FSDP's one gradient
reduce-scatter."""
