"""Exact parameter counts of DeepSeek-V4 blocks: hybrid CSA/HCA attention and mHC residual streams.

Every shape below is read from the official V4 inference code, `inference/model.py` of
deepseek-ai/DeepSeek-V4-Flash@60d8d707 (the same file serves V4-Pro; a vendored copy is cited in
reference/model-specs.yaml). With these formulas V4-Pro and V4-Flash reproduce the reference's
computed totals, MTP and active counts to the parameter.

Facts learned from that file:

- Attention (class `Attention`) is multi-query: one latent KV head of `head_dim` (512) shared by all
  query heads. Queries are low-rank: `wq_a [dim -> q_lora_rank]`, `q_norm [q_lora_rank]`,
  `wq_b [q_lora_rank -> n_heads*head_dim]`. KV: `wkv [dim -> head_dim]`, `kv_norm [head_dim]`.
  Output is grouped low-rank: `wo_a` maps each of `o_groups` groups of `n_heads*head_dim/o_groups`
  channels to `o_lora_rank` (in all `n_heads*head_dim*o_lora_rank` weights), then
  `wo_b [o_groups*o_lora_rank -> dim]`. `attn_sink [n_heads]` is one learned logit per head.
- A block with compress ratio r > 0 adds a `Compressor`: `ape [r, c*head_dim]` (learned position
  bias inside a window), `wkv` and `wgate [dim -> c*head_dim]` and `norm [head_dim]`, where c = 2
  for r = 4 (overlapping windows, CSA) and c = 1 otherwise (HCA, r = 128). Ratio 0 is sliding
  window only (V4-Flash's first two blocks, and the MTP block).
- A CSA block (r = 4) also has an `Indexer` choosing the top-k compressed positions: its own
  `wq_b [q_lora_rank -> index_n_heads*index_head_dim]` (fed by the shared q latent),
  `weights_proj [dim -> index_n_heads]` and a second Compressor of width `index_head_dim`.
- mHC (class `Block`): `hc_mult` residual streams; before attention and before the MoE a
  Sinkhorn-normalised mixing is computed from `hc_*_fn [(2+m)*m, m*dim]`, `hc_*_base [(2+m)*m]`
  and `hc_*_scale [3]` (m = hc_mult).
- The head (class `Transformer`, and every `MTPBlock`) collapses the m streams with
  `hc_head_fn [m, m*dim]`, `hc_head_base [m]` and `hc_head_scale [1]` before the final norm.
- An MTP block is a full block plus `e_proj`, `h_proj [dim -> dim]`, `enorm`, `hnorm` and its own
  final `norm [dim]` (the V3 layout: 2·dim² + 3·dim) and its own mHC head; embedding and output
  head are shared with the main model.
- The gate (class `Gate`) always holds `weight [n_routed_experts, dim]`; score-routed layers add a
  `bias [n_routed_experts]`, the first `n_hash_layers` instead hold `tid2eid [vocab, top_k]`, an
  int32 token-to-expert table that is not trained and is not counted (nor by the reference).
- FP8/FP4 block scales (`Linear.scale`) are quantisation metadata, not model parameters.
"""

from __future__ import annotations

from parasol.problems.model.architecture import DSV4Attention

CSA_RATIO = 4
"""Compressed sparse attention: overlapping windows of 4 tokens, with an indexer."""


def compressor_params(hidden: int, head_dim: int, ratio: int) -> int:
    """`Compressor`: ape [r, c·d], wkv and wgate [hidden → c·d], norm [d]; c = 2 when overlapping (r = 4)."""
    width = (2 if ratio == CSA_RATIO else 1) * head_dim
    return ratio * width + 2 * hidden * width + head_dim


def indexer_params(hidden: int, att: DSV4Attention) -> int:
    """CSA `Indexer`: wq_b from the q latent, weights_proj [hidden → index heads], its own compressor."""
    wq_b = att.q_lora_rank * att.index_n_heads * att.index_head_dim
    weights_proj = hidden * att.index_n_heads
    return wq_b + weights_proj + compressor_params(hidden, att.index_head_dim, CSA_RATIO)


def dsv4_attention_params(hidden: int, att: DSV4Attention, ratio: int) -> int:
    """One V4 attention: sink, low-rank q, single latent KV head, grouped low-rank output, plus the
    compressor for ratio > 0 and the indexer for CSA (ratio 4)."""
    q_width = att.num_heads * att.head_dim
    sink = att.num_heads
    query = hidden * att.q_lora_rank + att.q_lora_rank + att.q_lora_rank * q_width
    kv = hidden * att.head_dim + att.head_dim
    output = q_width * att.o_lora_rank + att.o_groups * att.o_lora_rank * hidden
    total = sink + query + kv + output
    if ratio:
        total += compressor_params(hidden, att.head_dim, ratio)
    if ratio == CSA_RATIO:
        total += indexer_params(hidden, att)
    return total


def mhc_block_params(hidden: int, hc_mult: int) -> int:
    """mHC mixing of one block, before attention and before the MLP: fn [(2+m)m, m·h], base, scale [3].

    A plain residual (hc_mult 1) has none."""
    if hc_mult == 1:
        return 0
    mix = (2 + hc_mult) * hc_mult
    return 2 * (mix * hc_mult * hidden + mix + 3)


def mhc_head_params(hidden: int, hc_mult: int) -> int:
    """mHC collapse of the streams before a final norm (main head and each MTP block): fn [m, m·h], base [m], scale [1]."""
    if hc_mult == 1:
        return 0
    return hc_mult * hc_mult * hidden + hc_mult + 1
