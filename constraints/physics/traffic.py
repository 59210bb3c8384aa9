"""HBM traffic of the memory-bound kernels one rank runs: norms, residuals, rotary embedding, activations,
casts to low precision, MoE permutes and router, the loss, the embedding lookup, and the score matrix of
attention without a fused kernel (bytes per forward pass; backward and recompute scale them)."""

from __future__ import annotations

from parasol.constraints.physics.dtypes import BF16_BYTES, FP32_BYTES
from parasol.problems.model.architecture import (
    Block,
    BlockKind,
    DSV4Attention,
    GQAAttention,
    Mixer,
    MLAAttention,
    ModelArchitecture,
)


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


def _mixer_traffic(model: ModelArchitecture, block: Block, tp: int) -> tuple[float, float]:
    """Per token on one rank: elementwise BF16 elements of the block's mixer, and the width of its output
    projection's input (cast to FP8/FP4 in low precision)."""
    if block.mixer is Mixer.none:
        return 0.0, 0.0
    if block.mixer is Mixer.mamba:
        assert model.mamba is not None
        mamba = model.mamba
        return (2 * mamba.conv_channels + 3 * mamba.d_inner) / tp, mamba.d_inner / tp
    if block.mixer is Mixer.gdn:
        assert model.linear_attention is not None
        gdn = model.linear_attention
        return (2 * gdn.conv_channels + 3 * gdn.value_width) / tp, gdn.value_width / tp
    q_rope, k_rope = _rope_width(model)
    return 2 * (q_rope + k_rope) / tp, _attention_out_width(model) / tp


def block_memory_bytes(model: ModelArchitecture, block: Block, tokens: float, tp: int, sp: bool,
                       low_precision: bool) -> float:
    """Forward HBM bytes of the memory-bound kernels of one block on one rank for `tokens` tokens.

    Counted in BF16 elements read + written: two norms (4h), two residual adds (6h), mHC stream mixing
    (6·m·h, V4), rotary embedding on q and k, the MLP activation (3f gated, 2f plain), casts of GEMM
    inputs to FP8/FP4 (read 2 B, write 1 B, for inputs not fused into a norm), and for MoE blocks the
    router logits (FP32), token permute/unpermute and dispatch staging (2h + 6kh) and the experts'
    activation (k·3f). Hybrid layers count a norm (2h) and a residual add (3h) per sublayer; a Mamba-2
    mixer adds its conv (read and write its channels) and gated norm (read y and z, write y), a gated
    DeltaNet the same over its widths; rotary embedding is the softmax attention's alone."""
    h = model.hidden_size
    sp_split = tp if sp and tp > 1 else 1
    ts = tokens / sp_split
    elems = block.sublayers * (2 * h + 3 * h) * ts
    if model.hc_mult > 1:
        elems += 6 * model.hc_mult * h * ts
    mixer_elems, cast = _mixer_traffic(model, block, tp)
    elems += mixer_elems * tokens
    cast *= tokens
    if block.mlp is BlockKind.dense:
        mlp = model.dense_mlp
        assert mlp is not None
        f = mlp.intermediate_size / tp
        elems += (3 if mlp.activation.gated else 2) * f * tokens
        cast += f * tokens
    elif block.mlp is BlockKind.moe:
        moe = model.moe
        assert moe is not None
        k = moe.top_k
        width = moe.expert_width(h)
        elems += 2 * FP32_BYTES / BF16_BYTES * moe.num_experts * ts
        elems += (2 * h + 6 * k * width) * ts
        fe = moe.expert_intermediate_size
        elems += (3 if moe.activation.gated else 2) * k * fe * ts
        cast += k * (width + fe) * ts
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
