"""Parameter counts: per block (split by how each part is sharded) and for the whole model.

Counts are every weight of the module (biases and norm weights included). The split into
`attention`, `dense_mlp`, `shared_experts`, `router`, `routed_experts`, `norms` and `extra` is what the
memory ledger needs: attention and MLP matrices shard over TP, routed experts over EP and ETP,
router, norms and the extras (mHC, MTP's own layers, DSA's indexer) are replicated.
"""

from __future__ import annotations

from dataclasses import dataclass

from parasol.problems.memo import memo_table, memoised
from parasol.problems.model.architecture import (
    Activation,
    Block,
    BlockKind,
    DenseMLP,
    DSV4Attention,
    GatedDeltaNet,
    GQAAttention,
    MambaMixer,
    Mixer,
    MLAAttention,
    ModelArchitecture,
    MoE,
)
from parasol.problems.model.params_dsv4 import dsv4_attention_params, mhc_block_params, mhc_head_params


@dataclass(frozen=True)
class BlockParams:
    """Parameters of one decoder block, by sharding class."""

    attention: int
    dense_mlp: int
    shared_experts: int
    router: int
    routed_experts: int
    norms: int
    extra: int = 0
    num_experts: int = 0

    @property
    def total(self) -> int:
        return (self.attention + self.dense_mlp + self.shared_experts + self.router
                + self.routed_experts + self.norms + self.extra)

    @property
    def per_expert(self) -> int:
        return self.routed_experts // self.num_experts if self.num_experts else 0

    def active(self, top_k: int) -> int:
        """Parameters one token touches: routed experts cut to top_k of them."""
        return self.total - self.routed_experts + top_k * self.per_expert


def mlp_params(hidden: int, intermediate: int, activation: Activation, bias: bool = False) -> int:
    """One MLP (or one expert): gated ones have up, gate and down matrices (3·h·f for SwiGLU)."""
    weights = activation.matrices * hidden * intermediate
    if not bias:
        return weights
    up_bias = intermediate * (2 if activation.gated else 1)
    return weights + up_bias + hidden


def expert_params(model: ModelArchitecture) -> int:
    """One routed expert; for DeepSeek-V4-Pro 3·7168·3072 = 66,060,288 (seed 000)."""
    assert model.moe is not None
    return mlp_params(model.moe.expert_width(model.hidden_size), model.moe.expert_intermediate_size,
                      model.moe.activation)


def mamba_params(hidden: int, mamba: MambaMixer) -> int:
    """One Mamba-2 mixer (mamba_mixer.py:281-460): in_proj h·(2·d_inner + 2·G·N + H), the conv's weights
    and bias over d_inner + 2·G·N channels, dt_bias, A_log and D per head, the gated norm over d_inner and
    out_proj d_inner·h."""
    in_proj = hidden * (2 * mamba.d_inner + 2 * mamba.num_groups * mamba.state_size + mamba.num_heads)
    conv = mamba.conv_channels * (mamba.conv_kernel + 1)
    return in_proj + conv + 3 * mamba.num_heads + mamba.d_inner + mamba.d_inner * hidden


def gdn_params(hidden: int, gdn: GatedDeltaNet) -> int:
    """One gated DeltaNet (gated_delta_net/common.py:181-290): in_proj h·(2·qk + 2·v + 2·H_v), the depthwise
    conv over 2·qk + v channels (bias optional), dt_bias and A_log per value head, the gated norm over a
    value head and out_proj v·h."""
    in_proj = hidden * (2 * gdn.key_width + 2 * gdn.value_width + 2 * gdn.num_value_heads)
    conv = gdn.conv_channels * (gdn.conv_kernel + int(gdn.conv_bias))
    return in_proj + conv + 2 * gdn.num_value_heads + gdn.value_head_dim + gdn.value_width * hidden


