"""Model FLOPs per token, block by block and by kind: GEMMs, routed experts, core attention, head.

Conventions (the ones Megatron-LM's own throughput counter and the seed use):

- A GEMM costs 2 FLOPs per weight per token in the forward pass, so a block's matrices cost
  2·P per token; the backward pass costs twice the forward (input and weight gradients): 6·P·T in
  all, the "6NT" rule. Norm weights and biases are counted with the matrices they sit next to
  (a rounding error of well under 0.1%).
- MoE blocks count only the experts a token is routed to: top_k routed experts plus the shared
  experts and the router (seed 000 §公开实验: "MoE 计算量应按实际激活专家 ... 估算; 把全部 1.6T 参数代入
  dense 模型的 6NT 近似, 会高估"). The total parameter count never enters.
- Core attention (scores and the weighted sum) is counted with the causal mask: a query at position
  p sees p keys, on average S/2 for a sequence of S tokens. Megatron's counter does the same; with
  it, Llama 3 8B at S = 8192 costs 51.5 GFLOP per token, which is what the Megatron-Bridge tables
  imply (744 TFLOP/s at 14,451 tokens/s, reference/measured-configs.yaml).
- DeepSeek-V4 hybrid attention: every query sees a sliding window of raw tokens plus compressed
  entries: all p/128 of them in an HCA block (ratio 128), at most index_topk of the p/4 entries
  in a CSA block (ratio 4), whose lightning indexer also scores every compressed entry. Query and
  value widths are head_dim (one latent KV head shared by all query heads, V4 inference/model.py).
- Sliding-window (local) attention: a query at position p sees min(p, W) keys (Mistral 7B, Jiang et al.
  2023 §2; Gemma 2, Team Gemma 2024 §2.2), W − W(W−1)/(2S) on average for W ≤ S.
- Mamba-2 mixers (Dao & Gu 2024, SSD): projections and the depthwise conv are weights (2 per weight per
  token), and the chunked scan costs 7·d_inner·N per token, the coefficient of Megatron's own counter
  (megatron/training/training.py:885-903), which the measured tables' TFLOP/s use.
- Gated DeltaNet (Yang et al. 2024): projections and conv as weights, and the delta rule 4 products of a
  key×value state per value head per token (K·Kᵀ, V·Kᵀ, the state update and S·Q: 2·4·H_v·d_k·d_v;
  Megatron's counter, training.py:938-962, with d_k = d_v).
- Embedding lookups cost no FLOPs; the output head costs 2·V·h per token on the last stage, and each
  MTP block computes its own logits through the shared head.

Model FLOPs (MFU's numerator) are 3 × forward: recomputation is excluded. Hardware FLOPs (HFU's)
add the forward work that recompute repeats.
"""

from __future__ import annotations

from dataclasses import dataclass

from parasol.problems.mapping import Recompute
from parasol.problems.memo import memo_table
from parasol.problems.model.architecture import (
    CSA_RATIO,
    Block,
    BlockKind,
    DSV4Attention,
    GatedDeltaNet,
    GQAAttention,
    MambaMixer,
    Mixer,
    MLAAttention,
    ModelArchitecture,
)
from parasol.problems.model.params import block_params

GEMM_FLOPS_PER_WEIGHT = 2
"""Forward FLOPs per weight per token of a matrix multiply (one multiply and one add)."""

BACKWARD_TO_FORWARD = 2
"""Backward FLOPs over forward FLOPs: input gradient plus weight gradient, each the size of the forward."""


def mean_causal_keys(seq_len: int) -> float:
    """Keys a query sees on average under a causal mask: (S + 1) / 2."""
    return (seq_len + 1) / 2


def mean_capped_keys(seq_len: int, stride: int, cap: int) -> float:
    """Average over positions p = 1..S of min(cap, p / stride): entries of a causal, strided and capped view."""
    if stride * cap >= seq_len:
        return (seq_len + 1) / (2 * stride)
    knee = stride * cap
    below = knee * (knee + 1) / (2 * stride)
    return (below + (seq_len - knee) * cap) / seq_len


def mean_window_keys(seq_len: int, window: int | None) -> float:
    """Keys a query sees on average under a causal mask limited to the last `window` positions (itself
    included): mean over p = 1..S of min(p, W) = W − W(W−1)/(2S) for W ≤ S; (S + 1)/2 when global."""
    if window is None or window >= seq_len:
        return mean_causal_keys(seq_len)
    return window - window * (window - 1) / (2 * seq_len)


def gqa_core_flops(att: GQAAttention, seq_len: int, window: int | None = None) -> float:
    """Scores and weighted sum of multi-head / grouped-query attention per query token: 4·H·d·keys, keys
    S/2 under the causal mask or the sliding window's mean."""
    return 2 * 2 * att.num_heads * att.head_dim * mean_window_keys(seq_len, window)


