#!/bin/bash
# NVIDIA/Megatron-LM dev@d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1 examples/moe_recipes/qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_partial_cg.yaml:
# its ENV_VARS exported and its ARGS as Megatron's recipe runner passes them (key -> --key-with-dashes,
# true -> the switch, false dropped, lists and blank-separated strings as several words); paths, logging and
# evaluation flags are left out.
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export NCCL_NVLS_ENABLE=0
export HF_HUB_OFFLINE=1
export NVTE_FUSED_ATTN=1
export NVTE_NORM_FWD_USE_CUDNN=1
export NVTE_NORM_BWD_USE_CUDNN=1
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NCCL_GRAPH_REGISTER=0
torchrun --nproc_per_node 4 --nnodes 4 pretrain_gpt.py \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model Qwen/Qwen3-30B-A3B \
    --num-layers 48 \
    --hidden-size 2048 \
    --ffn-hidden-size 6144 \
    --num-attention-heads 32 \
    --kv-channels 128 \
    --max-position-embeddings 40960 \
    --group-query-attention \
    --num-query-groups 4 \
    --qk-layernorm \
    --normalization RMSNorm \
    --norm-epsilon 1e-6 \
    --swiglu \
    --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --position-embedding-type rope \
    --rotary-percent 1.0 \
    --rotary-base 1000000 \
    --make-vocab-size-divisible-by 1187 \
    --num-experts 128 \
    --moe-ffn-hidden-size 768 \
    --moe-router-load-balancing-type aux_loss \
    --moe-router-topk 8 \
    --moe-aux-loss-coeff 1e-3 \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --mock-data \
    --seq-length 4096 \
    --moe-router-force-load-balancing \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 \
    --expert-model-parallel-size 16 \
    --context-parallel-size 1 \
    --expert-tensor-parallel-size 1 \
    --use-distributed-optimizer \
    --sequence-parallel \
    --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend hybridep \
    --moe-grouped-gemm \
    --moe-permute-fusion \
    --moe-router-fusion \
    --moe-router-dtype fp32 \
    --external-cuda-graph \
    --cuda-graph-scope attn moe_router moe_preprocess \
    --te-rng-tracker \
    --use-mcore-models \
    --use-flash-attn \
    --transformer-impl transformer_engine \
    --micro-batch-size 4 \
    --global-batch-size 512 \
    --train-samples 268554688 \
    --exit-duration-in-mins 230 \
    --no-create-attention-mask-in-dataloader \
    --cross-entropy-loss-fusion \
    --cross-entropy-fusion-impl te \
    --manual-gc \
    --manual-gc-interval 5 \
    --lr 0.00012 \
    --min-lr 1.2e-05 \
    --lr-decay-style cosine \
    --lr-decay-samples 255126953 \
    --lr-warmup-samples 162761 \
    --weight-decay 0.1 \
    --clip-grad 1.0 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --bf16 \
    --fp8-format e4m3 \
    --fp8-recipe mxfp8 \
    --init-method-std 0.02 \
    --finetune \
    --auto-detect-ckpt-format \
    --no-load-rng \
    --no-load-optim \
    --enable-experimental
