#!/usr/bin/env bash
# parasol: Megatron-LM launch flags for llama-3.1-70b-h100-256, mapping 1 of 23 (Pareto rank 1)
#   TP8 PP2 CP1 EP1 ETP8 VPP16 MBS2 GBS512 seq 8192, recompute none; 256 GPUs = 32 nodes x 8 GPUs.
# Run it on every host of the host order (hosts.txt) with NODE_RANK = the host's line (0-based) and
# MASTER_ADDR = the first host: global rank = NODE_RANK * GPUs per node + local rank, the order in
# which Megatron's groups (tp-cp-ep-dp-pp) land on the nodes as parasol judged them.
# Only the parallel part is here: append the model, data, tokenizer, precision, optimizer and
# checkpoint flags (add ' \' to the last line).
# Check it: parasol explain problems/llama-3.1-70b-h100-256.yaml --megatron-args-file THIS_FILE
export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP or CP > 1 before Blackwell (Megatron-LM main@d98e8a64 megatron/training/arguments.py:1453-1479)
torchrun --nnodes 32 --nproc-per-node 8 --node-rank "${NODE_RANK}" --master-addr "${MASTER_ADDR}" --master-port "${MASTER_PORT:-6000}" \
    pretrain_gpt.py \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 2 \
    --context-parallel-size 1 \
    --sequence-parallel \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --tp-comm-overlap \
    --micro-batch-size 2 \
    --global-batch-size 512 \
    --seq-length 8192 \
    --pipeline-model-parallel-layout 'Et*2|t*2|(t*3|)*2,(t*2|)*2,(t*3|)*2,(t*2|)*2,(t*3|)*2,(t*2|)*2,(t*3|)*2,(t*2|)*2,(t*3|)*2,(t*2|)*2,(t*3|)*2,(t*2|)*2,(t*3|)*2,(t*2|)*2,t*3|t*3L'
