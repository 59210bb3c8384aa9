"""Small inline problems shared by the explain and agreement tests."""

SMALL_MOE = """
name: small-moe-inline
model:
  name: small-moe
  hidden_size: 2048
  vocab_size: 32000
  num_layers: 12
  first_dense_layers: 1
  attention: {kind: gqa, num_heads: 16, num_kv_heads: 4, head_dim: 128}
  dense_mlp: {intermediate_size: 8192}
  moe: {num_experts: 16, top_k: 2, expert_intermediate_size: 1408, num_shared_experts: 1}
training: {seq_len: 4096, global_batch: 256, precision: bf16, optimizer: adam, recompute: none}
hardware: {preset: h100-hgx, gpus: 64}
framework: {rule_packs: [megatron-core]}
"""