def gqa_params(hidden: int, att: GQAAttention, norm_channels: int) -> int:
    """Q, K, V and output projections (+ biases: on all four, or on Q, K and V alone, + per-head q/k norms); an
    output gate doubles the query projection (the gate is projected with the queries)."""
    q = att.num_heads * att.head_dim
    kv = att.num_kv_heads * att.head_dim
    total = hidden * q * (2 if att.output_gate else 1) + 2 * hidden * kv + q * hidden
    if att.bias or att.qkv_bias:
        total += q + 2 * kv
    if att.bias:
        total += hidden
    if att.qk_norm:
        total += 2 * att.head_dim * norm_channels
    return total


def mla_params(hidden: int, att: MLAAttention, norm_channels: int) -> int:
    """MLA: q down/up (or a full q projection), joint KV down with rope key, KV up, output."""
    qk_head = att.qk_nope_head_dim + att.qk_rope_head_dim
    if att.q_lora_rank:
        q = hidden * att.q_lora_rank + att.q_lora_rank * norm_channels + att.q_lora_rank * att.num_heads * qk_head
    else:
        q = hidden * att.num_heads * qk_head
    kv_down = hidden * (att.kv_lora_rank + att.qk_rope_head_dim) + att.kv_lora_rank * norm_channels
    kv_up = att.kv_lora_rank * att.num_heads * (att.qk_nope_head_dim + att.v_head_dim)
    out = att.num_heads * att.v_head_dim * hidden
    return q + kv_down + kv_up + out


def dsa_indexer_params(hidden: int, att: MLAAttention) -> int:
    """DSA's indexer in one block: its query up-projection from the q latent (or the hidden state), its one key
    projection with a LayerNorm (weight and bias) and its per-head weights projection (dsa.py:1159-1203; duplicated
    on every TP rank, so they count among the replicated parameters); 0 without DSA."""
    idx = att.indexer
    if idx is None:
        return 0
    q_in = att.q_lora_rank or hidden
    return q_in * idx.n_heads * idx.head_dim + hidden * idx.head_dim + 2 * idx.head_dim + hidden * idx.n_heads


def attention_params(model: ModelArchitecture, block: Block) -> int:
    """Parameters of one block's token mixer: attention by kind, a Mamba-2 or gated DeltaNet mixer, or none."""
    if block.mixer is Mixer.none:
        return 0
    if block.mixer is Mixer.mamba:
        assert model.mamba is not None
        return mamba_params(model.hidden_size, model.mamba)
    if block.mixer is Mixer.gdn:
        assert model.linear_attention is not None
        return gdn_params(model.hidden_size, model.linear_attention)
    att = model.attention
    per = model.norm.params_per_channel
    if isinstance(att, GQAAttention):
        return gqa_params(model.hidden_size, att, per)
    if isinstance(att, MLAAttention):
        return mla_params(model.hidden_size, att, per)
    assert isinstance(att, DSV4Attention)
    return dsv4_attention_params(model.hidden_size, att, block.compress_ratio or 0)


def _router_params(model: ModelArchitecture, moe: MoE, block: Block) -> int:
    """Gate weight [experts, h] plus the score-correction bias; V4's hash-routed layers keep the
    weight (it still weights the chosen experts) but have no bias, and their int32 token-to-expert
    table is not a trained parameter. LatentMoE adds its down and up projections h·ℓ each, replicated
    over TP like the gate (moe_layer.py:279-303, parallel_mode="duplicated"); a shared-expert gate its
    1×h weight, replicated too (shared_experts.py:136-143)."""
    bias = moe.num_experts if moe.router_bias and not block.hash_routed else 0
    latent = 2 * model.hidden_size * moe.latent_size if moe.latent_size else 0
    gate = model.hidden_size if moe.shared_expert_gate and moe.shared_width else 0
    return moe.num_experts * model.hidden_size + bias + latent + gate


def block_norm_params(model: ModelArchitecture, block: Block) -> int:
    """Pre-norms of a block: one per sublayer (a hybrid layer has one), one shared by a parallel
    attention+MLP block."""
    per = model.hidden_size * model.norm.params_per_channel
    if model.parallel_attention_mlp and block.sublayers == 2:
        return per
    return block.sublayers * per


def block_params(model: ModelArchitecture, block: Block) -> BlockParams:
    """Parameters of one main or MTP block, split by sharding class (memoised per model)."""
    memo = memo_table(model, "block_params")
    if block not in memo:
        memo[block] = _block_params(model, block)
    return memo[block]


