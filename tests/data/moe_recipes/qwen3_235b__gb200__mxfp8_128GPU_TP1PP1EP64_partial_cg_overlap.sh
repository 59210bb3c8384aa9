#!/bin/bash
# NVIDIA/Megatron-LM dev@d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1 examples/moe_recipes/qwen3_235b/gb200/mxfp8_128GPU_TP1PP1EP64_partial_cg_overlap.yaml:
# its ENV_VARS exported and its ARGS as Megatron's recipe runner passes them (key -> --key-with-dashes,
# true -> the switch, false dropped, lists and blank-separated strings as several words); paths, logging and
# evaluation flags are left out.
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,graph_capture_record_stream_reuse:True
export TORCH_NCCL_AVOID_RECORD_STREAMS=0
export CUDA_DEVICE_MAX_CONNECTIONS=32
export NCCL_NVLS_ENABLE=0
export NCCL_GRAPH_REGISTER=0
export NCCL_DEBUG=VERSION
export NVTE_FUSED_ATTN=1
export NVLINK_DOMAIN_SIZE=72
export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64
export USE_MNNVL=1
export USE_TE_OPS=True
export CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=True
export NVTE_NORM_FWD_USE_CUDNN=0
export NVTE_NORM_BWD_USE_CUDNN=0
export NVTE_FWD_LAYERNORM_SM_MARGIN=20
export NVTE_BWD_LAYERNORM_SM_MARGIN=20
export NVTE_CPU_OFFLOAD_V1=1
export NUM_OF_TOKENS_PER_CHUNK_COMBINE_API=128
export NUM_OF_TOKENS_PER_CHUNK_DISPATCH_API=128
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export PYTHONWARNINGS=ignore
torchrun --nproc_per_node 4 --nnodes 32 pretrain_gpt.py \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model Qwen/Qwen3-235B-A22B \
    --num-layers 94 \
    --hidden-size 4096 \
    --ffn-hidden-size 12288 \
    --num-attention-heads 64 \
    --kv-channels 128 \
    --max-position-embeddings 4096 \
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
    --moe-ffn-hidden-size 1536 \
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
    --expert-model-parallel-size 64 \
    --context-parallel-size 1 \
    --expert-tensor-parallel-size 1 \
    --use-distributed-optimizer \
    --sequence-parallel \
    --account-for-embedding-in-pipeline-split \
    --account-for-loss-in-pipeline-split \
    --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend hybridep \
    --moe-grouped-gemm \
    --moe-permute-fusion \
    --moe-router-fusion \
    --moe-router-dtype fp32 \
    --moe-router-padding-for-quantization \
    --moe-hybridep-num-sms 32 \
    --cuda-graph-impl transformer_engine \
    --cuda-graph-scope attn moe_router moe_preprocess \
    --cuda-graph-warmup-steps 2 \
    --delay-wgrad-compute \
    --overlap-moe-expert-parallel-comm \
    --te-rng-tracker \
    --cross-entropy-fusion-impl te \
    --use-mcore-models \
    --use-flash-attn \
    --transformer-impl transformer_engine \
    --micro-batch-size 1 \
    --global-batch-size 8192 \
    --train-samples 268554688 \
    --exit-duration-in-mins 230 \
    --distributed-timeout-minutes 220 \
    --no-create-attention-mask-in-dataloader \
    --cross-entropy-loss-fusion \
    --manual-gc \
    --manual-gc-interval 5 \
    --lr 3.9e-06 \
    --min-lr 3.9e-07 \
    --lr-warmup-init 3.9e-07 \
    --lr-decay-style cosine \
    --lr-decay-samples 584765624 \
    --lr-warmup-samples 1536000 \
    --weight-decay 0.1 \
    --clip-grad 1.0 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --bf16 \
    --fp8-format e4m3 \
    --fp8-recipe mxfp8 \
    --fp8-param-gather \
    --reuse-grad-buf-for-mxfp8-param-ag \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --use-precision-aware-optimizer \
    --main-grads-dtype fp32 \
    --main-params-dtype fp32 \
    --exp-avg-dtype bf16 \
    --exp-avg-sq-dtype bf16 \
    --init-method-std 0.02 \
    --finetune \
    --auto-detect-ckpt-format \
    --no-load-rng \
    --no-load-optim \
    --enable-experimental
