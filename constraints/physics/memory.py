"""The per-stage memory ledger of the heaviest rank: every term named, with its formula and assumption.

M_peak = weights + gradients + optimizer + activations + communication + workspace (seed 000 §显存),
compared with the GPU's usable HBM (HBM minus the runtime reserve of the hardware preset). All ranks
of one pipeline stage hold the same shares under even TP/EP/ETP/DP splits, so the stage's heaviest
rank is any of them. Bytes are exact integers where the formula is; GB are decimal (1e9), as the seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cached_property, lru_cache

from parasol.constraints.physics.activations import (
    ActivationContext,
    logits_bytes_per_token,
    saved_bytes_per_token,
)
from parasol.constraints.physics.dtypes import BF16_BYTES, FP8_BYTES
from parasol.constraints.physics.weight_format import BF16_WEIGHTS, WeightFormat, weight_format
from parasol.problems.derived import Derived, stage_of_virtual
from parasol.problems.mapping import Mapping, Recompute
from parasol.problems.memo import memoised, memoised_by
from parasol.problems.model.architecture import Block, MLAAttention, ModelArchitecture
from parasol.problems.model.params import BlockParams, block_params
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import Optimizer, Precision, Training

NO_OPTIONS = MegatronOptions()
"""Megatron options as a problem that sets none has them (no offloading)."""

GB = 1e9


@dataclass(frozen=True)
class MemoryTerm:
    """One line of the ledger: a named amount with the formula that produced it."""

    name: str
    bytes: float
    formula: str

    @property
    def gb(self) -> float:
        return self.bytes / GB


@dataclass(frozen=True)
class StageLedger:
    """The memory of the heaviest rank of one pipeline stage."""

    stage: int
    blocks: tuple[int, ...]
    moe_blocks: int
    dense_params: float
    expert_params: float
    inflight_microbatches: float
    terms: tuple[MemoryTerm, ...]
    usable_bytes: float

    @cached_property
    def total_bytes(self) -> float:
        """The sum of the terms (kept: the peak, the capacity rule and the contract all read it)."""
        return sum(t.bytes for t in self.terms)

    @property
    def total_gb(self) -> float:
        return self.total_bytes / GB

    @property
    def slack_gb(self) -> float:
        """Usable HBM left over (negative: by how much the stage exceeds it)."""
        return (self.usable_bytes - self.total_bytes) / GB

    def term(self, name: str) -> MemoryTerm:
        return next(t for t in self.terms if t.name == name)


@dataclass(frozen=True)
class MemoryLedger:
    """Ledgers of every stage plus the assumptions they rest on."""

    stages: tuple[StageLedger, ...]
    assumptions: tuple[str, ...]

    @cached_property
    def peak(self) -> StageLedger:
        """The heaviest stage (the first of equals), found once per ledger."""
        return max(self.stages, key=lambda s: (s.total_bytes, -s.stage))


def weight_bytes(params: float, bytes_per_param: int = BF16_BYTES) -> float:
    """Bytes to hold `params` weights (seed 000: 1.6e12 · 2 B = 3.2 TB in BF16)."""
    return params * bytes_per_param


def state_bytes_per_param(grad_dtype: str = "bf16") -> int:
    """Training state per parameter with Adam: BF16 weight 2 + grad 2 (FP32: 4) + FP32 master 4 +
    Adam m and v 8 = 16 B (18 B with FP32 grads), seed 003 §2."""
    return BF16_BYTES + (4 if grad_dtype == "fp32" else BF16_BYTES) + 4 + 8


def training_state_bytes(params: float, grad_dtype: str = "bf16") -> float:
    """Global training state of a model: params · bytes per param (5T: 80 TB, or 90 TB with FP32 grads)."""
    return params * state_bytes_per_param(grad_dtype)


def state_per_device_bytes(params: float, devices: int, grad_dtype: str = "bf16") -> float:
    """That state spread evenly over `devices` (5T on 64 devices: 1.25 TB each), before activations."""
    return training_state_bytes(params, grad_dtype) / devices


def routed_expert_weight_bytes(moe_layers: int, num_experts: int, ep: int, etp: int,
                               params_per_expert: int, bytes_per_param: int = BF16_BYTES) -> float:
    """Routed weights one rank holds: layers·(E/EP)·P_expert/ETP·bytes (seed 000: 8·6·66,060,288·2 = 6.34 GB)."""
    return moe_layers * Fraction(num_experts, ep) * Fraction(params_per_expert, etp) * bytes_per_param


def stage_block_ranges(layout: tuple[int, ...], pp: int) -> list[list[int]]:
    """Block indices each pipeline rank holds: virtual stage k takes the next layout[k] blocks."""
    ranks: list[list[int]] = [[] for _ in range(pp)]
    start = 0
    for k, n in enumerate(layout):
        ranks[stage_of_virtual(k, pp)].extend(range(start, start + n))
        start += n
    return ranks


@dataclass(frozen=True)
class RankHolding:
    """What one pipeline rank holds: its blocks and whether it runs the embedding and the head/loss."""

    blocks: list[int]
    first: bool
    last: bool


def schedule_fits_layout(layout: tuple[int, ...], pp: int, schedule: str) -> bool:
    """Whether the layout has the virtual stages the schedule pairs: DualPipe PP stages with PP even,
    DualPipeV 2·PP chunks; Megatron any PP·VPP (checked by the caller)."""
    if schedule == "dualpipe":
        return len(layout) == pp and pp % 2 == 0
    if schedule == "dualpipev":
        return len(layout) == 2 * pp
    return True


def rank_holdings(layout: tuple[int, ...], pp: int, schedule: str = "megatron") -> list[RankHolding]:
    """Blocks and edges per rank. Megatron: virtual stage k on rank k % PP. DualPipe: PP stages, rank s
    holds stage s and its mirror PP−1−s (two copies of the model; dualpipe/dualpipe.py builds each rank
    from modules[rank] and modules[num_ranks − 1 − rank]). DualPipeV: 2·PP chunks in a V, rank s holds
    chunks s and 2·PP−1−s, so rank 0 runs both the embedding and the loss."""
    if not schedule_fits_layout(layout, pp, schedule):
        raise ValueError(f"{schedule} cannot pair {len(layout)} virtual stages over PP {pp}")
    if schedule == "megatron":
        ranges = stage_block_ranges(layout, pp)
        return [RankHolding(ranges[s], s == 0, s == pp - 1) for s in range(pp)]
    starts = [sum(layout[:k]) for k in range(len(layout))]
    chunk = [list(range(starts[k], starts[k] + layout[k])) for k in range(len(layout))]
    if schedule == "dualpipe":
        return [RankHolding(chunk[s] + chunk[pp - 1 - s], s in (0, pp - 1), s in (0, pp - 1)) for s in range(pp)]
    return [RankHolding(chunk[s] + chunk[2 * pp - 1 - s], s == 0, s == 0) for s in range(pp)]


def schedule_inflight(schedule: str, stage: int, pp: int, vpp: int, m: Fraction | int) -> Fraction:
    """Microbatches in flight in units of the rank's whole layer set. DualPipe and DualPipeV hold PP+1
    stage-microbatches of activations per device, PP counting stages (DualPipe README table, DeepSeek-V3
    report Table 2): a DualPipe rank's set is two of PP stages, a DualPipeV rank's two of 2·PP chunks,
    so (PP+1)/2 and (2·PP+1)/2 sets; a DualPipe microbatch visits one of its two stages."""
    m = Fraction(m)
    if schedule == "dualpipe":
        return min(Fraction(pp + 1, 2), m / 2)
    if schedule == "dualpipev":
        return min(Fraction(2 * pp + 1, 2), m)
    return inflight_microbatches(stage, pp, vpp, m)


@lru_cache(maxsize=8192)
def inflight_microbatches(stage: int, pp: int, vpp: int, m: Fraction | int) -> Fraction:
    """Microbatches whose activations a stage holds at its peak, in units of its whole layer set.
    1F1B: min(PP − s, m) (warm-up depth). Interleaved: Megatron warms up (PP − s − 1)·2 + (v − 1)·PP
    chunks plus one, each 1/v of the rank's layers, capped at all m·v chunks (schedules.py)."""
    m = Fraction(m)
    if vpp == 1:
        return min(Fraction(pp - stage), m)
    chunks = min(Fraction((pp - stage - 1) * 2 + (vpp - 1) * pp + 1), m * vpp)
    return chunks / vpp


