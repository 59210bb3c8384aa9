"""The problem language: what a `problem.yaml` may say, validated by pydantic.

A problem names a model (catalog name, inline architecture, or a HuggingFace config.json), the
training run, the hardware (preset name or inline topology, and the GPU count), the framework's
rule packs, an optional search space, an optional hand-picked mapping and the objectives.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, model_validator

from parasol.bounds import (
    MAX_CHOICES,
    MAX_FACTOR,
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_MICRO_BATCH,
    MAX_RESTRICTIONS,
    MAX_SEQ_LEN,
    MAX_WORKSPACE_GB,
)
from parasol.problems.contract_spec import Contract
from parasol.problems.mapping import GpuCount, LayerCount, MicroBatch, RankOrder, Recompute
from parasol.problems.model.architecture import Strict
from parasol.problems.options import MegatronOptions

RECOMPUTE_MODULES = (
    "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts", "gdn_norm_out", "gdp_in_proj",
    "gdp_qkv", "mhc",
)
"""The selective recompute modules Megatron-LM accepts (transformer_config.py:1944-1961; any other stops it).
UNPRICED_RECOMPUTE_MODULES are accepted but not priced."""

UNPRICED_RECOMPUTE_MODULES = ("gdn_norm_out", "gdp_in_proj", "gdp_qkv")
"""Recompute modules of gated DeltaNet's output norm and gated DeltaProduct's input projection and QKV preparation
(transformer_config.py:572-575): the ledger keeps their activations and the step time adds no recompute for them
(an upper bound on memory, a lower one on time); the launch reader notes them."""


class Precision(StrEnum):
    """Compute precision of the GEMMs; under FP8, Transformer Engine's GEMM weights are held in FP8 as well
    (beside the BF16 parameter, or alone with --fp8-param-gather: constraints/physics/weight_format.py)."""

    bf16 = "bf16"
    fp8 = "fp8"


class Optimizer(StrEnum):
    """Adam keeps two FP32 moments per parameter; Muon one momentum for its 2-D matrices."""

    adam = "adam"
    muon = "muon"


class Training(Strict):
    """The training run: sequence, batch, precision, optimizer and memory-saving choices."""

    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="tokens per packed sequence, e.g. 8192")
    global_batch: int = Field(ge=1, le=MAX_GLOBAL_BATCH, description="sequences per optimizer step (GBS), e.g. 4096")
    micro_batch: int | None = Field(default=None, ge=1, le=MAX_MICRO_BATCH, description="pin the micro-batch size (MBS)")
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adam
    distributed_optimizer: bool = Field(
        default=True, description="shard optimizer state and FP32 master weights over the data-parallel group"
    )
    grad_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32", description="dtype of the gradient buffer (Megatron accumulates main grads in FP32)"
    )
    recompute: Recompute = Recompute.none
    recompute_modules: tuple[Literal[RECOMPUTE_MODULES], ...] = Field(  # type: ignore[valid-type]
        default=("core_attn",), description="modules recomputed under selective recompute (Megatron default core_attn)"
    )
    capacity_factor: PositiveFloat | None = Field(
        default=None, le=MAX_FACTOR, description="MoE expert capacity factor; none means dropless routing"
    )
    dispatch_headroom: float = Field(
        default=1.5, ge=1.0, le=MAX_FACTOR,
        description="dropless routing: the dispatch receive buffer is sized for this multiple of the balanced load",
    )
    workspace_gb: float = Field(default=2.0, ge=0, le=MAX_WORKSPACE_GB, description="GEMM/attention/communication workspaces (GB)")
    packed_sequences: bool = Field(default=False, description="packed THD input (needed by DSv4 CP > 1)")
    sequence_parallel: bool = Field(default=True, description="Megatron --sequence-parallel when TP > 1")
    frozen_base_weights: bool = Field(
        default=False, description="LoRA/PEFT fine-tuning: the base weights get no gradients and no optimizer "
                                   "state (adapters are negligible next to them)")
    pipeline_schedule: Literal["megatron", "dualpipe", "dualpipev"] = Field(
        default="megatron", description="megatron: 1F1B, interleaved when VPP > 1; dualpipe: DeepSeek's bidirectional "
        "schedule, each rank holding its stage and the mirrored one (VPP 1); dualpipev: its V-shape cut-in-half "
        "form, each rank holding chunk k and 2·PP−1−k (VPP 2) (DeepSeek-V3 report §3.2.1; deepseek-ai/DualPipe)")
    fsdp: Literal["none", "megatron-fsdp", "torch-fsdp2"] = Field(
        default="none", description="fully sharded data parallelism (ZeRO-3): weights, gradients and optimizer "
                                    "state sharded over data parallelism, weights gathered per use "
                                    "(--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params, "
                                    "or --use-torch-fsdp2)")


class HardwareSection(Strict):
    """Which cluster: a preset name with optional overrides, or an inline GPU and topology."""

    gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs in the job (a partial-node job runs the same number of "
                                                      "ranks on every node it uses)")
    ranks_per_node: int | None = Field(
        default=None, ge=1, le=MAX_GPUS, description="ranks started per node (torchrun --nproc_per_node); default: "
                                                     "whole nodes when gpus fills them, else the largest count that "
                                                     "divides gpus")
    preset: str | None = Field(default=None, description="hardware preset name, see `parasol hardware`")
    gpu: dict | None = Field(default=None, description="GPU fields overriding the preset's")
    topology: dict | None = Field(default=None, description="topology fields overriding the preset's")

    @model_validator(mode="after")
    def _preset_or_inline(self) -> HardwareSection:
        if self.preset is None and (self.gpu is None or self.topology is None):
            raise ValueError("give hardware.preset, or both hardware.gpu and hardware.topology inline")
        return self


class RulePack(StrEnum):
    """Framework rule packs a problem can switch on."""

    megatron_core = "megatron-core"
    deepseek_v4 = "deepseek-v4"
    seed_claims = "seed-claims"


class Framework(Strict):
    """The training framework and which of its rule packs apply."""

    name: Literal["megatron-lm"] = "megatron-lm"
    rule_packs: tuple[RulePack, ...] = (RulePack.megatron_core,)
    options: MegatronOptions = MegatronOptions()
    tp_across_nvlink: Literal["warning", "error"] = Field(
        default="warning", description="a TP or ETP group that does not fit whole NVLink domains (crosses a node "
                                       "on HGX): a warning, or an error that rules the mapping out")


Degree = GpuCount | Annotated[list[GpuCount], Field(max_length=MAX_CHOICES)]
Dispatcher = Literal["allgather", "alltoall", "flex"]
"""A Megatron MoE token dispatcher (--moe-token-dispatcher-type)."""
CPCommType = Literal["p2p", "a2a", "allgather", "a2a+p2p"]
"""A Megatron CP communication type (--cp-comm-type)."""


class SearchSpace(Strict):
    """Allowed values (a list) or a pin (a number) per degree; absent means every legal value."""

    tp: Degree | None = None
    pp: Degree | None = None
    cp: Degree | None = None
    ep: Degree | None = None
    etp: Degree | None = None
    vpp: LayerCount | Annotated[list[LayerCount], Field(max_length=MAX_CHOICES)] | None = None
    mbs: MicroBatch | Annotated[list[MicroBatch], Field(max_length=MAX_CHOICES)] | None = None
    recompute: Recompute | list[Recompute] | None = Field(
        default=None, description="recompute choices the solver may pick (default: none, selective, full)")
    gpus: GpuCount | Annotated[list[GpuCount], Field(max_length=MAX_CHOICES)] | None = Field(
        default=None, description="training-pool sizes the solver may choose (default: hardware.gpus); with "
        "contract.rollout.cluster_devices the rest of the cluster is the rollout pool (seed 003 §8)")
    rank_order: RankOrder | list[RankOrder] | None = Field(
        default=None, description="rank orders the solver may pick (default: Megatron's tp-cp-ep-dp-pp, and "
        "tp-cp-ep-pp-dp where it is legal and places groups differently; framework.options."
        "use_tp_pp_dp_mapping pins it)")
    dispatcher: Dispatcher | Annotated[list[Dispatcher], Field(min_length=1, max_length=3)] | None = Field(
        default=None, description="MoE token dispatchers the solver may pick for rows with EP > 1 (default: "
        "framework.options.moe_token_dispatcher_type when the problem sets it, else allgather, alltoall and, "
        "on GPUs with FP8 whose all-to-all is not fixed-size, flex)")
    cp_comm_type: CPCommType | Annotated[list[CPCommType], Field(min_length=1, max_length=4)] | None = Field(
        default=None, description="CP communication types the solver may pick for rows with CP > 1 (default: "
        "framework.options.cp_comm_type when the problem sets it, else p2p, a2a and allgather for GQA/MHA "
        "attention, the option's value for MLA and DeepSeek-V4 attention)")


class Objective(StrEnum):
    """What the solver minimises (or, for tokens_per_s, maximises)."""

    step_time = "step_time"
    peak_memory = "peak_memory"
    network_bytes = "network_bytes"
    bubble = "bubble"
    gpus = "gpus"
    effective_tokens_per_s = "effective_tokens_per_s"


class MappingSection(Strict):
    """A hand-picked mapping, checked by `parasol explain` when no --set is given."""

    tp: GpuCount = 1
    pp: GpuCount = 1
    cp: GpuCount = 1
    ep: GpuCount = 1
    etp: GpuCount | None = None
    vpp: LayerCount = 1
    mbs: MicroBatch | None = None
    recompute: Recompute | None = None
    layout: list[int] | str | None = None
    rank_order: RankOrder | None = None


class RestrictionRule(Strict):
    """A user-declared restriction with its own rule id and message (parsed by constraints/rules/user.py)."""

    expr: str = Field(min_length=1, description="a condition on the mapping, e.g. 'ep * etp <= 64'")
    id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                           description="rule id in reports (default user-<n>, n counting from 1)")
    message: str | None = Field(default=None, description="what to tell the user when it does not hold")


Restriction = str | RestrictionRule


class ProblemFile(Strict):
    """The whole `problem.yaml` before the model and hardware are resolved."""

    name: str | None = None
    description: str = ""
    model: str | dict = Field(description="catalog name, inline architecture, or {hf_config: path}")
    training: Training
    hardware: HardwareSection
    framework: Framework = Framework()
    search: SearchSpace = SearchSpace()
    mapping: MappingSection | None = None
    objectives: tuple[Objective, ...] = (Objective.step_time, Objective.peak_memory)
    restrictions: tuple[Restriction, ...] = Field(
        default=(), max_length=MAX_RESTRICTIONS, description="user-declared conditions every mapping must meet: 'pp in (4, 8)' or {expr, id, message}")
    contract: Contract = Field(default=Contract(), description="seed 003's constraint contract inputs "
                               "(problems/contract_spec.py): routing skew, α, reserve, rollout pool, publishing, goodput")
