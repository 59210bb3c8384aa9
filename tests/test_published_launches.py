"""Published launch lines that ran are judged to fit, with the flags they were launched with.

NVIDIA's Megatron-MoE-ModelZoo (github.com/yanring/Megatron-MoE-ModelZoo@e865051) publishes the best DeepSeek-V3
configurations it measured: best_practice/deepseek-v3/run_deepseek_v3_h100.sh and run_deepseek_v3_b200.sh call
sbatch_benchmarking.sh, which joins model_configs/benchmarking/DeepSeek-V3.yaml's MODEL_ARGS, the case's flags
and, per precision, `--fp8-recipe blockwise --fp8-format e4m3 [--fp8-param-gather] --use-precision-aware-optimizer
--main-grads-dtype fp32 --main-params-dtype fp32 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16` (fp8; mxfp8 the
same with its recipe), `--optimizer-cpu-offload` under OPTIMIZER_OFFLOAD=1 (without --fp8-param-gather) and the
DeepEP flex dispatcher. The lines below are those joins, less flags parasol reads nothing from (paths, logging,
learning rate); the vocabulary is DeepSeek-V3's tokenizer's (129,280).
"""

from __future__ import annotations

import pytest

from parasol.constraints.evaluate import evaluate
from parasol.problems.inputs import explain_inputs

DSV3 = ("--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 --kv-channels 128 "
        "--position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights "
        "--multi-latent-attention --qk-layernorm --disable-bias-linear --vocab-size 129280 "
        "--num-experts 256 --moe-layer-freq ([0]*3+[1]*58) --moe-ffn-hidden-size 2048 "
        "--moe-shared-expert-intermediate-size 2048 --moe-router-load-balancing-type seq_aux_loss --moe-router-topk 8 "
        "--moe-grouped-gemm --moe-router-group-topk 4 --moe-router-num-groups 8 --moe-router-score-function sigmoid "
        "--moe-router-enable-expert-bias --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 "
        "--qk-pos-emb-head-dim 64 --v-head-dim 128 --mtp-num-layers 1 "
        "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --sequence-parallel "
        "--cross-entropy-loss-fusion --bf16 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep "
        "--expert-tensor-parallel-size 1 --micro-batch-size 1")
OPTIMIZER = "--use-precision-aware-optimizer --main-grads-dtype fp32 --main-params-dtype fp32 " \
            "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
FP8 = f"--fp8-recipe blockwise --fp8-format e4m3 {OPTIMIZER}"
LONG = ("--pipeline-model-parallel-size 8 --expert-model-parallel-size 32 --context-parallel-size 1 "
        "--recompute-granularity selective --recompute-modules mla_up_proj moe mlp layernorm "
        "--pipeline-model-parallel-layout Et*2|(tt|)*22t|(tt|)*7mL --optimizer-cpu-offload")

RUNS = {
    "1,024 H100, 4k, A2A overlap": ("h100-hgx", 1024, f"{FP8} --fp8-param-gather --tensor-model-parallel-size 2 "
                                    "--pipeline-model-parallel-size 8 --expert-model-parallel-size 64 "
                                    "--global-batch-size 8192 --seq-length 4096 --recompute-granularity selective "
                                    "--recompute-modules mla_up_proj mlp --pipeline-model-parallel-layout Et|(tt|)*30mL "
                                    "--delay-wgrad-compute --overlap-moe-expert-parallel-comm"),
    "256 B200, 4k, MXFP8": ("b200-hgx", 256, f"--fp8-recipe mxfp8 --fp8-format e4m3 {OPTIMIZER} --fp8-param-gather "
                            "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 8 "
                            "--expert-model-parallel-size 32 --global-batch-size 2048 --seq-length 4096 "
                            "--recompute-granularity selective --recompute-modules mla_up_proj mlp "
                            "--pipeline-model-parallel-layout Et|(tt|)*30mL "
                            "--delay-wgrad-compute --overlap-moe-expert-parallel-comm"),
    **{f"256 H100, {seq // 1024}k": ("h100-hgx", 256, f"{FP8} {LONG} --tensor-model-parallel-size {tp} "
                                     f"--global-batch-size {gbs} --seq-length {seq}")
       for tp, gbs, seq in ((1, 8192, 4096), (4, 3840, 16384), (8, 1920, 32768), (16, 960, 65536), (32, 480, 131072))},
    "512 H100, 256k": ("h100-hgx", 512, f"{FP8} {LONG} --tensor-model-parallel-size 64 --global-batch-size 240 "
                                        "--seq-length 262144"),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_published_deepseek_v3_configurations_fit(name: str) -> None:
    """Each ran, so each fits its GPUs' usable HBM and breaks no rule (before the MLA latents were kept on the
    sequence-parallel shard, the 128k and 256k lines were judged at 83.4 and 126.3 GB)."""
    preset, gpus, flags = RUNS[name]
    ex = explain_inputs(None, (), (f"{DSV3} {flags}", "--megatron-args"), hardware=preset, gpus=gpus)
    evaluation = evaluate(ex.problem, ex.mapping)
    assert evaluation.feasible, [(v.rule, v.message) for v in evaluation.violations]
    assert evaluation.facts.ledger is not None and evaluation.facts.ledger.peak.slack_gb > 0
