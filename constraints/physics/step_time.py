"""Step time of one mapping: per-stage compute, communication on the real links, and the schedule.

The model in four parts (every coefficient in hardware/calibration.py, with unit, default, source):

1. Compute per microbatch per pipeline stage, from the blocks the stage holds (constraints/physics/flops.py):
   dense GEMMs at e_gemm of the BF16 peak, FP8 and FP4 GEMMs faster by Amdahl shares of their
   peaks; routed experts as grouped GEMMs whose efficiency falls with tokens per expert,
   eff(t) = e_gemm·t/(t + t_half); every GEMM pass at least as long as its weight traffic (read,
   and the main-gradient accumulation of the weight gradient); flash attention at e_attn of the
   BF16 peak (or, for attention variants without a fused kernel, the S×S scores through HBM);
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

from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import groupby

import numpy as np

from parasol.constraints.physics.comm import (
    NO_COMM,
    CommTerm,
    GroupLink,
    all_gather,
    all_to_all,
    deduplicated_dispatch,
    group_link,
    point_to_point,
    reduce_scatter,
    ring_all_reduce,
)
from parasol.constraints.physics.flops import (
    BACKWARD_TO_FORWARD,
    block_flops,
    hardware_flops_per_token,
    head_flops,
    model_flops_per_token,
    recomputed_flops,
)
from parasol.constraints.physics.memory import block_kind, stage_block_ranges
from parasol.constraints.physics.routing_load import hot_rank_skew
from parasol.hardware.calibration import StepCoefficients, coefficients_for_gpu
from parasol.problems.derived import Derived
from parasol.problems.mapping import Mapping, RankOrder, Recompute
from parasol.problems.model.architecture import (
    CSA_RATIO,
    Block,
    BlockKind,
    DSV4Attention,
    GQAAttention,
    MLAAttention,
    ModelArchitecture,
)
from parasol.problems.model.params import block_params
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import Optimizer, Training

BF16_BYTES = 2
FP32_BYTES = 4
ATTENTION_BACKWARD = 2.5
"""Flash-attention backward over forward time: five matmuls against two, the 2.5× FlashAttention-2
counts for its backward pass (Dao 2023, arXiv 2307.08691)."""
MEMORY_BACKWARD = 2.0
"""Memory-bound backward over forward: each kernel reads its saved input and writes a gradient."""
ADAM_BYTES_PER_PARAM = 30
"""Optimizer HBM traffic per local parameter shard: read FP32 master, FP32 grad, m, v (16 B), write master,
m, v (12 B) and the BF16 copy (2 B)."""
MUON_BYTES_PER_PARAM = 22
"""Muon: read FP32 master, grad and momentum (12 B), write master and momentum (8 B) and the BF16 copy (2 B);
its Newton–Schulz iterations are priced as GEMMs."""
NEWTON_SCHULZ_STEPS = 5
"""Muon's orthogonalisation iterations (Jordan et al. 2024; Megatron's default)."""
PRECISIONS = ("bf16", "fp8", "fp4")
"""GEMM precisions, in the order of StepSettings.precision levels."""
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1 / 16}
"""Bytes per weight a GEMM reads, by precision: FP8 and FP4 weights are cast once per step and cached
(Transformer Engine); NVFP4 adds one FP8 scale per 16 values."""
BREAKDOWN_KINDS = ("compute", "tp", "cp", "ep", "pp", "dp_dense", "dp_expert", "optimizer", "bubble")


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
    dispatch_amplification: float = 1.0
    """EP bytes sent over the balanced k·T·h: the capacity factor when expert buffers are fixed-size
    (seed 003 §4: a fixed-size whole-group all-to-all moves at least CF times the ideal)."""
    fixed_size_all_to_all: bool = False
    """The collective sends fixed buffers whatever the routing, so routing skew does not change its bytes."""


def settings_for(problem, options: MegatronOptions | None = None) -> StepSettings:  # noqa: ANN001 - Problem
    """Settings from a problem's training section and Megatron options (the problem's unless given)."""
    training: Training = problem.training
    opts = options if options is not None else problem.spec.framework.options
    fixed = problem.hardware.topology.fixed_size_all_to_all
    amplification = training.capacity_factor or (training.dispatch_headroom if fixed else 1.0)
    return StepSettings(precision=training.precision.value,
                        grad_reduce_bytes=FP32_BYTES if training.grad_dtype == "fp32" else BF16_BYTES,
                        dispatcher=opts.moe_token_dispatcher_type, dispatch_amplification=amplification,
                        fixed_size_all_to_all=fixed)


# ---- memory-bound traffic --------------------------------------------------------------------


def _rope_width(model: ModelArchitecture) -> tuple[int, int]:
    """Query and key widths that rotary embedding reads and writes."""
    att = model.attention
    if isinstance(att, GQAAttention):
        return att.num_heads * att.head_dim, att.num_kv_heads * att.head_dim
    if isinstance(att, MLAAttention):
        return att.num_heads * att.qk_rope_head_dim, att.qk_rope_head_dim
    assert isinstance(att, DSV4Attention)
    return att.num_heads * att.qk_rope_head_dim, att.qk_rope_head_dim


def _attention_out_width(model: ModelArchitecture) -> int:
    """Width of the attention output that the output projection reads."""
    att = model.attention
    if isinstance(att, MLAAttention):
        return att.num_heads * att.v_head_dim
    return att.num_heads * att.head_dim


def block_memory_bytes(model: ModelArchitecture, block: Block, tokens: float, tp: int, sp: bool,
                       low_precision: bool) -> float:
    """Forward HBM bytes of the memory-bound kernels of one block on one rank for `tokens` tokens.

    Counted in BF16 elements read + written: two norms (4h), two residual adds (6h), mHC stream mixing
    (6·m·h, V4), rotary embedding on q and k, the MLP activation (3f gated, 2f plain), casts of GEMM
    inputs to FP8/FP4 (read 2 B, write 1 B, for inputs not fused into a norm), and for MoE blocks the
    router logits (FP32), token permute/unpermute and dispatch staging (2h + 6kh) and the experts'
    activation (k·3f)."""
    h = model.hidden_size
    sp_split = tp if sp and tp > 1 else 1
    ts = tokens / sp_split
    elems = (4 * h + 6 * h) * ts
    if model.hc_mult > 1:
        elems += 6 * model.hc_mult * h * ts
    q_rope, k_rope = _rope_width(model)
    elems += 2 * (q_rope + k_rope) / tp * tokens
    cast = _attention_out_width(model) / tp * tokens
    if block.mlp is BlockKind.dense:
        mlp = model.dense_mlp
        assert mlp is not None
        f = mlp.intermediate_size / tp
        elems += (3 if mlp.activation.gated else 2) * f * tokens
        cast += f * tokens
    else:
        moe = model.moe
        assert moe is not None
        k = moe.top_k
        elems += 2 * FP32_BYTES / BF16_BYTES * moe.num_experts * ts
        elems += (2 * h + 6 * k * h) * ts
        fe = moe.expert_intermediate_size
        elems += (3 if moe.activation.gated else 2) * k * fe * ts
        cast += k * (h + fe) * ts
        if moe.shared_width:
            fs = moe.shared_width / tp
            elems += (3 if moe.activation.gated else 2) * fs * tokens
            cast += fs * tokens
    bytes_ = BF16_BYTES * elems
    if low_precision:
        bytes_ += (BF16_BYTES + 1) * cast
    return bytes_


UNFUSED_SCORE_BYTES = 8
"""Forward HBM bytes per attention score of an unfused attention: BF16 scores written (2), read and
written by the masked softmax (4), read by the probabilities × V matmul (2)."""


def unfused_attention_bytes(model: ModelArchitecture, tokens: float, tp: int, seq_len: int) -> float:
    """Forward HBM traffic of materialised S×S attention scores on one rank: heads/TP × S keys per token."""
    return UNFUSED_SCORE_BYTES * model.attention.num_heads / tp * seq_len * tokens


def loss_memory_bytes(model: ModelArchitecture, tokens: float, tp: int) -> float:
    """Forward HBM bytes of the output layer's loss per rank: FP32 logits written and read, BF16 gradient
    written (vocab-parallel cross entropy computes it in the forward)."""
    return (2 * FP32_BYTES + BF16_BYTES) * model.vocab_size / tp * tokens


def embedding_memory_bytes(model: ModelArchitecture, tokens: float, tp: int, sp: bool) -> float:
    """Embedding lookup: a row read and written per token (first stage)."""
    sp_split = tp if sp and tp > 1 else 1
    return 2 * BF16_BYTES * model.hidden_size * model.hc_mult * tokens / sp_split


# ---- communication volumes -------------------------------------------------------------------


@dataclass(frozen=True)
class Links:
    """The links of every group kind under one mapping."""

    tp: GroupLink
    cp: GroupLink
    ep: GroupLink
    pp: GroupLink
    dp_cp: GroupLink
    dp_expert: GroupLink


def links_for(topology, mapping: Mapping) -> Links:  # noqa: ANN001 - ClusterTopology
    """Place every group of the mapping on the cluster (worst group of each kind). Placement depends
    only on the grid sizes and the rank order, so rows differing in recompute, VPP, MBS or cut share
    one placement (cached: placing groups dominated large searches)."""
    return _placed_links(topology, mapping.gpus, mapping.tp, mapping.cp, mapping.pp, mapping.ep, mapping.expert_tp,
                         RankOrder(mapping.rank_order))


@lru_cache(maxsize=4096)
def _placed_links(topology, gpus: int, tp: int, cp: int, pp: int, ep: int, etp: int,  # noqa: ANN001
                  order: RankOrder) -> Links:
    """links_for on the grid sizes alone."""
    grid = Mapping(gpus=gpus, tp=tp, cp=cp, pp=pp, ep=ep, etp=etp, rank_order=order, gbs=1, seq_len=1)
    return Links(*(group_link(topology, grid, kind) for kind in ("tp", "cp", "ep", "pp", "dp_cp", "dp_expert")))


def tp_comm(model: ModelArchitecture, block: Block | None, tokens: float, tp_link: GroupLink, sp: bool) -> CommTerm:
    """TP collectives of one block's forward (or, for block None, the output head's input gather).

    With sequence parallelism each TP region is entered with an all-gather and left with a
    reduce-scatter of the b·S/CP × h activation; without it, one all-reduce per region. A dense
    block has two regions (attention, MLP); an MoE block has attention plus the shared experts."""
    if tp_link.size <= 1:
        return NO_COMM
    nbytes = tokens * model.hidden_size * BF16_BYTES
    if block is None:
        return all_gather(nbytes, tp_link) if sp else NO_COMM
    regions = 2 if block.mlp is BlockKind.dense or (model.moe and model.moe.shared_width) else 1
    if sp:
        return (all_gather(nbytes, tp_link) + reduce_scatter(nbytes, tp_link)).scaled(regions)
    return ring_all_reduce(nbytes, tp_link).scaled(regions)


def cp_comm(model: ModelArchitecture, block: Block, tokens: float, tp: int, cp_link: GroupLink) -> CommTerm:
    """CP exchange of one block's forward attention.

    GQA/MLA (ring attention, --cp-comm-type p2p): CP−1 steps, each passing the local K and V chunk
    (MLA: per-head keys and values after the up-projection). V4 hybrid: the compressed KV entries
    (and CSA index keys) are all-gathered and the sliding window's halo rows come from the previous
    rank."""
    cp = cp_link.size
    if cp <= 1:
        return NO_COMM
    att = model.attention
    if isinstance(att, GQAAttention):
        width = 2 * max(att.num_kv_heads / tp, 1) * att.head_dim
        return point_to_point(tokens * width * BF16_BYTES, cp_link).scaled(cp - 1)
    if isinstance(att, MLAAttention):
        width = att.num_heads / tp * (att.qk_nope_head_dim + att.qk_rope_head_dim + att.v_head_dim)
        return point_to_point(tokens * width * BF16_BYTES, cp_link).scaled(cp - 1)
    assert isinstance(att, DSV4Attention)
    ratio = block.compress_ratio or 0
    halo = point_to_point(att.sliding_window * att.head_dim * BF16_BYTES, cp_link)
    if not ratio:
        return halo
    width = att.head_dim + (att.index_head_dim if ratio == CSA_RATIO else 0)
    return halo + all_gather(cp * tokens / ratio * width * BF16_BYTES, cp_link)


def ep_comm(model: ModelArchitecture, tokens: float, tp: int, etp: int, ep_link: GroupLink, skew: float,
            dispatcher: str) -> CommTerm:
    """EP dispatch plus combine of one MoE block's forward, by Megatron token dispatcher, for the rank's
    T = b·S/(CP·TP) tokens (ETP copies each) of h BF16 values, the busiest rank receiving `skew`×:

    - alltoall: two all-to-alls of k·T·h values per rank;
    - flex (DeepEP, Hybrid-EP): two deduplicating hierarchical dispatches (constraints/physics/comm.py);
    - allgather: every rank gathers the whole EP group's T·h tokens and reduce-scatters the outputs."""
    moe = model.moe
    if moe is None or ep_link.size <= 1:
        return NO_COMM
    token_bytes = tokens / tp * etp * model.hidden_size * BF16_BYTES * skew
    if dispatcher == "flex":
        return deduplicated_dispatch(token_bytes, moe.top_k, ep_link).scaled(2)
    if dispatcher == "allgather":
        gathered = token_bytes * ep_link.size
        return all_gather(gathered, ep_link) + reduce_scatter(gathered, ep_link)
    return all_to_all(moe.top_k * token_bytes, ep_link).scaled(2)


