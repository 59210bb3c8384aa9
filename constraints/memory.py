"""The per-stage memory ledger of the heaviest rank: every term named, with its formula and assumption.

M_peak = weights + gradients + optimizer + activations + communication + workspace (seed 000 §显存),
compared with the GPU's usable HBM (HBM minus the runtime reserve of the hardware preset). All ranks
of one pipeline stage hold the same shares under even TP/EP/ETP/DP splits, so the stage's heaviest
rank is any of them. Bytes are exact integers where the formula is; GB are decimal (1e9), as the seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from parasol.constraints.activations import (
    BF16,
    ActivationContext,
    logits_bytes_per_token,
    saved_bytes_per_token,
)
from parasol.problems.architecture import Block, ModelArchitecture
from parasol.problems.derived import Derived, stage_of_virtual
from parasol.problems.mapping import Mapping, Recompute
from parasol.problems.params import BlockParams, block_params
from parasol.problems.schema import Optimizer, Training

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

    @property
    def total_bytes(self) -> float:
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

    @property
    def peak(self) -> StageLedger:
        return max(self.stages, key=lambda s: (s.total_bytes, -s.stage))


def weight_bytes(params: float, bytes_per_param: int = BF16) -> float:
    """Bytes to hold `params` weights (seed 000: 1.6e12 · 2 B = 3.2 TB in BF16)."""
    return params * bytes_per_param


def state_bytes_per_param(grad_dtype: str = "bf16") -> int:
    """Training state per parameter with Adam: BF16 weight 2 + grad 2 (FP32: 4) + FP32 master 4 +
    Adam m and v 8 = 16 B (18 B with FP32 grads), seed 003 §2."""
    return BF16 + (4 if grad_dtype == "fp32" else BF16) + 4 + 8


def training_state_bytes(params: float, grad_dtype: str = "bf16") -> float:
    """Global training state of a model: params · bytes per param (5T: 80 TB, or 90 TB with FP32 grads)."""
    return params * state_bytes_per_param(grad_dtype)


def state_per_device_bytes(params: float, devices: int, grad_dtype: str = "bf16") -> float:
    """That state spread evenly over `devices` (5T on 64 devices: 1.25 TB each), before activations."""
    return training_state_bytes(params, grad_dtype) / devices


def routed_expert_weight_bytes(moe_layers: int, num_experts: int, ep: int, etp: int,
                               params_per_expert: int, bytes_per_param: int = BF16) -> float:
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


def inflight_microbatches(stage: int, pp: int, vpp: int, m: float) -> float:
    """Microbatches whose activations a stage holds at its peak, in units of its whole layer set.
    1F1B: min(PP − s, m) (warm-up depth). Interleaved: Megatron warms up (PP − s − 1)·2 + (v − 1)·PP
    chunks plus one, each 1/v of the rank's layers, capped at all m·v chunks (schedules.py)."""
    if vpp == 1:
        return float(min(pp - stage, m))
    chunks = min((pp - stage - 1) * 2 + (vpp - 1) * pp + 1, m * vpp)
    return chunks / vpp


def _rank_params(bp: BlockParams, m: Mapping, experts_per_rank: Fraction) -> tuple[float, float, float]:
    """(dense, expert, muon-eligible) parameters of one block on one rank."""
    tp_split = (bp.attention + bp.dense_mlp + bp.shared_experts) / m.tp
    replicated = bp.router + bp.norms + bp.extra
    expert = float(experts_per_rank * bp.per_expert / m.expert_tp) if bp.num_experts else 0.0
    return tp_split + replicated, expert, tp_split + expert


def _optimizer_bytes_per_param(training: Training, matrix: bool) -> int:
    """FP32 master (4) plus Adam m, v (8) = 12; Muon keeps one momentum (4) on 2-D block matrices and
    falls back to Adam for embeddings, head, norms and routers (seed 003 §2; Muon in Megatron)."""
    if training.optimizer is Optimizer.muon and matrix:
        return 8
    return 12


