"""Activation bytes one block saves for its backward pass, per token held by a rank.

An estimate built tensor by tensor (flash attention: no score matrix; BF16 tensors, 2 bytes per
element; FP32 router logits and loss softmax, 4 bytes). Tensors of the sequence-parallel region
(width h) are split by TP when sequence parallelism is on; projections by TP; routed-expert rows
arrive through the EP dispatch: the MoE layer's input is the rank's sequence-parallel shard (b·S/(CP·TP)
tokens), each token sends k rows over EP and the expert-TP group all-gathers them (×ETP), each of
width f/ETP (Megatron-LM token_dispatcher.py:728-751, moe_layer.py:636). The seed warns that
the real peak must be measured under the real schedule (seed 000 §显存): this is the model of it.

Hybrid mixers keep, per token: a Mamba-2 layer its norm and in_proj inputs, the in_proj output
(z, x, B, C, dt), which the fused conv+scan saves (mamba_ssm ssd_combined.py
MambaSplitConv1dScanCombinedFn, checkpoint_lvl 1: the conv output and the SSD chunk states are recomputed
in the backward), and the gated norm's input and output (mamba_mixer.py:707-733: the norm and out_proj
run outside the fused function); a gated DeltaNet its norm and in_proj inputs, the in_proj output, the
conv output (the delta rule's q, k, v), the rule's output and the gated norm's output (chunk states are
recomputed in the backward, flash-linear-attention chunk_gated_delta_rule). All split by TP (heads).
A parallel attention+MLP block saves its one normed input once.

Under an FP8 recipe the input each Transformer Engine linear layer keeps for its weight gradient is the
quantized copy, 1 byte per element (TransformerEngine pytorch/module/linear.py, `_Linear.forward`: the
input is quantized, its row-wise data discarded and the column-wise FP8 data saved); the norm inputs,
attention q/k/v and the SwiGLU input stay BF16. The attention output is kept in BF16 by the attention
kernel for its own backward; the output projection shares it (BF16 runs; FP8 recipes other than delayed:
Megatron-LM attention.py:428-444, multi_latent_attention.py:235-251 set the projection to save the
original input) or adds its FP8 copy (delayed scaling, Megatron's default recipe).

Routed experts weigh their rows by the router probabilities inside the activation (Megatron-LM
experts.py:943-1017, weighted SwiGLU saving its input and the probabilities) and the combine un-permutes
without probabilities (token_dispatcher.py:891-899; moe_utils.py `unpermute` with probs None is a
scatter-add keeping only indices), so an expert's output is not kept for the backward (Megatron Core
>= 0.13, "Memory efficient token permutation", commit 2659630). `--activation-func-fp8-input-store` keeps
the SwiGLU input in FP8 (transformer_config.py:227-229; fused_bias_swiglu.py:180,232,269 cast it to
float8_e4m3fn), except where `moe_act` recompute holds the BF16 input for the recompute
(tensor_parallel/random.py CheckpointWithoutOutput saves its arguments as they are).
"""

from __future__ import annotations

from dataclasses import dataclass