def pp_comm(model: ModelArchitecture, tokens: float, tp: int, sp: bool, pp_link: GroupLink) -> CommTerm:
    """One stage boundary per microbatch: the activation forward and its gradient backward (hc_mult streams)."""
    if pp_link.size <= 1:
        return NO_COMM
    sp_split = tp if sp and tp > 1 else 1
    nbytes = tokens / sp_split * model.hidden_size * model.hc_mult * BF16_BYTES
    return point_to_point(nbytes, pp_link).scaled(2)


def dp_comm(params: float, grad_bytes: int, link: GroupLink, distributed: bool) -> tuple[CommTerm, CommTerm]:
    """(gradient reduction, parameter gather) of `params` local parameters over a DP group per step:
    reduce-scatter + BF16 all-gather with the distributed optimizer, else one all-reduce."""
    if link.size <= 1 or params <= 0:
        return NO_COMM, NO_COMM
    if distributed:
        return reduce_scatter(params * grad_bytes, link), all_gather(params * BF16_BYTES, link)
    return ring_all_reduce(params * grad_bytes, link), NO_COMM


def newton_schulz_flops(model: ModelArchitecture, block: Block) -> tuple[float, float]:
    """Muon orthogonalisation FLOPs of one block's (dense, routed) matrices per step, before sharding.

    Each a×b matrix (a ≤ b) costs NEWTON_SCHULZ_STEPS × (4·a²·b + 2·a³) (X·Xᵀ, the a×a polynomial and
    its product with X). Attention is taken as four h-wide matrices; experts as up, gate and down."""
    h = model.hidden_size
    bp = block_params(model, block)

    def cost(params: float, matrices: int) -> float:
        """Newton–Schulz FLOPs of `matrices` equal matrices holding `params` weights in all."""
        per = params / matrices
        a = min(h, per / h)
        return matrices * NEWTON_SCHULZ_STEPS * (4 * a * per + 2 * a ** 3) if per > 0 else 0.0

    dense = cost(bp.attention, 4)
    if bp.dense_mlp:
        assert model.dense_mlp is not None
        dense += cost(bp.dense_mlp, model.dense_mlp.activation.matrices)
    routed = 0.0
    if bp.num_experts:
        assert model.moe is not None
        mats = model.moe.activation.matrices
        dense += cost(bp.shared_experts, mats) if bp.shared_experts else 0.0
        routed = bp.num_experts * cost(bp.per_expert, mats)
    return dense, routed