def stage_ledger(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                 stage: int, blocks: list[int], usable_bytes: float) -> StageLedger:
    """Ledger of one stage's heaviest rank."""
    all_blocks: list[Block] = [*model.blocks, *model.mtp_blocks]
    first, last = stage == 0, stage == m.pp - 1
    held = [all_blocks[i] for i in blocks] + (list(model.mtp_blocks) if last else [])
    epr = d.experts_per_rank or Fraction(0)
    dense = expert = matrix = 0.0
    moe_count = 0
    for b in held:
        bp = block_params(model, b)
        dn, ex, mx = _rank_params(bp, m, epr)
        dense, expert, matrix = dense + dn, expert + ex, matrix + mx
        moe_count += bool(bp.num_experts) and not b.mtp
    vocab_rows = model.vocab_size * model.hidden_size / m.tp
    embed = 0.0
    if first:
        embed += vocab_rows + model.learned_position_embeddings * model.hidden_size
    if last:
        head_copies = (0 if model.tied_embeddings and m.pp == 1 else 1)
        mtp_embed = 1 if model.mtp_layers and m.pp > 1 else 0
        embed += vocab_rows * (head_copies + mtp_embed) + model.hidden_size
    dense += embed
    params = dense + expert
    grad_bytes = 4 if training.grad_dtype == "fp32" else 2
    dense_shard = float(d.dp_attn * m.cp) if training.distributed_optimizer else 1.0
    expert_shard = float(d.dp_expert) if training.distributed_optimizer else 1.0
    dense_matrix = max(matrix - expert, 0.0)
    opt_dense = (dense_matrix * _optimizer_bytes_per_param(training, True)
                 + (dense - dense_matrix) * _optimizer_bytes_per_param(training, False)) / dense_shard
    opt_expert = expert * _optimizer_bytes_per_param(training, True) / expert_shard

    ctx = ActivationContext(tp=m.tp, etp=m.expert_tp, sequence_parallel=training.sequence_parallel,
                            recompute=m.recompute, modules=frozenset(training.recompute_modules))
    tokens = m.mbs * m.seq_len / m.cp
    per_mb = sum(saved_bytes_per_token(model, b, ctx) for b in held) * tokens
    if last:
        per_mb += logits_bytes_per_token(model, m.tp) * tokens * (1 + model.mtp_layers)
    inflight = inflight_microbatches(stage, m.pp, m.vpp, float(d.num_microbatches))
    act = per_mb * inflight
    recompute_peak = 0.0
    if m.recompute is Recompute.full and held:
        full = ActivationContext(ctx.tp, ctx.etp, ctx.sequence_parallel, Recompute.none, ctx.modules)
        recompute_peak = max(saved_bytes_per_token(model, b, full) for b in held) * tokens
    dispatch = 0.0
    headroom = training.capacity_factor or training.dispatch_headroom
    if model.moe is not None and moe_count:
        rows = model.moe.top_k * m.expert_tp * m.mbs * m.seq_len / (m.cp * m.tp)
        dispatch = rows * headroom * model.hidden_size * BF16
    opt_name = "Muon" if training.optimizer is Optimizer.muon else "Adam"
    shard_note = (f"sharded over D_a·CP = {dense_shard:g} (dense) and D_e = {expert_shard:g} (experts)"
                  if training.distributed_optimizer else "not sharded (distributed optimizer off)")
    terms = (
        MemoryTerm("weights (dense)", dense * BF16,
                   "BF16 2 B × dense params on the rank (attention, MLP, shared experts /TP; norms, router; "
                   "embedding on the first stage, head on the last)"),
        MemoryTerm("weights (routed experts)", expert * BF16,
                   f"BF16 2 B × MoE layers ({moe_count}) × E/EP ({float(epr):g}) × P_expert / ETP ({m.expert_tp})"),
        MemoryTerm("gradients", params * grad_bytes,
                   f"{training.grad_dtype.upper()} {grad_bytes} B × every local param (DDP grad buffer, not sharded)"),
        MemoryTerm("optimizer state", opt_dense + opt_expert,
                   f"{opt_name}: FP32 master + moments, {shard_note}"),
        MemoryTerm("activations", act,
                   f"{per_mb / GB:.3f} GB per microbatch × {inflight:g} in flight ({'1F1B' if m.vpp == 1 else 'interleaved'}; "
                   f"recompute {m.recompute.value})"),
        MemoryTerm("recompute working set", recompute_peak,
                   "one block's full activations while it is recomputed (full recompute only)"),
        MemoryTerm("MoE dispatch buffer", dispatch,
                   f"k·ETP·b·S/(CP·TP) received rows × {headroom:g} "
                   f"({'capacity factor' if training.capacity_factor else 'dropless headroom'}) × h × 2 B"),
        MemoryTerm("workspace", training.workspace_gb * GB, "training.workspace_gb (GEMM, attention, NCCL buffers)"),
    )
    return StageLedger(stage=stage, blocks=tuple(blocks), moe_blocks=moe_count, dense_params=dense,
                       expert_params=expert, inflight_microbatches=inflight, terms=terms,
                       usable_bytes=usable_bytes)


def memory_ledger(model: ModelArchitecture, m: Mapping, d: Derived, training: Training,
                  usable_bytes: float) -> MemoryLedger:
    """Ledgers of all stages; the layout must cover the blocks with PP·VPP virtual stages."""
    ranges = stage_block_ranges(d.layout, m.pp)
    stages = tuple(stage_ledger(model, m, d, training, s, ranges[s], usable_bytes) for s in range(m.pp))
    assumptions = (
        "Weights BF16 (2 B/param) for BF16 and FP8 runs (FP8 copies are transient).",
        "Gradient buffer holds every local parameter (Megatron DDP); the distributed optimizer shards only "
        "FP32 master weights and moments, over the dense data-parallel group with CP (dp-cp) and over expert DP.",
        "Activations: flash attention (no score matrix), tensors listed in constraints/activations.py; "
        "held for the microbatches in flight at the stage's peak under the schedule.",
        "Last stage holds the output head, the loss's FP32 softmax and the MTP blocks"
        + (", plus a copy of the input embedding for MTP" if model.mtp_layers and m.pp > 1 else "") + ".",
        "The runtime reserve (CUDA context, NCCL, fragmentation) is taken off HBM by the hardware preset.",
    )
    return MemoryLedger(stages=stages, assumptions=assumptions)

