#!/usr/bin/env bash
# parasol: Megatron-LM launch flags for 5t-moe-asic-4096, mapping 1 of 12 (Pareto rank 1)
#   TP8 PP16 CP8 EP32 ETP1 VPP1 MBS1 GBS256 seq 131072, recompute full; 4,096 GPUs = 512 nodes x 8 GPUs.
# Run it on every host of the host order (hosts.txt) with NODE_RANK = the host's line (0-based) and
# MASTER_ADDR = the first host: global rank = NODE_RANK * GPUs per node + local rank, the order in
# which Megatron's groups (tp-cp-ep-dp-pp) land on the nodes as parasol judged them.
# Only the parallel part is here: append the model, data, tokenizer, precision, optimizer and
# checkpoint flags (add ' \' to the last line).
# Check it: parasol explain problems/5t-moe-asic-4096.yaml --megatron-args-file THIS_FILE
export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP or CP > 1 before Blackwell (Megatron-LM main@d98e8a64 megatron/training/arguments.py:1453-1479)
torchrun --nnodes 512 --nproc-per-node 8 --node-rank "${NODE_RANK}" --master-addr "${MASTER_ADDR}" --master-port "${MASTER_PORT:-6000}" \
    pretrain_gpt.py \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 16 \
    --context-parallel-size 8 \
    --expert-model-parallel-size 32 \
    --expert-tensor-parallel-size 1 \
    --sequence-parallel \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --tp-comm-overlap \
    --micro-batch-size 1 \
    --global-batch-size 256 \
    --seq-length 131072 \
    --recompute-granularity full \
    --recompute-method uniform \
    --recompute-num-layers 1 \
    --moe-token-dispatcher-type alltoall \
    --moe-grouped-gemm \
    --moe-expert-capacity-factor 1.25 \
    --cp-comm-type p2p