# ---- the workload of one mapping -------------------------------------------------------------


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
    ep: CommTerm = NO_COMM
    r_comm: CommTerm = NO_COMM
    dense_weights: float = 0.0
    expert_weights: float = 0.0
    ns_dense: float = 0.0
    ns_routed: float = 0.0

    def add_block(self, ctx: _StageContext, b: Block, count: int = 1) -> None:
        """Add `count` copies of one block's GEMMs, attention, memory traffic, TP/CP/EP exchanges and
        recompute (the solver prices a stage as kinds × counts, so equal blocks are priced once)."""
        model, m, settings = ctx.model, ctx.mapping, ctx.settings
        sp = ctx.training.sequence_parallel
        bp = block_params(model, b)
        self.dense_weights += count * ((bp.attention + bp.dense_mlp + bp.shared_experts) / m.tp + bp.router + bp.extra)
        self.expert_weights += count * float(ctx.derived.experts_per_rank or 0) * bp.per_expert / m.expert_tp
        bf = block_flops(model, b, m.seq_len)
        share = count * ctx.tokens / m.tp
        nbytes = block_memory_bytes(model, b, ctx.tokens, m.tp, sp, settings.precision != "bf16")
        if settings.unfused_attention:
            bf = replace(bf, attention_core=2 * bf.attention_core)
            nbytes += unfused_attention_bytes(model, ctx.tokens, m.tp, m.seq_len)
        nbytes *= count
        self.gemm += bf.gemm * share
        self.grouped += bf.routed_gemm * share
        self.attention += bf.attention_core * share
        self.memory += nbytes
        block_tp = tp_comm(model, b, ctx.tokens, ctx.links.tp, sp).scaled(count)
        received = settings.dispatch_amplification * (1.0 if settings.fixed_size_all_to_all else settings.hot_expert_skew)
        block_ep = NO_COMM if b.mlp is not BlockKind.moe else ep_comm(
            model, ctx.tokens, m.tp, m.expert_tp, ctx.links.ep, received, settings.dispatcher).scaled(count)
        self.tp, self.ep = self.tp + block_tp, self.ep + block_ep
        self.cp = self.cp + cp_comm(model, b, ctx.tokens, m.tp, ctx.links.cp).scaled(count)
        again = recomputed_flops(m.recompute, tuple(ctx.training.recompute_modules), bf)
        self.r_gemm += again.gemm * share
        self.r_grouped += again.routed_gemm * share
        self.r_attention += again.attention_core * share
        if m.recompute is Recompute.full:
            self.r_memory += nbytes
            self.r_comm = self.r_comm + block_tp + block_ep
        if ctx.training.optimizer is Optimizer.muon:
            nd, nr = newton_schulz_flops(model, b)
            self.ns_dense, self.ns_routed = self.ns_dense + count * nd / m.tp, self.ns_routed + count * nr

    def add_edges(self, ctx: _StageContext, first: bool, last: bool) -> None:
        """The embedding lookup on the first stage; the output head and loss (once per MTP block too) on the last."""
        model, m = ctx.model, ctx.mapping
        sp = ctx.training.sequence_parallel
        if first:
            self.memory += embedding_memory_bytes(model, ctx.tokens, m.tp, sp)
        if last:
            heads = 1 + model.mtp_layers
            self.gemm += heads * head_flops(model) * ctx.tokens / m.tp
            self.dense_weights += model.vocab_size * model.hidden_size / m.tp
            self.memory += heads * loss_memory_bytes(model, ctx.tokens, m.tp)
            self.tp = self.tp + tp_comm(model, None, ctx.tokens, ctx.links.tp, sp).scaled(heads)