def _rank_params(bp: BlockParams, m: Mapping, experts_per_rank: Fraction) -> tuple[Fraction, Fraction, Fraction]:
    """(dense, expert, muon-eligible) parameters of one block on one rank."""
    tp_split = Fraction(bp.attention + bp.dense_mlp + bp.shared_experts, m.tp)
    replicated = Fraction(bp.router + bp.norms + bp.extra)
    expert = experts_per_rank * Fraction(bp.per_expert, m.expert_tp) if bp.num_experts else Fraction(0)
    return tp_split + replicated, expert, tp_split + expert


STATE_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes per value of the precision-aware optimizer's state dtypes (arguments.py:3671-3685)."""


def master_weight_bytes(training: Training, options: MegatronOptions) -> int:
    """Bytes per parameter of the optimizer's master weight. FP32 (4) unless the precision-aware optimizer
    lets Transformer Engine's FusedAdam hold it: FP16 main params (2), or FP32 ones stored as the 16-bit
    remainder beside the BF16 weight (2; store_param_remainders, on by default, optimizer_config.py:192-195)
    wherever TE manages the master weight: no FP8 or delayed-scaling FP8, or optimizer CPU offload
    (optimizer_config.py:407-413, distrib_optimizer.py:1007-1010)."""
    if not options.use_precision_aware_optimizer or training.optimizer is not Optimizer.adam:
        return 4
    if options.main_params_dtype == "fp16":
        return 2
    te_master = (training.precision is not Precision.fp8 or options.fp8_recipe == "delayed"
                 or options.optimizer_cpu_offload)
    return 2 if te_master else 4