MAMBA_SCAN_FLOPS = 7
"""Forward scan FLOPs per inner channel per state entry per token (Megatron training.py:885-903)."""


def mamba_scan_flops(mamba: MambaMixer) -> float:
    """Mamba-2 chunked scan per token: 7·d_inner·N (independent of the sequence length)."""
    return MAMBA_SCAN_FLOPS * mamba.d_inner * mamba.state_size


def gdn_core_flops(gdn: GatedDeltaNet) -> float:
    """Gated delta rule per token: 4 products with the d_k×d_v state of each value head, 2 FLOPs each."""
    return 2 * 4 * gdn.num_value_heads * gdn.key_head_dim * gdn.value_head_dim


def mla_core_flops(att: MLAAttention, seq_len: int) -> float:
    """MLA per query token: scores over (nope + rope) dims and values over v dims, 2·H·(d_qk + d_v)·S/2."""
    width = att.qk_nope_head_dim + att.qk_rope_head_dim + att.v_head_dim
    return 2 * att.num_heads * width * mean_causal_keys(seq_len)


def dsv4_keys(att: DSV4Attention, ratio: int, seq_len: int) -> float:
    """Keys one V4 query attends to on average: the sliding window plus the compressed entries it sees."""
    window = att.sliding_window - att.sliding_window * (att.sliding_window - 1) / (2 * seq_len)
    window = min(window, mean_causal_keys(seq_len))
    if ratio == 0:
        return window
    cap = att.index_topk if ratio == CSA_RATIO else seq_len
    return window + mean_capped_keys(seq_len, ratio, cap)


def dsv4_indexer_flops(att: DSV4Attention, seq_len: int) -> float:
    """CSA lightning indexer per query token: index heads × index dim against every compressed entry seen."""
    return 2 * att.index_n_heads * att.index_head_dim * mean_capped_keys(seq_len, CSA_RATIO, seq_len)


def dsv4_core_flops(att: DSV4Attention, ratio: int, seq_len: int) -> float:
    """V4 hybrid attention per query token: 2·H·(d + d)·keys, plus the indexer's scoring in CSA blocks."""
    core = 2 * att.num_heads * 2 * att.head_dim * dsv4_keys(att, ratio, seq_len)
    return core + (dsv4_indexer_flops(att, seq_len) if ratio == CSA_RATIO else 0.0)


def attention_core_flops(model: ModelArchitecture, block: Block, seq_len: int) -> float:
    """Forward core-attention FLOPs per query token of one block, by attention kind (windowed where the
    block is local); 0 for a block without softmax attention."""
    if block.mixer is not Mixer.attention:
        return 0.0
    att = model.attention
    if isinstance(att, GQAAttention):
        return gqa_core_flops(att, seq_len, block.window)
    if isinstance(att, MLAAttention):
        return mla_core_flops(att, seq_len)
    assert isinstance(att, DSV4Attention)
    return dsv4_core_flops(att, block.compress_ratio or 0, seq_len)


def scan_flops(model: ModelArchitecture, block: Block) -> float:
    """Forward FLOPs per token of a block's linear-recurrence kernel: the Mamba-2 scan or the gated delta
    rule; 0 for other blocks."""
    if block.mixer is Mixer.mamba:
        assert model.mamba is not None
        return mamba_scan_flops(model.mamba)
    if block.mixer is Mixer.gdn:
        assert model.linear_attention is not None
        return gdn_core_flops(model.linear_attention)
    return 0.0


def materialised_core_flops(model: ModelArchitecture, block: Block, seq_len: int) -> float:
    """Core attention per query token when the S×S scores are materialised (no fused kernel): every
    query meets all S keys, the causal mask or sliding window applied to the computed scores."""
    core = attention_core_flops(model, block, seq_len)
    return core * seq_len / mean_window_keys(seq_len, block.window)


@dataclass(frozen=True)
class BlockFlops:
    """Forward FLOPs per token of one block, split by how the work runs on a GPU."""

    attention_gemm: float
    """Q/K/V/output projections (and V4's compressor and indexer projections, mHC mixing; a Mamba-2 or gated
    DeltaNet mixer's projections and conv)."""
    mlp_gemm: float
    """Dense MLP, shared experts and the router: ordinary GEMMs sharded over TP."""
    routed_gemm: float
    """The top_k routed experts a token visits: grouped GEMMs after the EP dispatch."""
    attention_core: float
    """Scores and weighted sum (flash attention), causal or windowed."""
    mla_up_projection: float = 0.0
    """MLA's query and key/value up-projections (part of attention_gemm), what mla_up_proj recompute repeats."""
    scan: float = 0.0
    """A Mamba-2 scan or gated delta rule: a chain of memory- and latency-bound kernels, priced apart."""

    @property
    def gemm(self) -> float:
        """All dense (non-grouped) GEMM FLOPs."""
        return self.attention_gemm + self.mlp_gemm

    @property
    def total(self) -> float:
        """Every forward FLOP of the block per token."""
        return self.attention_gemm + self.mlp_gemm + self.routed_gemm + self.attention_core + self.scan