def _data_parallel_terms(ctx: _StageContext, sums: _StageSums, first: bool) -> dict:
    """Per-step gradient reduction and parameter gathers (or per-microbatch FSDP gathers) of a stage's
    parameters over the dense (D_a·CP) and expert (D_e) DP groups, and its optimizer traffic and FLOPs."""
    model, m, d, training, settings = ctx.model, ctx.mapping, ctx.derived, ctx.training, ctx.settings
    embedding = (model.vocab_size + model.learned_position_embeddings) * model.hidden_size / m.tp if first else 0.0
    dense, expert = sums.dense_weights + embedding, sums.expert_weights
    trainable = (0.0, 0.0) if settings.frozen_weights else (dense, expert)
    wire = settings.grad_reduce_bytes
    terms: dict = dict.fromkeys(("fsdp_gather", "fsdp_reduce", "dp_dense_reduce", "dp_dense_gather",
                                 "dp_expert_reduce", "dp_expert_gather"), NO_COMM)
    if settings.fsdp:
        terms["fsdp_gather"] = all_gather(dense * BF16_BYTES, ctx.links.dp_cp) + \
            all_gather(expert * BF16_BYTES, ctx.links.dp_expert)
        terms["fsdp_reduce"] = reduce_scatter(trainable[0] * wire, ctx.links.dp_cp) + \
            reduce_scatter(trainable[1] * wire, ctx.links.dp_expert)
    else:
        distributed = training.distributed_optimizer
        terms["dp_dense_reduce"], terms["dp_dense_gather"] = dp_comm(trainable[0], wire, ctx.links.dp_cp, distributed)
        terms["dp_expert_reduce"], terms["dp_expert_gather"] = dp_comm(trainable[1], wire, ctx.links.dp_expert,
                                                                       distributed)
    dense_shard, expert_shard = float(d.dp_attn * m.cp), float(d.dp_expert)
    sharded = training.distributed_optimizer or settings.fsdp
    local = trainable[0] / (dense_shard if sharded else 1.0) + trainable[1] / (expert_shard if sharded else 1.0)
    per_param = MUON_BYTES_PER_PARAM if training.optimizer is Optimizer.muon else ADAM_BYTES_PER_PARAM
    routed_here = float(d.experts_per_rank or 0) / (model.moe.num_experts if model.moe else 1)
    ns = 0.0 if settings.frozen_weights else sums.ns_dense / dense_shard + sums.ns_routed * routed_here / expert_shard
    terms["optimizer_bytes"] = local * per_param
    terms["optimizer_flops"] = ns
    return terms


