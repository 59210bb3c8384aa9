#!/bin/bash
# NVIDIA/Megatron-LM dev@d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1 examples/moe_recipes/deepseek_v3/gb300/mxfp8_256GPU_TP1PP4EP64.yaml:
# its ENV_VARS exported and its ARGS as Megatron's recipe runner passes them (key -> --key-with-dashes,
# true -> the switch, false dropped, lists and blank-separated strings as several words); paths, logging and
# evaluation flags are left out.
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export NCCL_NVLS_ENABLE=0
export NCCL_GRAPH_REGISTER=0
export NVTE_FUSED_ATTN=1
export NVTE_NORM_FWD_USE_CUDNN=1
export NVTE_NORM_BWD_USE_CUDNN=1
export CUDA_DEVICE_MAX_CONNECTIONS=32
export NVTE_FWD_LAYERNORM_SM_MARGIN=24
export NVTE_BWD_LAYERNORM_SM_MARGIN=24
export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64
export USE_MNNVL=1
export NUM_OF_STAGES_DISPATCH_API=10
export NUM_OF_IN_FLIGHT_S2G_DISPATCH_API=8
torchrun --nproc_per_node 4 --nnodes 64 pretrain_gpt.py \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model unsloth/DeepSeek-V3 \
    --num-layers 61 \
    --hidden-size 7168 \
    --ffn-hidden-size 18432 \
    --num-attention-heads 128 \
    --kv-channels 128 \
    --max-position-embeddings 4096 \
    --normalization RMSNorm \
    --norm-epsilon 1e-6 \
    --swiglu \
    --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --position-embedding-type rope \
    --rotary-base 10000 \
    --make-vocab-size-divisible-by 3232 \
    --multi-latent-attention \
    --q-lora-rank 1536 \
    --kv-lora-rank 512 \
    --qk-head-dim 128 \
    --qk-pos-emb-head-dim 64 \
    --v-head-dim 128 \
    --rotary-scaling-factor 40 \
    --mscale 1.0 \
    --mscale-all-dim 1.0 \
    --qk-layernorm \
    --num-experts 256 \
    --moe-layer-freq '([0]*3+[1]*58)' \
    --moe-ffn-hidden-size 2048 \
    --moe-shared-expert-intermediate-size 2048 \
    --moe-router-load-balancing-type seq_aux_loss \
    --moe-router-topk 8 \
    --moe-router-pre-softmax \
    --moe-aux-loss-coeff 1e-4 \
    --moe-router-group-topk 4 \
    --moe-router-num-groups 8 \
    --moe-router-topk-scaling-factor 2.5 \
    --moe-router-score-function sigmoid \
    --moe-router-enable-expert-bias \
    --moe-router-bias-update-rate 1e-3 \
    --mtp-num-layers 1 \
    --mtp-loss-scaling-factor 0.1 \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --mock-data \
    --seq-length 4096 \
    --moe-router-force-load-balancing \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 4 \
    --expert-model-parallel-size 64 \
    --context-parallel-size 1 \
    --expert-tensor-parallel-size 1 \
    --pipeline-model-parallel-layout 'Et*4|(tttt|)*14tmL' \
    --use-distributed-optimizer \
    --sequence-parallel \
    --delay-wgrad-compute \
    --overlap-moe-expert-parallel-comm \
    --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend hybridep \
    --moe-hybridep-num-sms 32 \
    --moe-grouped-gemm \
    --moe-permute-fusion \
    --moe-router-fusion \
    --moe-router-dtype fp32 \
    --cuda-graph-impl transformer_engine \
    --cuda-graph-scope attn moe_router moe_preprocess \
    --te-rng-tracker \
    --cuda-graph-warmup-steps 1 \
    --use-mcore-models \
    --use-flash-attn \
    --transformer-impl transformer_engine \
    --micro-batch-size 1 \
    --global-batch-size 8192 \
    --train-samples 585937500 \
    --exit-duration-in-mins 220 \
    --no-save-optim \
    --no-check-for-nan-in-loss-and-grad \
    --cross-entropy-loss-fusion \
    --cross-entropy-fusion-impl te \
    --no-create-attention-mask-in-dataloader \
    --manual-gc \
    --manual-gc-interval 10 \
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
    --fp8-recipe mxfp8 \
    --fp8-format e4m3 \
    --fp8-param-gather \
    --reuse-grad-buf-for-mxfp8-param-ag \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --use-precision-aware-optimizer \
    --main-grads-dtype fp32 \
    --main-params-dtype fp32 \
    --exp-avg-dtype bf16 \
    --exp-avg-sq-dtype bf16 \
    --moe-router-padding-for-quantization \
    --init-method-std 0.02 \
    --no-load-optim \
    --no-load-rng \
    --auto-detect-ckpt-format \
    --enable-experimental
