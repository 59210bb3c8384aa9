#!/usr/bin/env bash
# parasol: Megatron-LM launch flags for deepseek-v4-pro-1024, mapping 1 of 14 (Pareto rank 1)
#   TP1 PP16 CP2 EP32 ETP1 VPP2 MBS1 GBS4096 seq 8192, recompute full; 1,024 GPUs = 128 nodes x 8 GPUs.
# Run it on every host of the host order (hosts.txt) with NODE_RANK = the host's line (0-based) and
# MASTER_ADDR = the first host: global rank = NODE_RANK * GPUs per node + local rank, the order in
# which Megatron's groups (tp-cp-ep-dp-pp) land on the nodes as parasol judged them.
# Only the parallel part is here: append the model, data, tokenizer, precision, optimizer and
# checkpoint flags (add ' \' to the last line).
# Check it: parasol explain problems/deepseek-v4-pro-1024.yaml --megatron-args-file THIS_FILE
# DeepSeek-V4: run it with Megatron-LM dev@d48bd6be, the branch these flags follow: Megatron-LM main@d98e8a64 has no V4
# path (no --cp-partition-mode, no dsv4_hybrid attention, no C/H/W layer symbols) and stops at parsing.
export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP or CP > 1 before Blackwell (Megatron-LM main@d98e8a64 megatron/training/arguments.py:1453-1479)
torchrun --nnodes 128 --nproc-per-node 8 --node-rank "${NODE_RANK}" --master-addr "${MASTER_ADDR}" --master-port "${MASTER_PORT:-6000}" \
    pretrain_hybrid.py \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 16 \
    --context-parallel-size 2 \
    --expert-model-parallel-size 32 \
    --expert-tensor-parallel-size 1 \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --micro-batch-size 1 \
    --global-batch-size 4096 \
    --seq-length 8192 \
    --hybrid-layer-pattern 'HEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE||CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CEHE|CE/WE' \
    --recompute-granularity full \
    --recompute-method uniform \
    --recompute-num-layers 1 \
    --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend deepep \
    --moe-grouped-gemm \
    --cp-comm-type p2p \
    --cp-partition-mode contiguous