def _stage_work(model: ModelArchitecture, m: Mapping, d: Derived, training: Training, settings: StepSettings,
                links: Links, held: list[Block], first: bool, last: bool) -> StageWork:
    """Work of one pipeline rank holding `held` blocks (MTP blocks included on the last stage)."""
    ctx = _StageContext(model, m, d, training, settings, links)
    sums = _StageSums()
    for b, run in groupby(held):
        sums.add_block(ctx, b, sum(1 for _ in run))
    sums.add_edges(ctx, first, last)
    return StageWork(
        blocks=len(held), moe_blocks=sum(b.mlp is BlockKind.moe for b in held),
        dense_weights=sums.dense_weights, expert_weights=sums.expert_weights, gemm_flops=sums.gemm,
        grouped_flops=sums.grouped, attention_flops=sums.attention, memory_bytes=sums.memory,
        recompute_gemm_flops=sums.r_gemm, recompute_grouped_flops=sums.r_grouped,
        recompute_attention_flops=sums.r_attention, recompute_memory_bytes=sums.r_memory,
        tp=sums.tp, cp=sums.cp, ep=sums.ep, recompute_comm=sums.r_comm, **_data_parallel_terms(ctx, sums, first),
    )


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
    m, d = mapping, derived
    gpu = problem.hardware.gpu
    links = links or links_for(problem.hardware.topology, m)
    ranges = stage_block_ranges(d.layout, m.pp)
    all_blocks = [*model.blocks, *model.mtp_blocks]
    stages = []
    for s in range(m.pp):
        last = s == m.pp - 1
        held = [all_blocks[i] for i in ranges[s]] + (list(model.mtp_blocks) if last else [])
        stages.append(_stage_work(model, m, d, training, settings, links, held, s == 0, last))
    tokens = m.mbs * m.seq_len / m.cp
    modules = tuple(training.recompute_modules)
    return Workload(
        stages=tuple(stages), microbatches=float(d.num_microbatches), pp=m.pp, vpp=m.vpp,
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
    )


# ---- batched pricing -------------------------------------------------------------------------

COMM_FIELDS = ("tp", "cp", "ep", "recompute_comm", "fsdp_gather", "fsdp_reduce", "dp_dense_reduce",
               "dp_dense_gather", "dp_expert_reduce", "dp_expert_gather")
STAGE_FIELDS = ("blocks", "moe_blocks", "dense_weights", "expert_weights", "gemm_flops", "grouped_flops", "attention_flops", "memory_bytes", "recompute_gemm_flops",
                "recompute_grouped_flops", "recompute_attention_flops", "recompute_memory_bytes",
                "optimizer_bytes", "optimizer_flops")
RUN_FIELDS = ("microbatches", "pp", "vpp", "tokens_per_expert", "skew", "weight_bytes", "main_grad_bytes",
              "precision_level", "peak_flops", "fp8_flops", "bf16_flops",
              "hbm_bytes_per_s", "tokens_per_step", "gpus", "model_flops_per_token", "hardware_flops_per_token")


@dataclass(frozen=True)
class WorkloadBatch:
    """Workloads of several runs as arrays: per-stage fields (runs × max stages, zero-padded), per-run fields."""

    stage: dict[str, np.ndarray]
    comm: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    run: dict[str, np.ndarray]
    p2p: tuple[np.ndarray, np.ndarray, np.ndarray]
    mask: np.ndarray
    frozen: np.ndarray

    @property
    def size(self) -> int:
        return int(self.mask.shape[0])


def _term_arrays(terms: list[list[CommTerm]], width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nvlink, network, latency) seconds of per-stage comm terms, zero-padded to `width` stages."""
    out = [np.zeros((len(terms), width)) for _ in range(3)]
    for i, row in enumerate(terms):
        for j, t in enumerate(row):
            out[0][i, j], out[1][i, j], out[2][i, j] = t.nvlink_s, t.network_s, t.latency_s
    return out[0], out[1], out[2]


def batch(workloads: list[Workload]) -> WorkloadBatch:
    """Stack workloads for vectorised pricing."""
    width = max(len(w.stages) for w in workloads)
    n = len(workloads)
    stage = {f: np.zeros((n, width)) for f in STAGE_FIELDS}
    mask = np.zeros((n, width), dtype=bool)
    for i, w in enumerate(workloads):
        for j, s in enumerate(w.stages):
            mask[i, j] = True
            for f in STAGE_FIELDS:
                stage[f][i, j] = getattr(s, f)
    comm = {f: _term_arrays([[getattr(s, f) for s in w.stages] for w in workloads], width) for f in COMM_FIELDS}
    p2p = tuple(np.array([getattr(w.p2p, a) for w in workloads]) for a in ("nvlink_s", "network_s", "latency_s"))
    run = {f: np.array([float(getattr(w, f)) for w in workloads]) for f in RUN_FIELDS}
    frozen = np.array([w.frozen_weights for w in workloads])
    return WorkloadBatch(stage=stage, comm=comm, run=run, p2p=p2p, mask=mask, frozen=frozen)  # type: ignore[arg-type]


Coefs = dict[str, np.ndarray | float]


def _col(x: np.ndarray | float) -> np.ndarray | float:
    """A per-run value as a column against per-stage arrays."""
    return x[:, None] if isinstance(x, np.ndarray) else x


def _priced(term: tuple[np.ndarray, np.ndarray, np.ndarray], c: Coefs, per_stage: bool = True) -> np.ndarray:
    """Seconds of a comm term at the coefficients' achievable link rates."""
    nv, net, lat = term
    e_nv, e_net = c["nvlink_efficiency"], c["network_efficiency"]
    if per_stage:
        e_nv, e_net = _col(e_nv), _col(e_net)
    return np.maximum(nv / e_nv, net / e_net) + lat