def _optimizer_bytes_per_param(training: Training, matrix: bool, options: MegatronOptions = NO_OPTIONS) -> int:
    """Master weight (FP32: 4) plus Adam m, v (FP32: 8) = 12; Muon keeps one momentum (4) on 2-D block
    matrices and falls back to Adam for embeddings, head, norms and routers (seed 003 §2; Muon in Megatron).
    The precision-aware optimizer (Adam only, optimizer_config.py:434-436) stores m and v in
    --exp-avg-dtype / --exp-avg-sq-dtype (DeepSeek-V3 report §3.3.3: BF16 moments, FP32 master: 8 B)."""
    if training.optimizer is Optimizer.muon and matrix:
        return 8
    moments = 8
    if options.use_precision_aware_optimizer and training.optimizer is Optimizer.adam:
        moments = STATE_DTYPE_BYTES[options.exp_avg_dtype] + STATE_DTYPE_BYTES[options.exp_avg_sq_dtype]
    return master_weight_bytes(training, options) + moments


@dataclass(frozen=True)
class Contribution:
    """Whole bytes one block (or a stage's embedding/head extras) adds to a stage's heaviest rank.

    Every amount is rounded up to a whole byte, so a stage's ledger is an exact integer sum that the
    CP-SAT program reproduces from block counts."""

    weights_dense: int = 0
    weights_expert: int = 0
    gradients: int = 0
    optimizer: int = 0
    activation: int = 0
    recompute_peak: int = 0
    moe: bool = False
    dense_params: Fraction = Fraction(0)
    expert_params: Fraction = Fraction(0)

    @property
    def static(self) -> int:
        """Weights, gradients and optimizer state: held whatever the schedule."""
        return self.weights_dense + self.weights_expert + self.gradients + self.optimizer

    def __add__(self, other: Contribution) -> Contribution:
        return Contribution(
            self.weights_dense + other.weights_dense, self.weights_expert + other.weights_expert,
            self.gradients + other.gradients, self.optimizer + other.optimizer,
            self.activation + other.activation, max(self.recompute_peak, other.recompute_peak),
            self.moe or other.moe, self.dense_params + other.dense_params,
            self.expert_params + other.expert_params,
        )

    def holding(self, saved: Contribution) -> Contribution:
        """This parameter state (block_param_state, edge_param_state) with `saved`'s activations and
        recompute working set (block_activations, edge_activations): the whole contribution."""
        return Contribution(self.weights_dense, self.weights_expert, self.gradients, self.optimizer,
                            saved.activation, saved.recompute_peak, self.moe, self.dense_params, self.expert_params)

    def times(self, n: int) -> Contribution:
        """n blocks of this kind (the working-set peak and the MoE flag do not add up)."""
        if n == 0:
            return Contribution()
        return Contribution(self.weights_dense * n, self.weights_expert * n, self.gradients * n,
                            self.optimizer * n, self.activation * n, self.recompute_peak, self.moe,
                            self.dense_params * n, self.expert_params * n)


def _ceil(x: Fraction | float) -> int:
    return math.ceil(x)


def fsdp_on(training: Training) -> bool:
    """Whether weights and gradients are fully sharded (Megatron-FSDP optim_grads_params or torch FSDP2)."""
    return training.fsdp != "none"


def megatron_distributed_optimizer(training: Training) -> bool:
    """Whether the run uses Megatron's distributed optimizer: asked for, and not under torch FSDP2, which refuses it
    and shards the optimizer state itself (arguments.py:1038-1039)."""
    return training.distributed_optimizer and training.fsdp != "torch-fsdp2"