def block_flops(model: ModelArchitecture, block: Block, seq_len: int) -> BlockFlops:
    """Forward FLOPs per token of one main or MTP block (active experts only; memoised per model)."""
    memo = memo_table(model, "block_flops")
    key = (block, seq_len)
    if key not in memo:
        memo[key] = _block_flops(model, block, seq_len)
    return memo[key]


def _block_flops(model: ModelArchitecture, block: Block, seq_len: int) -> BlockFlops:
    """block_flops, computed."""
    bp = block_params(model, block)
    per_weight = GEMM_FLOPS_PER_WEIGHT
    attention = per_weight * (bp.attention + bp.norms + bp.extra)
    mlp = per_weight * (bp.dense_mlp + bp.shared_experts + bp.router)
    routed = 0.0
    if block.mlp is BlockKind.moe:
        assert model.moe is not None
        routed = per_weight * model.moe.top_k * bp.per_expert
    return BlockFlops(attention, mlp, routed, attention_core_flops(model, block, seq_len),
                      mla_up_projection_flops(model) if block.mixer is Mixer.attention else 0.0,
                      scan_flops(model, block))


def mla_up_projection_flops(model: ModelArchitecture) -> float:
    """MLA up-projections per token: q latent → heads·(nope + rope) and kv latent → heads·(nope + v); 0 otherwise."""
    att = model.attention
    if not isinstance(att, MLAAttention):
        return 0.0
    q_in = att.q_lora_rank or model.hidden_size
    q_up = q_in * att.num_heads * (att.qk_nope_head_dim + att.qk_rope_head_dim)
    kv_up = att.kv_lora_rank * att.num_heads * (att.qk_nope_head_dim + att.v_head_dim)
    return GEMM_FLOPS_PER_WEIGHT * (q_up + kv_up)


def head_flops(model: ModelArchitecture) -> float:
    """Output head (logits) per token: 2·V·h."""
    return GEMM_FLOPS_PER_WEIGHT * model.vocab_size * model.hidden_size


def forward_flops_per_token(model: ModelArchitecture, seq_len: int) -> float:
    """Forward FLOPs per token of the whole model: every block, the head, and each MTP block with its head
    (memoised per model and sequence length: the search asks once per row)."""
    table = memo_table(model, "forward_flops_per_token")
    if seq_len not in table:
        blocks = sum(block_flops(model, b, seq_len).total for b in model.blocks)
        mtp = sum(block_flops(model, b, seq_len).total + head_flops(model) for b in model.mtp_blocks)
        table[seq_len] = blocks + head_flops(model) + mtp
    return table[seq_len]


def model_flops_per_token(model: ModelArchitecture, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward = 3 × forward), active experts only: MFU's numerator."""
    return (1 + BACKWARD_TO_FORWARD) * forward_flops_per_token(model, seq_len)


def recomputed_flops(recompute: Recompute, modules: tuple[str, ...], flops: BlockFlops) -> BlockFlops:
    """Forward FLOPs of one block, by kind, that recompute runs again in the backward pass.

    Full recompute repeats the whole block; selective recompute repeats the modules named: core_attn
    the core attention, mla_up_proj MLA's up-projections, mlp / moe the MLP or the experts with their
    router and shared experts, shared_experts only those; moe_act, layernorm and mhc repeat elementwise
    work, no GEMM."""
    if recompute is Recompute.full:
        return flops
    if recompute is Recompute.none:
        return BlockFlops(0.0, 0.0, 0.0, 0.0)
    whole_mlp = "mlp" in modules or "moe" in modules
    return BlockFlops(
        attention_gemm=flops.mla_up_projection if "mla_up_proj" in modules else 0.0,
        mlp_gemm=flops.mlp_gemm if whole_mlp or "shared_experts" in modules else 0.0,
        routed_gemm=flops.routed_gemm if whole_mlp else 0.0,
        attention_core=flops.attention_core if "core_attn" in modules else 0.0,
    )


def hardware_flops_per_token(model: ModelArchitecture, seq_len: int, recompute: Recompute,
                             modules: tuple[str, ...]) -> float:
    """Model FLOPs plus the forward work recompute repeats: HFU's numerator (memoised per model: every
    mapping of a search asks for one of a few)."""
    memo = memo_table(model, "hardware_flops_per_token")
    key = (seq_len, recompute, modules)
    if key not in memo:
        extra = sum(recomputed_flops(recompute, modules, block_flops(model, b, seq_len)).total
                    for b in (*model.blocks, *model.mtp_blocks))
        memo[key] = model_flops_per_token(model, seq_len) + extra
    return memo[key]


NEWTON_SCHULZ_STEPS = 5
"""Muon's orthogonalisation iterations (Jordan et al. 2024; Megatron's default)."""


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