def _hidden(comm: np.ndarray, overlap: np.ndarray | float, window: np.ndarray) -> np.ndarray:
    """Communication hidden behind compute: at most `overlap` of it, and never more than the window."""
    return np.minimum(_col(overlap) * comm, window)


def pipeline_seconds(stage: np.ndarray, m: np.ndarray | float, vpp: np.ndarray | float) -> np.ndarray:
    """Pipeline time of m microbatches over stages with per-microbatch times `stage` (runs × stages).

    1F1B: (m−1)·max_s t_s + Σ_s t_s: the slowest stage sets the steady state, fill and drain pass once
    through every stage at its own time. Interleaved with v chunks per rank: m·max_s t_s +
    (Σ_s t_s − max_s t_s)/v. Equal stages give (p−1)/(m+p−1) and (p−1)/(v·m+p−1) of bubble."""
    slowest = stage.max(axis=1)
    total = stage.sum(axis=1)
    return np.where(np.asarray(vpp) > 1, m * slowest + (total - slowest) / vpp, (m - 1) * slowest + total)


def seconds_per_gemm_flop(r: dict[str, np.ndarray], c: Coefs) -> np.ndarray:
    """GEMM seconds per FLOP by precision: 1/(e_gemm·BF16 peak) for BF16; FP8 halves the share
    fp8_tensor_fraction of that time in proportion to its peak (Amdahl), and FP4 does the same to the
    FP8 time with fp4_tensor_fraction."""
    bf16 = 1.0 / (c["gemm_efficiency"] * r["bf16_flops"])
    fp8 = bf16 * (1 - c["fp8_tensor_fraction"] + c["fp8_tensor_fraction"] * r["bf16_flops"] / r["fp8_flops"])
    fp4 = fp8 * (1 - c["fp4_tensor_fraction"] + c["fp4_tensor_fraction"] * r["fp8_flops"] / r["peak_flops"])
    level = r["precision_level"]
    return np.where(level >= 2, fp4, np.where(level >= 1, fp8, bf16))