def megatron_param_gather(training: Training) -> bool:
    """Whether Megatron gathers the sharded parameters itself, the gather --overlap-param-gather can hide: the
    distributed optimizer's or Megatron-FSDP's (arguments.py:1024-1026; torch FSDP2 prefetches its own)."""
    return megatron_distributed_optimizer(training) or training.fsdp == "megatron-fsdp"


def optimizer_on_device(options: MegatronOptions) -> Fraction:
    """Share of the optimizer state kept in HBM: 1 − --optimizer-offload-fraction under
    --optimizer-cpu-offload (Megatron-LM arguments.py:2918-2922), else all of it."""
    if not options.optimizer_cpu_offload:
        return Fraction(1)
    return 1 - Fraction(options.optimizer_offload_fraction).limit_denominator(10**6)


def run_weights(training: Training, options: MegatronOptions, weights: WeightFormat | None) -> WeightFormat:
    """`weights`, or the run's weight format on a GPU parasol cannot name (FP8 GEMMs taken as TN-only: the
    larger figure, weight_format.non_tn_fp8_gemms)."""
    return weights if weights is not None else weight_format(training, options, None)


def _param_bytes(dense: Fraction, expert: Fraction, matrix: Fraction, m: Mapping, d: Derived,
                 training: Training, options: MegatronOptions, weights: WeightFormat) -> tuple[int, int, int, int]:
    """(dense weights, expert weights, gradients, optimizer) bytes for parameters on one rank. The
    distributed optimizer shards the optimizer state over dp-cp (dense) and expert DP; FSDP (ZeRO-3)
    shards weights and gradients the same way (Megatron-FSDP optim_grads_params), not TE's cached FP8 copies,
    which have the unsharded weights' shape. Weights take the run's bytes per parameter (`weights`): its GEMM
    format for the TP-sharded and routed-expert matrices, BF16 for the rest."""
    grad_bytes = 4 if training.grad_dtype == "fp32" else 2
    sharded = training.distributed_optimizer or fsdp_on(training)
    dense_shard = d.dp_attn * m.cp if sharded else Fraction(1)
    expert_shard = d.dp_expert if sharded else Fraction(1)
    dense_matrix = max(matrix - expert, Fraction(0))
    opt = ((dense_matrix * _optimizer_bytes_per_param(training, True, options)
            + (dense - dense_matrix) * _optimizer_bytes_per_param(training, False, options)) / dense_shard
           + expert * _optimizer_bytes_per_param(training, True, options) / expert_shard) * optimizer_on_device(options)
    held_dense, held_expert, held_matrix = dense, expert, dense_matrix
    if fsdp_on(training):
        held_dense, held_expert, held_matrix = dense / dense_shard, expert / expert_shard, dense_matrix / dense_shard
    trained = 0 if training.frozen_base_weights else 1
    dense_weights = (held_matrix * weights.parameter + dense_matrix * weights.cached
                     + (held_dense - held_matrix) * weights.other)
    expert_weights = held_expert * weights.parameter + expert * weights.cached
    return (_ceil(dense_weights), _ceil(expert_weights), _ceil((held_dense + held_expert) * grad_bytes * trained),
            _ceil(opt * trained))


def activation_context(m: Mapping, training: Training, options: MegatronOptions = NO_OPTIONS) -> ActivationContext:
    """The sharding, recompute and offload choices activations depend on."""
    fp8 = training.precision is Precision.fp8
    return ActivationContext(tp=m.tp, etp=m.expert_tp, sequence_parallel=training.sequence_parallel,
                             recompute=m.recompute, modules=frozenset(training.recompute_modules),
                             offloaded=frozenset(options.offload_modules),
                             gemm_input_bytes=FP8_BYTES if fp8 else BF16_BYTES,
                             attn_out_bytes=BF16_BYTES + (FP8_BYTES if fp8 and options.fp8_recipe == "delayed" else 0),
                             act_input_bytes=FP8_BYTES if options.activation_func_fp8_input_store else BF16_BYTES)


def tokens_on_rank(m: Mapping) -> Fraction:
    """Tokens of one microbatch on one rank before SP splitting: b·S/CP."""
    return Fraction(m.mbs * m.seq_len, m.cp)


def block_contribution(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                       block: Block, options: MegatronOptions = NO_OPTIONS,
                       weights: WeightFormat | None = None) -> Contribution:
    """What one block adds to the rank that holds it: its parameter state and saved activations."""
    return block_param_state(model, m, d, training, block, options, weights).holding(
        block_activations(model, m, training, block, options))


