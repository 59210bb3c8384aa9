"""Framework options that are not parallel degrees but that rules read (Megatron-LM flags).

Defaults are Megatron-LM's own defaults (megatron/training/arguments.py at the commits cited in
reference/megatron-rules.yaml), so a problem that says nothing gets what Megatron would do.
A problem sets them under `framework.options`; `--megatron-args` overrides them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from parasol.problems.model.architecture import Strict


class MegatronOptions(Strict):
    """Megatron-LM flags the rulebook reads; each field names its flag."""

    microbatch_group_size_per_vp_stage: PositiveInt | None = Field(
        default=None, description="--microbatch-group-size-per-virtual-pipeline-stage (default PP)")
    overlap_p2p_comm: bool = Field(default=True, description="--overlap-p2p-communication (on by default)")
    decoder_first_pipeline_num_layers: PositiveInt | None = Field(
        default=None, description="--decoder-first-pipeline-num-layers")
    decoder_last_pipeline_num_layers: PositiveInt | None = Field(
        default=None, description="--decoder-last-pipeline-num-layers")
    num_layers_per_virtual_pipeline_stage: PositiveInt | None = Field(
        default=None, description="--num-layers-per-virtual-pipeline-stage (Megatron derives VPP = L'/PP/k)")
    num_virtual_stages_per_pipeline_rank: PositiveInt | None = Field(
        default=None, description="--num-virtual-stages-per-pipeline-rank (Megatron takes it as VPP)")
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    pipeline_model_parallel_layout: str | None = Field(
        default=None, description="--pipeline-model-parallel-layout (E/L/t/m with | between stages)")
    hybrid_layer_pattern: str | None = Field(
        default=None, description="--hybrid-layer-pattern (V4 path: | separates pipeline stages)")
    moe_token_dispatcher_type: Literal["allgather", "alltoall", "flex"] = "allgather"
    moe_flex_dispatcher_backend: Literal["deepep", "hybridep", "ncclep"] = "deepep"
    moe_router_score_function: Literal["softmax", "sigmoid", "sqrtsoftplus"] = Field(
        default="softmax", description="--moe-router-score-function")
    moe_router_pre_softmax: bool = Field(default=False, description="--moe-router-pre-softmax")
    moe_router_load_balancing_type: tuple[str, ...] = Field(
        default=("aux_loss",), description="--moe-router-load-balancing-type (one value, or one per layer group)")
    moe_router_group_topk: PositiveInt | None = Field(default=None, description="--moe-router-group-topk")
    moe_router_num_groups: PositiveInt | None = Field(default=None, description="--moe-router-num-groups")
    moe_pad_expert_input_to_capacity: bool = False
    moe_grouped_gemm: bool = True
    moe_shared_expert_overlap: bool = False
    overlap_moe_expert_parallel_comm: bool = False
    add_bias_linear: bool = False
    cp_comm_type: Literal["p2p", "a2a", "allgather", "a2a+p2p"] = "p2p"
    hierarchical_context_parallel_sizes: tuple[PositiveInt, ...] | None = None
    cp_partition_mode: Literal["zigzag", "contiguous"] = Field(
        default="zigzag", description="CP sharding of a sequence (V4 needs contiguous)")
    dsa_kernel_backend: Literal["cudnn", "none", "tilelang"] = Field(
        default="cudnn", description="--dsa-kernel-backend (CLI default cudnn for DSv4)")
    deterministic_mode: bool = False
    dynamic_context_parallel: bool = Field(
        default=False, description="--dynamic-context-parallel (dev; seed 000: the V4 path supports static CP only)")
    num_distributed_optimizer_instances: PositiveInt = 1
    use_tp_pp_dp_mapping: bool = Field(default=False, description="order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp")
    offload_modules: tuple[str, ...] = Field(
        default=(), description="--fine-grained-activation-offloading --offload-modules: modules whose inputs "
                                "are kept on the host (transformer_config.py:1323-1345)")
    cpu_offloading: bool = Field(
        default=False, description="--cpu-offloading: Transformer Engine moves the activations of the first "
                                   "cpu_offloading_num_layers layers to the host (model_parallel_config.py:458-474)")
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_num_layers: PositiveInt | None = None
    kv_channels: PositiveInt | None = Field(
        default=None, description="--kv-channels (default hidden_size / num_attention_heads)")
    tp_comm_overlap: bool | None = Field(
        default=None, description="--tp-comm-overlap (needs sequence parallelism); none: parasol's choice, on "
                                  "when TP > 1 with sequence parallelism (a launch line without the flag: off)")
    overlap_grad_reduce: bool | None = Field(
        default=None, description="--overlap-grad-reduce (arguments.py:3121); none: parasol's choice, on "
                                  "(a launch line without the flag: off)")
    overlap_param_gather: bool | None = Field(
        default=None, description="--overlap-param-gather (arguments.py:3148; needs the distributed optimizer or "
                                  "FSDP and --overlap-grad-reduce, 1027-1029); none: on where allowed")
    delay_wgrad_compute: bool = Field(
        default=False, description="--delay-wgrad-compute (needs --overlap-moe-expert-parallel-comm, "
                                   "transformer_config.py:3073-3077): weight gradients run behind the EP combine")
    optimizer_cpu_offload: bool = Field(default=False, description="--optimizer-cpu-offload (arguments.py:2918)")
    optimizer_offload_fraction: float = Field(
        default=1.0, ge=0.0, le=1.0, description="--optimizer-offload-fraction: share of the optimizer state "
                                                 "on the host (arguments.py:2922)")
    cross_entropy_loss_fusion: bool = Field(default=False, description="--cross-entropy-loss-fusion")
    cross_entropy_fusion_impl: Literal["native", "te"] = Field(
        default="native", description="--cross-entropy-fusion-impl: the fused loss's kernels (model_parallel_config.py:325); "
                                      "Megatron-LM's CLI refuses te with the fusion on (arguments.py:1697-1702)")
    megatron_core_api: bool = Field(
        default=False, description="judge as a direct Megatron Core user (configs built in code, no validate_args): "
                                   "flags the CLI would silently rewrite are errors instead (e.g. SP with TP 1)")
    rampup_batch_size: tuple[PositiveInt, PositiveInt, PositiveInt] | None = Field(
        default=None, description="--rampup-batch-size START INCREMENT SAMPLES (deprecated and ignored)")
    recompute_activations: bool = Field(
        default=False, description="--recompute-activations (alias of --recompute-granularity selective)")
    moe_layer_recompute: bool = Field(
        default=False, description="--moe-layer-recompute (deprecated: selective recompute of the 'moe' module)")
    moe_enable_deepep: bool = Field(
        default=False, description="--moe-enable-deepep (deprecated: flex dispatcher with the deepep backend)")
    calculate_per_token_loss: bool = Field(
        default=False, description="--calculate-per-token-loss (needed by --hybrid-context-parallel)")
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise", "mxfp8", "custom"] = Field(
        default="delayed", description="--fp8-recipe under FP8 training (transformer_config.py:594-599, default "
                                       "delayed): decides whether the attention output projection keeps an FP8 copy")
    fp8_param_gather: bool | None = Field(
        default=None, description="--fp8-param-gather under FP8 training: Transformer Engine's GEMM weights are "
                                  "FP8 parameters, gathered in FP8, with no BF16 copy (argument_utils.py:312); "
                                  "none: parasol's choice, on where Megatron allows it (a launch line without "
                                  "the flag: off)")
    activation_func_fp8_input_store: bool = Field(
        default=False, description="--activation-func-fp8-input-store: the SwiGLU input kept for the backward in "
                                   "FP8 (transformer_config.py:227-229; SwiGLU only, 2467-2469)")
    use_precision_aware_optimizer: bool = Field(
        default=False, description="--use-precision-aware-optimizer: TE FusedAdam keeps the master weights and "
                                   "moments in the dtypes below (arguments.py:3667-3685; Adam only)")
    main_params_dtype: Literal["fp32", "fp16"] = Field(
        default="fp32", description="--main-params-dtype of the precision-aware optimizer (arguments.py:3673)")
    exp_avg_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = Field(
        default="fp32", description="--exp-avg-dtype: Adam's first moment under the precision-aware optimizer")
    exp_avg_sq_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = Field(
        default="fp32", description="--exp-avg-sq-dtype: Adam's second moment under the precision-aware optimizer")
    cpu_offloading_num_layers: int = Field(
        default=0, ge=0, le=1024, description="--cpu-offloading-num-layers: layers whose activations --cpu-offloading "
                                              "keeps on the host (a positive count turns it on, arguments.py:1950-1951)")
    cpu_offloading_activations: bool = Field(
        default=True, description="--cpu-offloading-activations (default on; --no-cpu-offloading-activations keeps them)")


def flex_backend(options: MegatronOptions) -> str:
    """The flex dispatcher's backend Megatron uses: deepep under the deprecated --moe-enable-deepep."""
    return "deepep" if options.moe_enable_deepep else options.moe_flex_dispatcher_backend


def uses_backend(options: MegatronOptions, *backends: str) -> bool:
    """Whether the flex dispatcher runs with one of `backends`."""
    return options.moe_token_dispatcher_type == "flex" and flex_backend(options) in backends