def _compute_times(b: WorkloadBatch, c: Coefs) -> dict[str, np.ndarray]:
    """Per-stage compute seconds of one microbatch (runs × stages): each kind forward ('gemm', 'grouped',
    'attention', 'memory', 'overhead'), the GEMMs' backward ('gemm_b', 'grouped_b'), 'ideal_grouped'
    (forward + backward at full grouped-GEMM efficiency), 'recompute', and the totals 'forward',
    'backward'."""
    s, r = b.stage, b.run
    sec_per_flop = _col(seconds_per_gemm_flop(r, c))
    tpe = r["tokens_per_expert"]
    grouped_eff = np.where(tpe > 0, tpe / np.maximum(tpe + c["grouped_gemm_half_tokens"], 1e-9), 1.0)
    sec_grouped = sec_per_flop / _col(grouped_eff) * _col(r["skew"])
    sec_attn = _col(1.0 / (r["bf16_flops"] * c["attention_efficiency"]))
    sec_byte = _col(1.0 / (r["hbm_bytes_per_s"] * c["hbm_efficiency"]))
    weight_grads = np.where(b.frozen, 0.0, 1.0)[:, None]
    w_read = _col(r["weight_bytes"]) * sec_byte
    w_accumulate = _col(r["main_grad_bytes"]) * sec_byte * weight_grads

    def gemm_passes(flops: np.ndarray, weights: np.ndarray, sec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) time of GEMMs with `flops` forward FLOPs over `weights` local weights: each
        pass (forward, input gradient, weight gradient) is bound by its FLOPs or by its weight traffic."""
        fwd = np.maximum(flops * sec, weights * w_read)
        wgrad = np.maximum(flops * sec * weight_grads, weights * w_accumulate)
        return fwd, fwd + wgrad

    t: dict[str, np.ndarray] = {}
    t["gemm"], t["gemm_b"] = gemm_passes(s["gemm_flops"], s["dense_weights"], sec_per_flop)
    t["grouped"], t["grouped_b"] = gemm_passes(s["grouped_flops"], s["expert_weights"], sec_grouped)
    t["ideal_grouped"] = sum(gemm_passes(s["grouped_flops"], s["expert_weights"], sec_per_flop * _col(r["skew"])))
    t["attention"] = s["attention_flops"] * sec_attn
    t["memory"] = s["memory_bytes"] * sec_byte
    t["overhead"] = (_col(c["layer_overhead_us"]) * s["blocks"]
                     + _col(c["moe_layer_overhead_us"]) * s["moe_blocks"]) * 1e-6
    t["recompute"] = (s["recompute_gemm_flops"] * sec_per_flop + s["recompute_grouped_flops"] * sec_grouped
                      + s["recompute_attention_flops"] * sec_attn + s["recompute_memory_bytes"] * sec_byte)
    t["forward"] = t["gemm"] + t["grouped"] + t["attention"] + t["memory"] + t["overhead"]
    t["backward"] = (t["gemm_b"] + t["grouped_b"] + ATTENTION_BACKWARD * t["attention"]
                     + MEMORY_BACKWARD * t["memory"] + 2 * t["overhead"] + t["recompute"])
    return t


PASSES_PER_MICROBATCH = {"tp": 2, "recompute_comm": 1, "cp": 3, "ep": 2, "fsdp_gather": 2, "fsdp_reduce": 1}
"""Times each per-microbatch exchange runs: forward and backward (TP, EP, FSDP's parameter gather),
CP's backward moving K, V and their gradients, recompute's extra forward and FSDP's one gradient
reduce-scatter."""


def _exposed_per_microbatch(b: WorkloadBatch, c: Coefs, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Exposed TP, CP, EP and FSDP seconds of one microbatch per stage: forward + backward exchanges
    (CP's backward moves K, V and their gradients), each hidden up to its overlap share and window."""
    compute = t["forward"] + t["backward"]
    n = PASSES_PER_MICROBATCH
    tp = n["tp"] * _priced(b.comm["tp"], c) + n["recompute_comm"] * _priced(b.comm["recompute_comm"], c)
    cp = n["cp"] * _priced(b.comm["cp"], c)
    ep = n["ep"] * _priced(b.comm["ep"], c)
    fsdp = n["fsdp_gather"] * _priced(b.comm["fsdp_gather"], c) + n["fsdp_reduce"] * _priced(b.comm["fsdp_reduce"], c)
    gemm_window = t["gemm"] + t["gemm_b"] + t["grouped"] + t["grouped_b"]
    return {
        "tp": tp - _hidden(tp, c["overlap_tp"], gemm_window),
        "cp": cp - _hidden(cp, c["overlap_cp"], (1 + ATTENTION_BACKWARD) * t["attention"]),
        "ep": ep - _hidden(ep, c["overlap_ep"], compute),
        "fsdp": fsdp - _hidden(fsdp, c["overlap_dp"], compute),
    }


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


def _data_parallel_exposure(b: WorkloadBatch, c: Coefs, t: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Exposed (dense, expert) DP seconds per step: the gradient reduce-scatter hides in the last
    microbatch's backward and the parameter all-gather in the first forward, each up to overlap_dp;
    the slowest stage counts."""
    dense_reduce, expert_reduce = _priced(b.comm["dp_dense_reduce"], c), _priced(b.comm["dp_expert_reduce"], c)
    dense_gather, expert_gather = _priced(b.comm["dp_dense_gather"], c), _priced(b.comm["dp_expert_gather"], c)
    reduce, gather = dense_reduce + expert_reduce, dense_gather + expert_gather
    exposed = reduce - _hidden(reduce, c["overlap_dp"], t["backward"]) + gather - _hidden(
        gather, c["overlap_dp"], t["forward"])
    exposed = np.where(b.mask, exposed, 0.0)
    total = reduce + gather
    dense_share = np.where(total > 0, (dense_reduce + dense_gather) / np.maximum(total, 1e-30), 0.0)
    return (exposed * dense_share).max(axis=1), (exposed * (1 - dense_share)).max(axis=1)


def _optimizer_seconds(b: WorkloadBatch, c: Coefs) -> np.ndarray:
    """Optimizer step of the slowest stage: its state traffic through HBM and Muon's Newton–Schulz GEMMs."""
    s, r = b.stage, b.run
    seconds = (s["optimizer_bytes"] / _col(r["hbm_bytes_per_s"] * c["hbm_efficiency"])
               + s["optimizer_flops"] / _col(r["bf16_flops"] * c["gemm_efficiency"]))
    return np.where(b.mask, seconds, 0.0).max(axis=1)


def price(b: WorkloadBatch, c: Coefs) -> dict[str, np.ndarray]:
    """Step time and its parts for every run of the batch under coefficients `c` (scalars or per-run arrays).

    Returns arrays: per-run 'step', breakdown kinds (BREAKDOWN_KINDS, summing to 'step'), 'pipeline',
    'critical' (the slowest stage), the critical stage's compute parts per step ('gemm', 'grouped',
    'attention', 'memory', 'overhead', 'recompute', 'grouped_loss': time lost to grouped-GEMM
    inefficiency), and per-stage 'forward', 'backward', 'stage' (forward + backward + exposed
    TP/CP/EP/FSDP of one microbatch)."""
    r = b.run
    t = _compute_times(b, c)
    compute = t["forward"] + t["backward"]
    exposed = _exposed_per_microbatch(b, c, t)
    stage = np.where(b.mask, compute + exposed["tp"] + exposed["cp"] + exposed["ep"] + exposed["fsdp"], 0.0)
    m, pp, vpp = r["microbatches"], r["pp"], r["vpp"]
    slowest = stage.max(axis=1)
    crit = (np.arange(b.size), stage.argmax(axis=1))
    pipeline = pipeline_seconds(stage, m, vpp)
    p2p = _priced(b.p2p, c, per_stage=False) * vpp
    exposed_pp = np.where(pp > 1, (m * (1 - c["overlap_pp"]) + (pp - 1)) * p2p, 0.0)
    dp_dense, dp_expert = _data_parallel_exposure(b, c, t)
    optimizer = _optimizer_seconds(b, c)
    grouped = t["grouped"][crit] + t["grouped_b"][crit]
    return {
        "step": pipeline + exposed_pp + dp_dense + dp_expert + optimizer,
        "compute": m * compute[crit],
        "tp": m * exposed["tp"][crit],
        "cp": m * exposed["cp"][crit],
        "ep": m * exposed["ep"][crit],
        "pp": exposed_pp,
        "dp_dense": dp_dense + m * exposed["fsdp"][crit],
        "dp_expert": dp_expert,
        "optimizer": optimizer,
        "bubble": pipeline - m * slowest,
        "pipeline": pipeline,
        "critical": crit[1],
        "forward": t["forward"],
        "backward": t["backward"],
        "stage": stage,
        "grouped_loss": m * (grouped - t["ideal_grouped"][crit]),
        "gemm": m * (t["gemm"][crit] + t["gemm_b"][crit]),
        "grouped": m * grouped,
        "attention": m * t["attention"][crit] * (1 + ATTENTION_BACKWARD),
        "memory": m * t["memory"][crit] * (1 + MEMORY_BACKWARD),
        "overhead": m * t["overhead"][crit] * 3,
        "recompute": m * t["recompute"][crit],
    }


def coefficient_values(coefficients: StepCoefficients) -> Coefs:
    """StepCoefficients as the name → value mapping `price` reads."""
    return dict(coefficients.values())


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
    "Flash attention runs in BF16 whatever the GEMM precision; FP8 and FP4 GEMMs speed up over BF16 "
    "through the Amdahl shares fp8_tensor_fraction and fp4_tensor_fraction of their dense peaks.",
    "TP uses sequence parallelism when the problem says so; CP is ring attention (GQA/MLA) or the V4 "
    "compressed-KV all-gather; EP is an all-to-all with NVLink and NIC shares moving at once.",
    "The data-parallel reduction overlaps the last microbatch's backward and the parameter gather the "
    "first forward (distributed optimizer); FSDP gathers parameters every microbatch.",
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
        compute_parts={k: float(p[k][i]) for k in ("gemm", "grouped", "attention", "memory", "overhead", "recompute")},
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
    covers = len(d.layout) == mapping.pp * mapping.vpp and sum(d.layout) == problem.model.num_layers
    settings = settings_for(problem, options)
    if not (whole and covers and d.num_microbatches > 0) or settings.precision not in problem.hardware.gpu.precisions:
        return None
    return step_time(problem, mapping, derived, coefficients, settings)


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
        self.settings = settings_for(problem, options)
        self.kinds: dict[tuple, Block] = {}
        for b in problem.model.blocks:
            self.kinds.setdefault(block_kind(b), b)
        self._links: dict[Mapping, Links] = {}
        self._workloads: dict[Mapping, Workload] = {}

    def links(self, mapping: Mapping) -> Links:
        """Group placement of a mapping, computed once."""
        if mapping not in self._links:
            self._links[mapping] = links_for(self.problem.hardware.topology, mapping)
        return self._links[mapping]

    def _base(self, mapping: Mapping, derived: Derived) -> Workload:
        """The mapping's workload under its own (or the default) layout, built once."""
        if mapping not in self._workloads:
            self._workloads[mapping] = build_workload(self.problem, mapping, derived, self.settings,
                                                      self.links(mapping))
        return self._workloads[mapping]

    def stage_times_s(self, mapping: Mapping, derived: Derived,
                      stages: list[tuple[int, tuple[int, ...]]]) -> list[float]:
        """Forward + backward + exposed TP/CP/EP/FSDP seconds of one microbatch on each (stage, counts),
        counts in the order of the problem's block kinds (first appearance in the model)."""
        if not stages:
            return []
        base = self._base(mapping, derived)
        reps = list(self.kinds.values())
        model, training, links = self.problem.model, self.problem.training, self.links(mapping)
        settings = routed(self.problem, mapping, self.settings)
        works = []
        for stage, counts in stages:
            last = stage == mapping.pp - 1
            held = [b for b, n in zip(reps, counts, strict=True) for _ in range(n)]
            held += list(model.mtp_blocks) if last else []
            work = _stage_work(model, mapping, derived, training, settings, links, held, stage == 0, last)
            works.append(replace(base, stages=(work,)))
        prices = price(batch(works), coefficient_values(self.coefficients))
        return [float(x) for x in prices["stage"][:, 0]]

    def edge_times_s(self, mapping: Mapping, derived: Derived) -> list[float]:
        """Seconds of each pipeline rank holding no block: embedding on the first, head, loss and MTP
        on the last (the solver's stage time is this edge plus its blocks' times)."""
        zero = (0,) * len(self.kinds)
        return self.stage_times_s(mapping, derived, [(s, zero) for s in range(mapping.pp)])

    def block_times_s(self, mapping: Mapping, derived: Derived, blocks: list[Block]) -> list[float]:
        """Seconds each block kind adds to a stage, linearised at the stage's typical load: the first
        rank's time with its share (blocks of that kind / PP) of the kind, less the empty rank, per
        block. Stage pricing is nearly linear in its blocks (compute-bound GEMMs, communication hidden
        up to a window); the solver adds these up, `step_time` prices the exact stage."""
        keys = [block_kind(b) for b in blocks]
        kinds = list(self.kinds)
        totals = {k: sum(block_kind(b) == k for b in self.problem.model.blocks) for k in kinds}
        zero = (0,) * len(kinds)
        shares = {k: max(round(totals[k] / mapping.pp), 1) for k in keys}
        probes = [(0, zero)] + [(0, tuple(shares[k] if j == k else 0 for j in kinds)) for k in keys]
        times = self.stage_times_s(mapping, derived, probes)
        return [(t - times[0]) / shares[k] for k, t in zip(keys, times[1:], strict=True)]

    def step_extra_s(self, mapping: Mapping, derived: Derived) -> float:
        """Per-step seconds outside the pipeline: exposed sends, gradient reduction, optimizer."""
        prices = price(batch([self._base(mapping, derived)]), coefficient_values(self.coefficients))
        return float(prices["step"][0] - prices["pipeline"][0])