def block_param_state(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                      block: Block, options: MegatronOptions = NO_OPTIONS,
                      weights: WeightFormat | None = None) -> Contribution:
    """One block's weights, gradients and optimizer state on the rank that holds it (no activations): they
    read TP, ETP, the experts per rank and the data-parallel shards, not the microbatch or recompute;
    `weights`: the run's weight format (run_weights)."""
    bp = block_params(model, block)
    dense, expert, matrix = _rank_params(bp, m, d.experts_per_rank or Fraction(0))
    wd, we, g, o = _param_bytes(dense, expert, matrix, m, d, training, options,
                                run_weights(training, options, weights))
    return Contribution(wd, we, g, o, 0, 0, bool(bp.num_experts), dense, expert)


def block_activations(model: ModelArchitecture, m: Mapping, training: Training, block: Block,
                      options: MegatronOptions = NO_OPTIONS) -> Contribution:
    """One block's saved activations per microbatch and its full-recompute working set (no parameter state):
    they read TP, ETP, CP, the microbatch and recompute, not PP, EP or data parallelism."""
    ctx = activation_context(m, training, options)
    tokens = tokens_on_rank(m)
    act = _ceil(Fraction(saved_bytes_per_token(model, block, ctx)) * tokens)
    peak = 0
    if m.recompute is Recompute.full:
        full = replace(ctx, recompute=Recompute.none)
        peak = _ceil(Fraction(saved_bytes_per_token(model, block, full)) * tokens)
    return Contribution(activation=act, recompute_peak=peak)


def edge_contribution(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                      first: bool, last: bool, options: MegatronOptions = NO_OPTIONS,
                      weights: WeightFormat | None = None) -> Contribution:
    """Embedding on the first stage; output head, final norm, loss softmax, MTP blocks and (for MTP
    on a rank without the embedding) a copy of the input embedding on the last stage. A rank holding
    both ends (PP 1, DualPipe's rank 0 and PP−1, DualPipeV's rank 0) shares one embedding between the
    main model and MTP (DeepSeek-V3 report §3.2.3, "Shared Embedding and Output Head for MTP")."""
    return edge_param_state(model, m, d, training, first, last, options, weights).holding(
        edge_activations(model, m, training, first, last, options))


def edge_param_state(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                     first: bool, last: bool, options: MegatronOptions = NO_OPTIONS,
                     weights: WeightFormat | None = None) -> Contribution:
    """edge_contribution's weights, gradients and optimizer state (no activations): the embedding, head and
    MTP copies it holds; an MTP block sharing the main blocks' weights adds none (only its MoE flag)."""
    h = model.hidden_size
    vocab_rows = Fraction(model.vocab_size * h, m.tp)
    params = Fraction(0)
    if first:
        params += vocab_rows + model.learned_position_embeddings * h
    if last:
        head_copies = 0 if model.tied_embeddings and first else 1
        mtp_embed = 1 if model.mtp_layers and not first else 0
        params += vocab_rows * (head_copies + mtp_embed) + h
    weights = run_weights(training, options, weights)
    wd, we, g, o = _param_bytes(params, Fraction(0), Fraction(0), m, d, training, options, weights)
    edge = Contribution(wd, we, g, o, 0, 0, False, params, Fraction(0))
    if last:
        for b in model.mtp_blocks:
            c = block_param_state(model, m, d, training, b, options, weights)
            edge = edge + (Contribution(moe=c.moe) if model.mtp_shares_weights(b) else c)
    return edge


def edge_activations(model: ModelArchitecture, m: Mapping, training: Training, first: bool, last: bool,
                     options: MegatronOptions = NO_OPTIONS) -> Contribution:
    """edge_contribution's saved activations and recompute working set (no parameter state): the loss's
    logits and the MTP blocks' activations on the last stage, less what --cpu-offloading keeps on the host."""
    act = 0
    if last:
        act = _ceil(Fraction(logits_bytes_per_token(model, m.tp)) * tokens_on_rank(m) * (1 + model.mtp_layers))
    if first:
        act -= cpu_offloaded_bytes(model, m, training, options)
    edge = Contribution(activation=act)
    if last:
        for b in model.mtp_blocks:
            edge = edge + block_activations(model, m, training, b, options)
    return edge


def cpu_offloaded_bytes(model: ModelArchitecture, m: Mapping, training: Training, options: MegatronOptions) -> int:
    """Activations --cpu-offloading keeps on the host: those of the first cpu_offloading_num_layers blocks
    (Transformer Engine's offload context groups the layers in forward order and offloads the first N,
    Megatron-LM transformer_block.py:303-317; the rest stay in HBM). Megatron allows it only with PP 1 and
    no recompute (rule cpu-offloading), where the first stage holds every block and one microbatch."""
    if not (options.cpu_offloading and options.cpu_offloading_activations) or m.pp != 1:
        return 0
    blocks = model.blocks[:options.cpu_offloading_num_layers]
    return sum(block_activations(model, m, training, b, options).activation for b in blocks)


