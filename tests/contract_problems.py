"""Small inline problems for the contract tests (seed 003 §8: a rollout pool that is too small)."""

SMALL_POOL = """
name: small-moe-rollout-too-small
model:
  name: small-moe
  hidden_size: 2048
  vocab_size: 32000
  num_layers: 12
  first_dense_layers: 1
  max_context: 4096
  attention: {kind: gqa, num_heads: 16, num_kv_heads: 4, head_dim: 128}
  dense_mlp: {intermediate_size: 8192}
  moe: {num_experts: 16, top_k: 2, expert_intermediate_size: 1408, num_shared_experts: 1}
training: {seq_len: 4096, global_batch: 256, precision: bf16, optimizer: adam, recompute: none, capacity_factor: 1.25}
hardware: {preset: h100-hgx, gpus: 64}
search: {tp: 2, pp: 2, cp: 1, ep: 4, etp: 1, mbs: 1, recompute: none}
mapping: {tp: 2, pp: 2, cp: 1, ep: 4, etp: 1, mbs: 1}
contract:
  rollout: {cluster_devices: 72, accepted_tokens_per_s_per_device: 100000}
"""

FULL_CONTRACT = """
name: small-moe-full-contract
model:
  name: small-moe
  hidden_size: 2048
  vocab_size: 32000
  num_layers: 8
  first_dense_layers: 1
  max_context: 4096
  attention: {kind: gqa, num_heads: 16, num_kv_heads: 4, head_dim: 128}
  dense_mlp: {intermediate_size: 8192}
  moe: {num_experts: 16, top_k: 2, expert_intermediate_size: 1408, num_shared_experts: 1}
training: {seq_len: 4096, global_batch: 64, precision: bf16, optimizer: adam, recompute: none, capacity_factor: 1.25}
hardware: {preset: asic-5t, gpus: 32}
contract:
  routing: {skew: zipf, zipf_exponent: 0.1, min_ep_compute_comm_ratio: 0.35, effective_flops_fraction: 0.5}
  long_context: {max_exposed_cp_share: 0.01}
  state: {reserve_fraction: 0.1}
  rollout: {cluster_devices: 40, accepted_tokens_per_s_per_device: 300000, max_versions: 20, max_seconds: 30,
            max_tokens: 4000000}
  publishing: {quantize_gb_s: 100, reshard_gb_s: 1, transfer_gb_s: 0.05, verify_gb_s: 10, switch_s: 0.5}
  goodput: {device_mtbf_hours: 20000, storage_gb_s: 50, restart_s: 120}
"""