from parasol.constraints.physics.dtypes import BF16_BYTES, FP32_BYTES
from parasol.problems.mapping import Recompute
from parasol.problems.model.architecture import (
    Activation,
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


@dataclass(frozen=True)
class ActivationContext:
    """What sharding and recompute choices the per-token counts depend on."""

    tp: int
    etp: int
    sequence_parallel: bool
    recompute: Recompute
    modules: frozenset[str]
    offloaded: frozenset[str] = frozenset()
    """Modules whose inputs fine-grained activation offloading keeps on the host (--offload-modules)."""
    gemm_input_bytes: float = BF16_BYTES
    """Bytes per element of a saved linear-layer input: 2 in BF16, 1 under an FP8 recipe."""
    attn_out_bytes: float = BF16_BYTES
    """Bytes per element of the attention output kept for the backward: the kernel's BF16 copy, plus the
    output projection's FP8 copy under FP8 delayed scaling (attention.py:428-444)."""
    act_input_bytes: float = BF16_BYTES
    """Bytes per element of a saved SwiGLU input: 1 with --activation-func-fp8-input-store."""

    @property
    def sp_split(self) -> int:
        """Divisor of width-h tensors: TP under sequence parallelism, else 1 (replicated)."""
        return self.tp if self.sequence_parallel and self.tp > 1 else 1

    def drops(self, module: str) -> bool:
        """Whether selective recompute frees this module's internal tensors."""
        return self.recompute is Recompute.selective and module in self.modules

    def swiglu_input_bytes(self, gated: bool, module: str) -> float:
        """Bytes per element of a gated activation's saved input: FP8 under the input store, BF16 when the
        activation is not SwiGLU-like or selective recompute of `module` keeps the BF16 input instead."""
        return self.act_input_bytes if gated and not self.drops(module) else BF16_BYTES

    def kept(self, module: str) -> float:
        """1 when the input this module saves stays in HBM, 0 when it is offloaded to the host
        (Megatron-LM transformer_config.py:1328-1341: each listed module offloads its input)."""
        return 0.0 if module in self.offloaded else 1.0


def _attention_bytes(model: ModelArchitecture, block: Block, ctx: ActivationContext) -> float:
    """Saved tensors of one attention sublayer per token (inputs of each projection, q/k/v, output)."""
    h = model.hidden_size
    att = model.attention
    hs = h / ctx.sp_split
    norm_in = BF16_BYTES * hs * model.hc_mult * ctx.kept("attn_norm")
    proj_in = 0.0 if ctx.drops("layernorm") else ctx.gemm_input_bytes * hs * ctx.kept("qkv_linear")
    core, proj = ctx.kept("core_attn"), ctx.kept("attn_proj")
    if isinstance(att, GQAAttention):
        kv_heads = max(att.num_kv_heads / ctx.tp, 1)
        gate = att.num_heads / ctx.tp if att.output_gate else 0.0
        qkv = BF16_BYTES * (att.num_heads / ctx.tp + 2 * kv_heads + gate) * att.head_dim * core
        out = ctx.attn_out_bytes * att.num_heads * att.head_dim / ctx.tp * proj + FP32_BYTES * att.num_heads / ctx.tp
        return norm_in + proj_in + qkv + out
    if isinstance(att, MLAAttention):
        heads = att.num_heads / ctx.tp
        lora = _mla_latent_bytes(att, ctx)
        up = 0.0 if ctx.drops("mla_up_proj") else BF16_BYTES * heads * (2 * att.head_dim + att.v_head_dim) * core
        out = ctx.attn_out_bytes * heads * att.v_head_dim * proj + FP32_BYTES * heads
        return norm_in + proj_in + lora + up + out
    assert isinstance(att, DSV4Attention)
    heads = att.num_heads / ctx.tp
    ratio = block.compress_ratio or 0
    lora = BF16_BYTES * (att.q_lora_rank + att.o_groups * att.o_lora_rank)
    q = BF16_BYTES * heads * att.head_dim * core
    kv = BF16_BYTES * att.num_kv_heads * att.head_dim * (1 + (1 / ratio if ratio else 0)) * core
    indexer = (BF16_BYTES * att.index_n_heads * att.index_head_dim + FP32_BYTES * att.index_topk) if ratio == 4 else 0.0
    out = ctx.attn_out_bytes * heads * att.head_dim * proj + FP32_BYTES * heads
    return norm_in + proj_in + lora + q + kv + indexer + out


def _mla_latent_bytes(att: MLAAttention, ctx: ActivationContext) -> float:
    """MLA's compressed latents per token. The down projections run on the sequence-parallel shard (Megatron-LM
    multi_latent_attention.py:638-664, TELinear duplicated: gpt_layer_specs.py:104-130) and each up projection is
    a LayerNormLinear holding its raw input (BF16, for the norm's backward) and its normalized input (the GEMM
    input) on that shard; under `mla_up_proj` recompute the checkpoint keeps only its inputs, the raw latents and
    the RoPE key part k_pos_emb, which is gathered over the whole sequence (multi_latent_attention.py:760-763)."""
    latents = ((att.q_lora_rank or 0) + att.kv_lora_rank) / ctx.sp_split
    if ctx.drops("mla_up_proj"):
        return BF16_BYTES * (latents + att.qk_rope_head_dim)
    return (BF16_BYTES + ctx.gemm_input_bytes) * latents


def _mamba_bytes(model: ModelArchitecture, mamba: MambaMixer, ctx: ActivationContext) -> float:
    """One Mamba-2 layer per token: norm and in_proj inputs, the in_proj output, the gated norm's input
    and output (BF16, /TP)."""
    hs = model.hidden_size / ctx.sp_split
    keep_in = BF16_BYTES * hs * model.hc_mult + (0.0 if ctx.drops("layernorm") else BF16_BYTES * hs)
    in_proj = 2 * mamba.d_inner + 2 * mamba.num_groups * mamba.state_size + mamba.num_heads
    return keep_in + BF16_BYTES * (in_proj + 2 * mamba.d_inner) / ctx.tp


def _gdn_bytes(model: ModelArchitecture, gdn: GatedDeltaNet, ctx: ActivationContext) -> float:
    """One gated DeltaNet per token: norm and in_proj inputs, the in_proj output, the conv output, the
    rule's output and the gated norm's output (BF16, /TP)."""
    hs = model.hidden_size / ctx.sp_split
    keep_in = BF16_BYTES * hs * model.hc_mult + (0.0 if ctx.drops("layernorm") else BF16_BYTES * hs)
    in_proj = 2 * gdn.key_width + 2 * gdn.value_width + 2 * gdn.num_value_heads
    return keep_in + BF16_BYTES * (in_proj + gdn.conv_channels + 2 * gdn.value_width) / ctx.tp


def _mixer_bytes(model: ModelArchitecture, block: Block, ctx: ActivationContext) -> float:
    """Saved tensors of one block's token mixer, by kind."""
    if block.mixer is Mixer.none:
        return 0.0
    if block.mixer is Mixer.mamba:
        assert model.mamba is not None
        return _mamba_bytes(model, model.mamba, ctx)
    if block.mixer is Mixer.gdn:
        assert model.linear_attention is not None
        return _gdn_bytes(model, model.linear_attention, ctx)
    return _attention_bytes(model, block, ctx)


def _mlp_bytes(model: ModelArchitecture, ctx: ActivationContext) -> float:
    """Dense MLP: norm input, fc1 input, fc1 output and activation output per token."""
    mlp = model.dense_mlp
    assert mlp is not None
    hs = model.hidden_size / ctx.sp_split
    fc1_in = 0.0 if ctx.drops("layernorm") else ctx.gemm_input_bytes * hs
    keep_in = BF16_BYTES * hs * model.hc_mult * ctx.kept("mlp_norm") + fc1_in
    if ctx.drops("mlp"):
        return keep_in
    f = mlp.intermediate_size / ctx.tp
    fc1 = ctx.swiglu_input_bytes(mlp.activation is Activation.swiglu, "mlp") * f * (2 if mlp.activation.gated else 1)
    return keep_in + fc1 + ctx.gemm_input_bytes * f


def _moe_bytes(model: ModelArchitecture, block: Block, ctx: ActivationContext) -> float:
    """MoE: router input and logits, k·ETP/TP dispatched rows per token of b·S/CP (the dispatch buffer's
    count), each keeping its expert input, activation input, fc2 input and routing weight (not its
    output: the probabilities are applied in the activation), shared experts; a shared-expert gate keeps
    the shared output and its sigmoid score for the product's backward (shared_experts.py:203-206)."""
    moe = model.moe
    assert moe is not None
    h = model.hidden_size
    hs = h / ctx.sp_split
    keep_in = BF16_BYTES * hs * model.hc_mult * ctx.kept("mlp_norm")
    if ctx.drops("moe"):
        return keep_in
    router = (0.0 if ctx.drops("layernorm") else BF16_BYTES * hs) + (0.0 if block.hash_routed else FP32_BYTES * moe.num_experts / ctx.sp_split)
    rows = moe.top_k * ctx.etp / ctx.sp_split
    f = moe.expert_intermediate_size / ctx.etp
    swiglu = moe.activation is Activation.swiglu
    fc1 = ctx.swiglu_input_bytes(swiglu, "moe_act") * f * (2 if moe.activation.gated else 1)
    act = 0.0 if ctx.drops("moe_act") else ctx.gemm_input_bytes * f
    width = moe.expert_width(h)
    routed = rows * (ctx.gemm_input_bytes * width * ctx.kept("expert_fc1") + fc1 * ctx.kept("moe_act") + act
                     + FP32_BYTES)
    if moe.latent_size:
        routed += BF16_BYTES * moe.latent_size
    shared = 0.0
    if moe.shared_width and not ctx.drops("shared_experts"):
        fs = moe.shared_width / ctx.tp
        act_in = ctx.swiglu_input_bytes(swiglu, "shared_experts")
        shared = act_in * fs * (2 if moe.activation.gated else 1) + ctx.gemm_input_bytes * fs
        if moe.shared_expert_gate:
            shared += BF16_BYTES * (hs + 1)
    return keep_in + router + routed + shared


def block_bytes_per_token(model: ModelArchitecture, block: Block, ctx: ActivationContext) -> float:
    """All activations one block keeps per token of the rank's microbatch (before full recompute)."""
    if block.mlp is BlockKind.none:
        mlp = 0.0
    elif block.mlp is BlockKind.dense:
        mlp = _mlp_bytes(model, ctx)
    else:
        mlp = _moe_bytes(model, block, ctx)
    shared_input = 0.0
    if model.parallel_attention_mlp and block.sublayers == 2:
        shared_input = BF16_BYTES * model.hidden_size * model.hc_mult / ctx.sp_split
    return _mixer_bytes(model, block, ctx) + mlp - shared_input


def block_input_bytes_per_token(model: ModelArchitecture, ctx: ActivationContext) -> float:
    """What full recompute keeps per block: its input (the hc_mult residual streams)."""
    return BF16_BYTES * model.hidden_size * model.hc_mult / ctx.sp_split


def saved_bytes_per_token(model: ModelArchitecture, block: Block, ctx: ActivationContext) -> float:
    """Bytes one block holds between its forward and backward under the recompute choice."""
    if ctx.recompute is Recompute.full:
        return block_input_bytes_per_token(model, ctx)
    return block_bytes_per_token(model, block, ctx)


def logits_bytes_per_token(model: ModelArchitecture, tp: int) -> float:
    """Output head: FP32 softmax of the vocabulary shard kept for the cross-entropy backward."""
    return FP32_BYTES * model.vocab_size / tp