def dispatch_buffer_bytes(model: ModelArchitecture, m: Mapping, training: Training) -> int:
    """MoE receive buffer: k·ETP·b·S/(CP·TP) rows × capacity factor (or dropless headroom) × h × 2 B (the
    latent width under LatentMoE, which dispatches projected rows)."""
    if model.moe is None:
        return 0
    rows = Fraction(model.moe.top_k * m.expert_tp * m.mbs * m.seq_len, m.cp * m.tp)
    headroom = Fraction(training.capacity_factor or training.dispatch_headroom).limit_denominator(10**6)
    return _ceil(rows * headroom * model.moe.expert_width(model.hidden_size) * BF16_BYTES)


def block_kind(block: Block) -> tuple:
    """Blocks with equal keys contribute equally to memory and time (the solver's block types)."""
    return (block.mlp, block.compress_ratio, block.hash_routed, block.mtp, block.mixer, block.window)


FSDP_BUFFERS_MEMO = 4096
"""FSDP buffer sizes kept per model (the table starts afresh past this)."""


def fsdp_buffer_bytes(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                      weights: WeightFormat) -> int:
    """FSDP's unsharded units: the largest block's weights gathered twice (the unit computing and the one
    prefetched, Megatron-FSDP's default prefetch of one unit), its GEMM weights in the parameter's format
    (`weights`: BF16, or FP8 parameters with what TE adds for the backward) and the rest in BF16, and its
    gradients once, before their reduce-scatter; 0 without FSDP. Memoised per model by what it reads (TP, ETP,
    experts per rank, the weight and gradient bytes): every stage's ledger holds it."""
    if not fsdp_on(training):
        return 0
    grad_bytes = 4 if training.grad_dtype == "fp32" else 2
    experts = d.experts_per_rank or Fraction(0)
    key = (m.tp, m.expert_tp, experts, grad_bytes, weights.parameter, weights.other)
    return memoised_by(model, "fsdp_buffer_bytes", key, FSDP_BUFFERS_MEMO,
                       lambda: _fsdp_buffer_bytes(model, m, experts, grad_bytes, weights))


def _fsdp_buffer_bytes(model: ModelArchitecture, m: Mapping, experts: Fraction, grad_bytes: int,
                       weights: WeightFormat) -> int:
    """fsdp_buffer_bytes, computed."""
    largest = Fraction(0)
    for bp in distinct_block_params(model):
        dense, expert, matrix = _rank_params(bp, m, experts)
        unit = matrix * weights.parameter + (dense + expert - matrix) * weights.other
        largest = max(largest, 2 * unit + (dense + expert) * grad_bytes)
    return _ceil(largest)


def distinct_block_params(model: ModelArchitecture) -> tuple[BlockParams, ...]:
    """The distinct parameter splits among the main and MTP blocks, in order of first appearance
    (memoised per model): a block's share of a rank reads only its split, so the largest block is
    among these few."""
    return memoised(model, "distinct_block_params", lambda: tuple(dict.fromkeys(
        block_params(model, b) for b in (*model.blocks, *model.mtp_blocks))))


def stage_ledger(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                 stage: int, blocks: list[int], usable_bytes: float,
                 options: MegatronOptions = NO_OPTIONS, edges: tuple[bool, bool] | None = None,
                 priced: dict[tuple, Contribution] | None = None, weights: WeightFormat | None = None) -> StageLedger:
    """Ledger of one stage's heaviest rank: the exact integer sum of its blocks' contributions; `edges`
    (first, last) say whether it runs the embedding and the head (default: the first and last rank).
    `priced` keeps the contributions priced for this mapping (one block per block_kind, the edges per
    (first, last)) for its other stages, which hold the same kinds."""
    first, last = edges if edges is not None else (stage == 0, stage == m.pp - 1)
    priced = {} if priced is None else priced
    counts: dict[tuple, tuple[Block, int]] = {}
    for i in blocks:
        b = model.blocks[i]
        blk, n = counts.get(block_kind(b), (b, 0))
        counts[block_kind(b)] = (blk, n + 1)
    if (first, last) not in priced:
        priced[first, last] = edge_contribution(model, m, d, training, first, last, options, weights)
    total = priced[first, last]
    for kind, (blk, n) in counts.items():
        if kind not in priced:
            priced[kind] = block_contribution(model, m, d, training, blk, options, weights)
        total = total + priced[kind].times(n)
    return assemble_stage(model, m, d, training, stage, tuple(blocks), total, usable_bytes, options, weights)