def _block_params(model: ModelArchitecture, block: Block) -> BlockParams:
    """block_params, computed."""
    h = model.hidden_size
    norms = block_norm_params(model, block)
    extra = mhc_block_params(h, model.hc_mult)
    if block.mixer is Mixer.attention and isinstance(model.attention, MLAAttention):
        extra += dsa_indexer_params(h, model.attention)
    if block.mtp:
        extra += mtp_extra_params(model)
    att = attention_params(model, block)
    if block.mlp is BlockKind.none:
        return BlockParams(att, 0, 0, 0, 0, norms, extra)
    if block.mlp is BlockKind.dense:
        mlp: DenseMLP = model.dense_mlp  # type: ignore[assignment]
        return BlockParams(att, mlp_params(h, mlp.intermediate_size, mlp.activation, mlp.bias), 0, 0, 0,
                           norms, extra)
    moe = model.moe
    assert moe is not None
    shared = mlp_params(h, moe.shared_width, moe.activation) if moe.shared_width else 0
    routed = moe.num_experts * mlp_params(moe.expert_width(h), moe.expert_intermediate_size, moe.activation)
    return BlockParams(att, 0, shared, _router_params(model, moe, block), routed, norms, extra, moe.num_experts)


def mtp_extra_params(model: ModelArchitecture) -> int:
    """What an MTP block holds besides its decoder block: two input norms, the 2h→h projection, the
    final norm (DeepSeek-V3 layout; embedding and head are shared with the main model) and, with
    mHC (V4), its own stream-collapsing head."""
    h = model.hidden_size
    per = model.norm.params_per_channel
    return 2 * h * per + 2 * h * h + h * per + mhc_head_params(h, model.hc_mult)


@dataclass(frozen=True)
class ModelParams:
    """Whole-model counts under the conventions vendors use."""

    embedding: int
    position_embedding: int
    output_head: int
    final_norm: int
    blocks: int
    mtp: int
    top_k_saving: int
    mhc_head: int = 0
    """V4's mHC head that collapses the residual streams before the final norm (last stage, replicated)."""

    @property
    def total(self) -> int:
        """Every weight of the main model (embedding and head included, MTP excluded)."""
        return (self.embedding + self.position_embedding + self.output_head + self.final_norm + self.mhc_head
                + self.blocks)

    @property
    def total_with_mtp(self) -> int:
        return self.total + self.mtp

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.position_embedding - self.output_head

    @property
    def active_with_embedding(self) -> int:
        """Active per token, counting input embedding and output head (Qwen, Mistral)."""
        return self.total - self.top_k_saving

    @property
    def active_head_only(self) -> int:
        """Active per token, counting the output head but not the input embedding (DeepSeek)."""
        return self.active_with_embedding - self.embedding - self.position_embedding

    @property
    def active_no_embedding(self) -> int:
        """Active per token without embedding or head."""
        return self.active_head_only - self.output_head


def model_params(model: ModelArchitecture) -> ModelParams:
    """Count every parameter of a model from its blocks (memoised per model: explain reports them for
    every mapping a solve returns)."""
    return memoised(model, "model_params", lambda: _model_params(model))


def _model_params(model: ModelArchitecture) -> ModelParams:
    """model_params, computed."""
    h = model.hidden_size
    per_blocks = [block_params(model, b) for b in model.blocks]
    top_k = model.moe.top_k if model.moe else 0
    saving = sum(p.total - p.active(top_k) for p in per_blocks if p.num_experts)
    return ModelParams(
        embedding=model.vocab_size * h,
        position_embedding=model.learned_position_embeddings * h,
        output_head=0 if model.tied_embeddings else model.vocab_size * h,
        final_norm=h * model.norm.params_per_channel,
        blocks=sum(p.total for p in per_blocks),
        mtp=sum(block_params(model, b).total for b in model.mtp_blocks if not model.mtp_shares_weights(b)),
        top_k_saving=saving,
        mhc_head=mhc_head_params(h, model.hc_mult),
    )
