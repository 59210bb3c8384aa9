#!/usr/bin/env bash
# parasol: Megatron-LM launch flags for qwen3-30b-a3b-h100-64, mapping 1 of 21 (Pareto rank 1)
#   TP1 PP1 CP1 EP8 ETP1 VPP1 MBS2 GBS512 seq 4096, recompute none; 64 GPUs = 8 nodes x 8 GPUs.
# Run it on every host of the host order (hosts.txt) with NODE_RANK = the host's line (0-based) and
# MASTER_ADDR = the first host: global rank = NODE_RANK * GPUs per node + local rank, the order in
# which Megatron's groups (tp-cp-ep-dp-pp) land on the nodes as parasol judged them.
# Only the parallel part is here: append the model, data, tokenizer, precision, optimizer and
# checkpoint flags (add ' \' to the last line).
# Check it: parasol explain problems/qwen3-30b-a3b-h100-64.yaml --megatron-args-file THIS_FILE
unset CUDA_DEVICE_MAX_CONNECTIONS  # FSDP refuses 1 (Megatron-LM main@d98e8a64 megatron/training/arguments.py:1048,1166)
torchrun --nnodes 8 --nproc-per-node 8 --node-rank "${NODE_RANK}" --master-addr "${MASTER_ADDR}" --master-port "${MASTER_PORT:-6000}" \
    pretrain_gpt.py \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 \
    --context-parallel-size 1 \
    --expert-model-parallel-size 8 \
    --expert-tensor-parallel-size 1 \
    --use-distributed-optimizer \
    --use-megatron-fsdp \
    --data-parallel-sharding-strategy optim_grads_params \
    --ckpt-format fsdp_dtensor \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --micro-batch-size 2 \
    --global-batch-size 512 \
    --seq-length 4096 \
    --moe-token-dispatcher-type alltoall \
    --moe-grouped-gemm