def assemble_stage(model: ModelArchitecture, m: Mapping, d: Derived, training: Training, stage: int,
                   blocks: tuple[int, ...], total: Contribution, usable_bytes: float,
                   options: MegatronOptions = NO_OPTIONS, weights: WeightFormat | None = None) -> StageLedger:
    """Turn a stage's summed contributions into named ledger terms."""
    fmt = run_weights(training, options, weights)
    inflight = schedule_inflight(training.pipeline_schedule, stage, m.pp, m.vpp, d.num_microbatches)
    act = _ceil(inflight * total.activation)
    dispatch = dispatch_buffer_bytes(model, m, training) if total.moe else 0
    moe_count = sum(1 for i in blocks if model.blocks[i].mlp.value == "moe")
    opt_name = "Muon" if training.optimizer is Optimizer.muon else "Adam"
    sharded = training.distributed_optimizer or fsdp_on(training)
    dense_shard = d.dp_attn * m.cp if sharded else 1
    shard_note = (f"sharded over D_a·CP = {float(dense_shard):g} (dense) and D_e = {float(d.dp_expert):g} (experts)"
                  if sharded else "not sharded (distributed optimizer off)")
    if options.optimizer_cpu_offload:
        shard_note += f"; {options.optimizer_offload_fraction:g} of it on the host (--optimizer-cpu-offload)"
    fsdp = fsdp_on(training)
    weight_note = f", sharded over data parallelism ({training.fsdp})" if fsdp else ""
    offload_note = f"; inputs of {', '.join(options.offload_modules)} offloaded to the host" if options.offload_modules else ""
    headroom = training.capacity_factor or training.dispatch_headroom
    epr = float(d.experts_per_rank or 0)
    terms = (
        MemoryTerm("weights (dense)", total.weights_dense,
                   f"{fmt.description} × attention, MLP and shared-expert params /TP; BF16 2 B × norms, router, "
                   "embedding on the first stage, head on the last" + weight_note),
        MemoryTerm("weights (routed experts)", total.weights_expert,
                   f"{fmt.description} × MoE layers ({moe_count}) × E/EP ({epr:g}) × P_expert / ETP ({m.expert_tp})"
                   + weight_note),
        MemoryTerm("gradients", total.gradients,
                   f"{training.grad_dtype.upper()} × every local param "
                   + ("(sharded like the weights)" if fsdp else "(DDP grad buffer, not sharded)")),
        MemoryTerm("optimizer state", total.optimizer,
                   f"{opt_name}: {_optimizer_bytes_per_param(training, False, options)} B/param (master + moments), "
                   f"{shard_note}"),
        MemoryTerm("activations", act,
                   f"{total.activation / GB:.3f} GB per microbatch × {float(inflight):g} in flight "
                   f"({schedule_name(training.pipeline_schedule, m.vpp)}; recompute {m.recompute.value}{offload_note})"),
        MemoryTerm("recompute working set", total.recompute_peak,
                   "one block's full activations while it is recomputed (full recompute only)"),
        MemoryTerm("MoE dispatch buffer", dispatch,
                   f"k·ETP·b·S/(CP·TP) received rows × {headroom:g} "
                   f"({'capacity factor' if training.capacity_factor else 'dropless headroom'}) × h × 2 B"),
        MemoryTerm("FSDP unit buffers", fsdp_buffer_bytes(model, m, d, training, fmt),
                   "largest block's unsharded weights × 2 (computing + prefetched) and its gradients (FSDP only)"),
        MemoryTerm("workspace", workspace_bytes(training), "training.workspace_gb (GEMM, attention, NCCL buffers)"),
    )
    return StageLedger(stage=stage, blocks=blocks, moe_blocks=moe_count, dense_params=float(total.dense_params),
                       expert_params=float(total.expert_params), inflight_microbatches=float(inflight),
                       terms=terms, usable_bytes=usable_bytes)


def schedule_name(schedule: str, vpp: int) -> str:
    """The pipeline schedule as the ledger names it."""
    if schedule != "megatron":
        return {"dualpipe": "DualPipe", "dualpipev": "DualPipeV"}[schedule]
    return "1F1B" if vpp == 1 else "interleaved"


def workspace_bytes(training: Training) -> int:
    """Workspaces as whole bytes."""
    return _ceil(Fraction(training.workspace_gb).limit_denominator(10**6) * 10**9)


def recompute_method_gap(m: Mapping, options: MegatronOptions) -> str | None:
    """What parasol's memory and step time leave out of a full recompute other than Megatron's uniform method over
    one layer, the only one they price (every layer's input checkpointed and the layer recomputed alone; what
    `--emit megatron` writes by default); None for that one or without full recompute. Megatron-LM
    megatron/core/recompute.py:157-178: `uniform` checkpoints the input of each run of recompute_num_layers layers
    and recomputes the run at once; `block` checkpoints only the first recompute_num_layers layers of each model
    chunk (virtual stage) and runs the others without recompute."""
    if m.recompute is not Recompute.full:
        return None
    method, layers = options.recompute_method or "uniform", options.recompute_num_layers or 1
    if method == "uniform" and layers == 1:
        return None
    if method == "block":
        return (f"recompute method block over {layers} layer(s): Megatron recomputes only the first {layers} "
                f"layer(s) of each virtual stage and keeps the other layers' whole activations; parasol prices every "
                f"layer recomputed (uniform over 1), so its peak memory is a lower bound and its step time an upper "
                f"bound, exact only where no virtual stage holds more than {layers} layer(s)")
    return (f"recompute method uniform over {layers} layers: Megatron checkpoints the input of each run of {layers} "
            f"layers and recomputes the run at once; parasol prices one layer at a time: the same recompute work, "
            f"but a checkpoint per layer where Megatron keeps one per run and a working set of one layer where "
            f"Megatron's holds the run's, so its peak memory is not exact")


def weights_assumption(weights: WeightFormat) -> str:
    """The ledger's assumption on weights: the bytes per parameter it holds and why."""
    if weights == BF16_WEIGHTS:
        return "Weights BF16 (2 B/param)."
    if weights.fp8_params:
        return (f"Weights: Transformer Engine GEMM weights are FP8 parameters (--fp8-param-gather), "
                f"{weights.description} per param; embedding, output layer, norms and routers BF16 2 B.")
    if weights.cached:
        return (f"Weights: Transformer Engine GEMM weights keep the BF16 parameter and the FP8 copy quantized on the "
                f"first microbatch, {weights.description} per param (--fp8-param-gather would keep the FP8 copy "
                "alone; FSDP shards the parameter, not the copy); embedding, output layer, norms and routers BF16 2 B.")
    return f"Weights: {weights.description} per param."


def memory_ledger(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                  usable_bytes: float, options: MegatronOptions = NO_OPTIONS,
                  weights: WeightFormat | None = None) -> MemoryLedger:
    """Ledgers of all stages; the layout must cover the blocks with PP·VPP virtual stages; `weights`: the run's
    weight format (run_weights)."""
    weights = run_weights(training, options, weights)
    held = rank_holdings(d.layout, m.pp, training.pipeline_schedule)
    priced: dict[tuple, Contribution] = {}
    stages = tuple(stage_ledger(model, m, d, training, s, r.blocks, usable_bytes, options, (r.first, r.last), priced,
                                weights)
                   for s, r in enumerate(held))
    assumptions = (
        weights_assumption(weights),
        "Gradient buffer holds every local parameter (Megatron DDP); the distributed optimizer shards only "
        "FP32 master weights and moments, over the dense data-parallel group with CP (dp-cp) and over expert DP.",
        "Activations: flash attention (no score matrix), tensors listed in constraints/physics/activations.py; "
        "held for the microbatches in flight at the stage's peak under the schedule.",
        "Last stage holds the output head, the loss's FP32 softmax and the MTP blocks"
        + (", plus a copy of the input embedding for MTP" if model.mtp_layers and m.pp > 1 and training.pipeline_schedule == "megatron" else "") + ".",
        "The runtime reserve (CUDA context, NCCL, fragmentation) is taken off HBM by the hardware preset.",
    )
    gaps = tuple(g for g in (recompute_method_gap(m, options), dsa_gap(model)) if g is not None)
    return MemoryLedger(stages=stages, assumptions=(*assumptions, *gaps))


def dsa_gap(model: ModelArchitecture) -> str | None:
    """What the ledger leaves out of DSA (DeepSeek-V3.2), or None for other attention: the indexer's weights,
    gradients and optimizer state are held (params.dsa_indexer_params); its own activations are not."""
    attention = model.attention
    if not isinstance(attention, MLAAttention) or attention.indexer is None:
        return None
    return ("DSA: the indexer's weights are held, replicated over TP; its keys, scores and top-k indices are not "
            "among the activations, and the attention is priced as fused dense MLA (Megatron's unfused DSAttention "
            "path holds FP32 scores of heads x sequence x sequence per layer: warning dsa-scores-not-priced).")

