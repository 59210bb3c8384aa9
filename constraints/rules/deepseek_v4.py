"""DeepSeek-V4 rule pack: what Megatron-LM's V4 hybrid-attention path (CSA/HCA + sliding window)
accepts, read from the dev branch where the path lives.

Sources: reference/megatron-rules.yaml (ids dsv4-*, hybrid-pattern-*, contiguous-cp-*,
packing-scheduler-moe-dispatcher; Megatron-LM dev@d48bd6be, hybrid-pattern rules main@d98e8a64) and
megatron-groups.md §3 (the seed's claims checked against that code) for the enforcement stages.

Modelling choices, stated once:
- local rows of the DSv4 CP boundary exchange = the packed THD rows of one microbatch held by one CP
  rank, padded up: ceil(MBS·S / CP) (cp_utils "padded_total_tokens / cp"); seed 000's C has
  8192/4 = 2,048 rows against D_window = 128.
- the cuDNN kernels need SM >= 90; the SM is known only for the NVIDIA parts listed in
  `_COMPUTE_CAPABILITY` (by GPU name). For any other accelerator the SM half of the rule is not judged.
- the hybrid layer pattern's `|` segments fix PP·VPP; Megatron's --num-layers-per-virtual-pipeline-stage
  and --num-virtual-stages-per-pipeline-rank have no counterpart in parasol (VPP is a degree), so the
  exclusivity rule checks the layout string and the account-for flags, and the segment rule pins VPP.
  The deprecated pattern without pipes (hybrid-pattern-no-pipes-even-split) counts pattern characters,
  not blocks, and is not modelled.
- contiguous-cp-requires-packing-scheduler, contiguous-cp-variants and dynamic-cp-restrictions are dev
  rules on flags of the V4 path (cp_partition_mode, dynamic_context_parallel); they sit here in the
  megatron-core pack and judge every model. Dynamic CP's CUDA-graph, FSDP, dataloader and minimum-size
  conditions read flags parasol does not carry.
- dsv4-cp-cudnn-frontend (a cuDNN Frontend build feature) and the SM90 dense-indexer-loss check read
  nothing parasol can observe and are not modelled.

Problem constants the CP-SAT side reads (the GPU's SM, D_window, the output-projection grouping) come
from constraints/core/consts.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parasol.constraints.core.base import (
    Citation,
    Constraint,
    Facts,
    Family,
    remainder_slack,
)
from parasol.hardware.gpu import compute_capability
from parasol.problems.mapping import Recompute
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.model.architecture import DSV4Attention, window_rows
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import RulePack

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from parasol.constraints.core.decision_vars import DecisionVars
    from parasol.problems.loader import Problem

DEV = "Megatron-LM dev@d48bd6be "
MAIN = "Megatron-LM main@d98e8a64 "
CUDNN_MIN_SM = 90


def local_rows(mbs: int, seq_len: int, cp: int) -> int:
    """Packed THD rows one CP rank holds for one microbatch, padded up to whole rows per rank."""
    return -(-mbs * seq_len // cp)


def pattern_segments(pattern: str) -> int:
    """Pipeline segments of a --hybrid-layer-pattern: `|`-separated parts of the main pattern (before
    the first `/`, which starts the MTP sub-patterns)."""
    return pattern.split("/")[0].count("|") + 1


def forbid(model: cp_model.CpModel, enforce: cp_model.IntVar) -> None:
    """A rule whose condition depends only on constants and fails: the rule cannot be enforced."""
    model.AddBoolOr([enforce.Not()])


class DSv4Rule(Constraint):
    """Base of the pack: applies to models with DeepSeek-V4 hybrid attention."""

    family = Family.feature
    pack = RulePack.deepseek_v4
    unit = "settings"
    exact = True

    def applies(self, problem: Problem) -> bool:
        return isinstance(problem.model.attention, DSV4Attention)


class DSv4TP1(DSv4Rule):
    """The V4 hybrid attention runs without tensor parallelism."""

    id = "dsv4-tp1"
    family = Family.divisibility
    citation = Citation(DEV + "megatron/core/transformer/transformer_config.py:1760-1762; "
                        "megatron/core/transformer/experimental_attention_variant/deepseek_v4_hybrid_attention.py:90-92",
                        MegatronStage.config)
    unit = "TP"
    summary = "DSv4 hybrid attention -> TP == 1"

    def slack(self, f: Facts) -> float:
        return float(1 - f.mapping.tp)

    def message(self, f: Facts) -> str:
        return f"DSv4 Hybrid Attention only supports TP size 1 (TP = {f.mapping.tp})."

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        model.Add(v.tp == 1).OnlyEnforceIf(enforce)


class DSv4CPRequiresTHD(DSv4Rule):
    """CP > 1 on the V4 path needs packed THD input (training.packed_sequences)."""

    id = "dsv4-cp-requires-thd"
    family = Family.context
    citation = Citation(DEV + "megatron/core/transformer/transformer_config.py:1566-1574 (contiguous CP needs "
                        "THD from a sequence_packing_scheduler); deepseek_v4_hybrid_attention.py:265-268; "
                        "csa.py:2101-2109", MegatronStage.config)
    unit = "CP"
    summary = "DSv4 and CP > 1 -> packed THD input"

    def in_force(self, f: Facts) -> bool:
        """Only unpacked (BSHD) input keeps CP at 1."""
        return not f.training.packed_sequences

    def slack(self, f: Facts) -> float:
        return 0.0 if f.training.packed_sequences else float(1 - f.mapping.cp)

    def message(self, f: Facts) -> str:
        packed = "packed THD" if f.training.packed_sequences else "unpacked BSHD"
        return f"DSv4 Hybrid with CP requires qkv_format='thd' (CP = {f.mapping.cp}, input is {packed})."

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if not v.consts["packed_sequences"]:
            model.Add(v.cp == 1).OnlyEnforceIf(enforce)


class DSv4CPContiguous(DSv4Rule):
    """CP > 1 on the V4 path needs cp_partition_mode='contiguous' (Megatron's default is zigzag)."""

    id = "dsv4-cp-contiguous"
    family = Family.context
    citation = Citation(DEV + "megatron/core/transformer/transformer_config.py:1611-1616; "
                        "deepseek_v4_hybrid_attention.py:269-271", MegatronStage.config)
    unit = "CP"
    summary = "DSv4 and CP > 1 -> cp_partition_mode == 'contiguous'"

    def in_force(self, f: Facts) -> bool:
        """Only a non-contiguous CP partition keeps CP at 1."""
        return f.options.cp_partition_mode != "contiguous"

    def slack(self, f: Facts) -> float:
        return 0.0 if f.options.cp_partition_mode == "contiguous" else float(1 - f.mapping.cp)

    def message(self, f: Facts) -> str:
        return (f"DSv4 Hybrid with context parallelism requires cp_partition_mode='contiguous' "
                f"(CP = {f.mapping.cp}, cp_partition_mode = '{f.options.cp_partition_mode}').")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if v.options.cp_partition_mode != "contiguous":
            model.Add(v.cp == 1).OnlyEnforceIf(enforce)


def _backend_faults(options: MegatronOptions, sm: int | None) -> list[str]:
    """Why the DSA kernel backend cannot run, in Megatron's words (empty when it can)."""
    if options.dsa_kernel_backend == "tilelang":
        return ["dsv4_hybrid does not support dsa_kernel_backend='tilelang'; use 'cudnn' for fused CSA "
                "kernels or 'none' for the PyTorch fallback."]
    if options.dsa_kernel_backend == "cudnn" and sm is not None and sm < CUDNN_MIN_SM:
        return [f"dsa_kernel_backend='cudnn' requires SM90+ (Hopper or later), this GPU is SM{sm}; "
                "use dsa_kernel_backend='none'."]
    return []


class DSv4KernelBackend(DSv4Rule):
    """The DSA kernels: cudnn (SM >= 90) or none (PyTorch fallback); tilelang is rejected."""

    id = "dsv4-kernel-backend"
    citation = Citation(DEV + "megatron/core/transformer/transformer_config.py:1766-1791; "
                        "megatron/training/arguments.py:4983-4995 (CLI default cudnn); SM by GPU name from "
                        "NVIDIA's CUDA GPUs table", MegatronStage.config)
    summary = "dsa_kernel_backend in {cudnn, none}; cudnn -> SM >= 90"

    def slack(self, f: Facts) -> float:
        return float(-len(_backend_faults(f.options, compute_capability(f.problem.hardware.gpu.name))))

    def message(self, f: Facts) -> str:
        sm = compute_capability(f.problem.hardware.gpu.name)
        faults = _backend_faults(f.options, sm)
        if faults:
            return faults[0]
        where = f"SM{sm}" if sm is not None else f"{f.problem.hardware.gpu.name} (SM not known to parasol)"
        return f"dsa_kernel_backend='{f.options.dsa_kernel_backend}' on {where}"

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if _backend_faults(v.options, v.consts["gpu_sm"] or None):
            forbid(model, enforce)


class DSv4NoCoreAttnRecompute(DSv4Rule):
    """Selective recompute may not checkpoint core attention; Megatron's default module list is
    ['core_attn'], so plain selective recompute is rejected unless the modules are given."""

    id = "dsv4-no-core-attn-recompute"
    family = Family.memory
    citation = Citation(DEV + "megatron/core/transformer/experimental_attention_variant/"
                        "deepseek_v4_hybrid_attention.py:94-96; megatron/core/transformer/attention.py:391-394",
                        MegatronStage.model_build)
    summary = "DSv4 -> not (selective recompute and 'core_attn' in recompute_modules)"

    def slack(self, f: Facts) -> float:
        hit = f.mapping.recompute is Recompute.selective and "core_attn" in f.training.recompute_modules
        return -1.0 if hit else 0.0

    def message(self, f: Facts) -> str:
        modules = ", ".join(f.training.recompute_modules)
        return (f"Checkpoint core attention is not supported in DSv4 Hybrid Attention (recompute "
                f"{f.mapping.recompute.value}, recompute_modules [{modules}]; Megatron's default is "
                f"['core_attn']: list the modules, e.g. [moe_act]).")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        selective = v.recompute.get(Recompute.selective.value)
        if v.consts["recompute_core_attn"] and selective is not None:
            model.AddImplication(enforce, selective.Not())


class DSv4NoQkvLinearOffload(DSv4Rule):
    """Fine-grained activation offload may not include qkv_linear."""

    id = "dsv4-no-qkv-linear-offload"
    family = Family.memory
    citation = Citation(DEV + "megatron/core/transformer/experimental_attention_variant/"
                        "deepseek_v4_hybrid_attention.py:97-99; megatron/core/transformer/attention.py:396-399",
                        MegatronStage.model_build)
    summary = "DSv4 -> 'qkv_linear' not in offload_modules"

    def slack(self, f: Facts) -> float:
        return -1.0 if "qkv_linear" in f.options.offload_modules else 0.0

    def message(self, f: Facts) -> str:
        return f"Offload qkv linear is not supported in DSv4 Hybrid Attention (offload_modules {list(f.options.offload_modules)})."

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if "qkv_linear" in v.options.offload_modules:
            forbid(model, enforce)


class DSv4CPLocalRowsGeWindow(DSv4Rule):
    """With CP > 1 every rank's packed rows must cover the attention window for the boundary exchange."""

    id = "dsv4-cp-local-rows-ge-window"
    family = Family.context
    citation = Citation(DEV + "megatron/core/transformer/experimental_attention_variant/csa_utils/"
                        "cp_utils.py:128-139,191-202; seed 000 §CP (C: 8192/4 = 2,048 rows)", MegatronStage.runtime)
    unit = "rows"
    summary = "DSv4 and CP > 1 -> ceil(MBS·S/CP) >= D_window = max(window, d_comp)"
    exact = False

    def in_force(self, f: Facts) -> bool:
        """Only CP > 1 exchanges window boundaries."""
        return f.mapping.cp > 1

    def slack(self, f: Facts) -> float:
        m = f.mapping
        spare = local_rows(m.mbs, m.seq_len, m.cp) - window_rows(f.model.attention)
        return float(spare) if m.cp > 1 else float(max(spare, 0))

    def message(self, f: Facts) -> str:
        m = f.mapping
        rows, window = local_rows(m.mbs, m.seq_len, m.cp), window_rows(f.model.attention)
        text = f"DSv4 CP boundary exchange requires local rows >= D_window: local_rows={rows}, D_window={window}."
        return text if m.cp > 1 else f"{text} (CP = 1: no boundary exchange)"

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        window = v.consts["dsv4_window_rows"]
        split = v.at_least("cp", 2)
        model.Add(v.seq_len * v.mbs >= (window - 1) * v.cp + 1).OnlyEnforceIf([enforce, split])


class DSv4OGroups(DSv4Rule):
    """The grouped output projection splits the heads' output width evenly into o_groups."""

    id = "dsv4-o-groups"
    family = Family.divisibility
    citation = Citation(DEV + "megatron/core/transformer/experimental_attention_variant/"
                        "deepseek_v4_hybrid_attention.py:171-176", MegatronStage.model_build)
    unit = "channels"
    summary = "(num_attention_heads · v_head_dim) % o_groups == 0"

    def slack(self, f: Facts) -> float:
        att = f.model.attention
        return remainder_slack(att.num_heads * att.head_dim, att.o_groups)

    def message(self, f: Facts) -> str:
        att = f.model.attention
        return (f"num_attention_heads * v_head_dim ({att.num_heads} * {att.head_dim}) must be divisible by "
                f"o_groups ({att.o_groups})")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        v.divides(v.consts["dsv4_o_groups"], v.consts["dsv4_o_width"], "dsv4_o_groups", enforce)


def _pattern_conflicts(options: MegatronOptions) -> list[str]:
    """Flags that may not be combined with --hybrid-layer-pattern (arguments.py:814-838)."""
    if options.hybrid_layer_pattern is None:
        return []
    flags = [("num_layers_per_virtual_pipeline_stage", options.num_layers_per_virtual_pipeline_stage is not None),
             ("num_virtual_stages_per_pipeline_rank", options.num_virtual_stages_per_pipeline_rank is not None),
             ("pipeline_model_parallel_layout", options.pipeline_model_parallel_layout is not None),
             ("account_for_embedding_in_pipeline_split", options.account_for_embedding_in_pipeline_split),
             ("account_for_loss_in_pipeline_split", options.account_for_loss_in_pipeline_split)]
    return [name for name, on in flags if on]


class HybridPatternExcludesVppArgs(DSv4Rule):
    """The V4 path takes its stages from the hybrid pattern: no virtual-stage flag, no layout string, no
    account-for flags."""

    id = "hybrid-pattern-excludes-vpp-args"
    family = Family.pipeline
    citation = Citation(MAIN + "megatron/training/arguments.py:814-838", MegatronStage.arguments)
    summary = "hybrid_layer_pattern -> no virtual-stage flags, no pipeline layout string, no account-for-embedding/loss"

    def slack(self, f: Facts) -> float:
        return float(-len(_pattern_conflicts(f.options)))

    def message(self, f: Facts) -> str:
        clash = _pattern_conflicts(f.options)
        if not clash:
            return "no pipeline flag conflicts with --hybrid-layer-pattern"
        flags = ", ".join("--" + c.replace("_", "-") for c in clash)
        return f"{flags} should not be used with --hybrid-layer-pattern (its `|` segments define the stages)."

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if _pattern_conflicts(v.options):
            forbid(model, enforce)


def _uneven_with_pipes(options: MegatronOptions) -> list[str]:
    """First/last-stage overrides set while the hybrid pattern has pipe separators."""
    pattern = options.hybrid_layer_pattern
    if pattern is None or pattern_segments(pattern) == 1:
        return []
    flags = [("decoder_first_pipeline_num_layers", options.decoder_first_pipeline_num_layers),
             ("decoder_last_pipeline_num_layers", options.decoder_last_pipeline_num_layers)]
    return [name for name, value in flags if value is not None]


class HybridPatternPipesExcludeUneven(DSv4Rule):
    """A hybrid pattern with `|` defines the stages: no first/last-stage layer overrides."""

    id = "hybrid-pattern-pipes-exclude-uneven"
    family = Family.pipeline
    citation = Citation(MAIN + "megatron/training/arguments.py:799-813; "
                        "megatron/core/models/hybrid/hybrid_layer_allocation.py:377-383", MegatronStage.arguments)
    summary = "'|' in hybrid_layer_pattern -> no decoder first/last pipeline num layers"

    def slack(self, f: Facts) -> float:
        return float(-len(_uneven_with_pipes(f.options)))

    def message(self, f: Facts) -> str:
        clash = _uneven_with_pipes(f.options)
        if not clash:
            return "no first/last-stage override conflicts with the hybrid pattern's pipes"
        flag = "--" + clash[0].replace("_", "-")
        return (f"If --hybrid-layer-pattern contains pipe separators, {flag} should not be specified as the "
                "pipeline layout is explicitly defined.")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if _uneven_with_pipes(v.options):
            forbid(model, enforce)


class HybridPatternSegmentsDivisible(DSv4Rule):
    """The pattern's `|` segments are the virtual stages: segments == PP·VPP (Megatron sets
    VPP := segments / PP once segments % PP == 0)."""

    id = "hybrid-pattern-segments-divisible"
    family = Family.pipeline
    citation = Citation(MAIN + "megatron/training/arguments.py:840-862; "
                        "megatron/core/models/hybrid/hybrid_layer_allocation.py:458-475", MegatronStage.arguments)
    unit = "segments"
    summary = "segments > 1 -> segments == PP·VPP"

    def _segments(self, options: MegatronOptions) -> int:
        pattern = options.hybrid_layer_pattern
        return 1 if pattern is None else pattern_segments(pattern)

    def in_force(self, f: Facts) -> bool:
        """Only a pattern with pipe separators fixes PP·VPP."""
        return self._segments(f.options) > 1

    def slack(self, f: Facts) -> float:
        s, m = self._segments(f.options), f.mapping
        return 0.0 if s == 1 else -float(abs(s - m.pp * m.vpp))

    def message(self, f: Facts) -> str:
        s, m = self._segments(f.options), f.mapping
        if s == 1:
            return "the hybrid layer pattern has no pipe separators"
        if s % m.pp:
            return (f"The number of hybrid pipeline segments described by --hybrid-layer-pattern must be evenly "
                    f"divisible by --pipeline-model-parallel-size. Got {s} segments and {m.pp} pipeline "
                    "parallel size.")
        return f"{s} pattern segments on PP {m.pp} give VPP {s // m.pp}; the mapping has VPP {m.vpp}"

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        s = self._segments(v.options)
        if s > 1:
            model.Add(v.product("pp", "vpp") == s).OnlyEnforceIf(enforce)


def _contiguous_mtp_sp(options: MegatronOptions, mtp_layers: int, sequence_parallel: bool) -> bool:
    """The constant half of the known-bug combination: contiguous CP, MTP and sequence parallelism."""
    return options.cp_partition_mode == "contiguous" and mtp_layers > 0 and sequence_parallel


class ContiguousCPMtpTPSP(DSv4Rule):
    """Known bug: contiguous CP > 1 with MTP, TP > 1 and sequence parallelism."""

    id = "contiguous-cp-mtp-tp-sp"
    family = Family.context
    citation = Citation(DEV + "megatron/core/transformer/transformer_config.py:1575-1585", MegatronStage.config)
    summary = "not (contiguous and CP > 1 and MTP and TP > 1 and SP)"

    def _hit(self, f: Facts) -> bool:
        m = f.mapping
        return (_contiguous_mtp_sp(f.options, f.model.mtp_layers, f.training.sequence_parallel)
                and m.cp > 1 and m.tp > 1)

    def slack(self, f: Facts) -> float:
        return -1.0 if self._hit(f) else 0.0

    def message(self, f: Facts) -> str:
        m = f.mapping
        return (f"MTP with tensor_model_parallel_size > 1, sequence_parallel=True, and cp_partition_mode="
                f"'contiguous' has a known token-side padding-mask layout bug (TP = {m.tp}, CP = {m.cp}, "
                f"MTP layers = {f.model.mtp_layers}).")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if _contiguous_mtp_sp(v.options, v.consts["mtp_layers"], bool(v.consts["sequence_parallel"])):
            cp_split, tp_split = v.at_least("cp", 2), v.at_least("tp", 2)
            model.AddBoolOr([cp_split.Not(), tp_split.Not()]).OnlyEnforceIf(enforce)


class PackingSchedulerMoeDispatcher(DSv4Rule):
    """Sequence packing with MoE needs the alltoall or flex token dispatcher."""
    reads_choices = True

    id = "packing-scheduler-moe-dispatcher"
    family = Family.moe
    citation = Citation(DEV + "megatron/core/transformer/transformer_config.py:3672-3694", MegatronStage.config)
    summary = "packed sequences and MoE -> moe_token_dispatcher_type in {alltoall, flex}"

    def applies(self, problem: Problem) -> bool:
        return super().applies(problem) and problem.model.moe is not None

    def slack(self, f: Facts) -> float:
        hit = f.training.packed_sequences and f.options.moe_token_dispatcher_type == "allgather"
        return -1.0 if hit else 0.0

    def message(self, f: Facts) -> str:
        return (f"sequence_packing only supports moe_token_dispatcher_type in ('alltoall', 'flex'), got "
                f"'{f.options.moe_token_dispatcher_type}'")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if v.consts["packed_sequences"] and v.options.moe_token_dispatcher_type == "allgather":
            forbid(model, enforce)


class ContiguousCPRequiresPackingScheduler(Constraint):
    """Contiguous CP (the V4 path's sharding) with CP > 1 or dynamic CP reads THD input from a
    sequence-packing scheduler; judged for every model, since only the flag decides it."""

    id = "contiguous-cp-requires-packing-scheduler"
    family = Family.context
    citation = Citation(DEV + "megatron/core/transformer/transformer_config.py:1566-1574", MegatronStage.config)
    pack = RulePack.megatron_core
    unit = "CP"
    summary = "contiguous and (CP > 1 or dynamic CP) -> packed THD input"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only contiguous CP on unpacked input is restricted."""
        return f.options.cp_partition_mode == "contiguous" and not f.training.packed_sequences

    def slack(self, f: Facts) -> float:
        if f.options.cp_partition_mode != "contiguous" or f.training.packed_sequences:
            return 0.0
        return -float(f.mapping.cp) if f.options.dynamic_context_parallel else float(1 - f.mapping.cp)

    def message(self, f: Facts) -> str:
        return (f"cp_partition_mode='contiguous' with context parallelism requires THD inputs from a "
                f"sequence_packing_scheduler; BSHD inputs are not supported (CP = {f.mapping.cp}, packed "
                f"{f.training.packed_sequences}, dynamic CP {f.options.dynamic_context_parallel}).")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if v.options.cp_partition_mode != "contiguous" or v.consts["packed_sequences"]:
            return
        if v.options.dynamic_context_parallel:
            forbid(model, enforce)
        else:
            model.Add(v.cp == 1).OnlyEnforceIf(enforce)


class ContiguousCPVariants(Constraint):
    """Contiguous CP with CP > 1 exists only for DSv4 hybrid attention (and gated delta net, which
    parasol's architectures do not have); judged for every model."""

    id = "contiguous-cp-variants"
    family = Family.context
    citation = Citation(DEV + "megatron/core/transformer/transformer_config.py:1587-1610", MegatronStage.config)
    pack = RulePack.megatron_core
    unit = "CP"
    summary = "CP > 1 and contiguous -> DSv4 hybrid attention"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only contiguous CP on a model without DSv4 attention is restricted."""
        return f.options.cp_partition_mode == "contiguous" and not isinstance(f.model.attention, DSV4Attention)

    def slack(self, f: Facts) -> float:
        other = f.options.cp_partition_mode == "contiguous" and not isinstance(f.model.attention, DSV4Attention)
        return float(1 - f.mapping.cp) if other else 0.0

    def message(self, f: Facts) -> str:
        return (f"cp_partition_mode='contiguous' with context parallelism currently requires "
                f"experimental_attention_variant to be either 'dsv4_hybrid' or 'gated_delta_net' (CP = "
                f"{f.mapping.cp}, attention {f.model.attention.kind}).")

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if v.options.cp_partition_mode == "contiguous" and not v.consts["hybrid_model"]:
            model.Add(v.cp == 1).OnlyEnforceIf(enforce)


def _dynamic_cp_faults(options: MegatronOptions, packed: bool) -> list[str]:
    """What dynamic CP needs that the run lacks (the parts of the rule parasol can observe)."""
    if not options.dynamic_context_parallel:
        return []
    needs = [("--calculate-per-token-loss", options.calculate_per_token_loss),
             ("packed input from sequence_packing_scheduler=default_dynamic_cp", packed)]
    return [name for name, met in needs if not met]


class DynamicCPRestrictions(Constraint):
    """Dynamic CP needs per-token loss and packed input from its scheduler. Its other conditions (no
    CUDA graphs, no Megatron-FSDP, a single dataloader, the minimum dynamic CP size) read flags
    parasol does not carry."""

    id = "dynamic-cp-restrictions"
    family = Family.context
    citation = Citation(DEV + "megatron/training/arguments.py:1541-1566", MegatronStage.arguments)
    pack = RulePack.megatron_core
    unit = "settings"
    summary = "dynamic CP -> calculate_per_token_loss and packed input"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only dynamic context parallelism has these requirements."""
        return f.options.dynamic_context_parallel

    def slack(self, f: Facts) -> float:
        return float(-len(_dynamic_cp_faults(f.options, f.training.packed_sequences)))

    def message(self, f: Facts) -> str:
        faults = _dynamic_cp_faults(f.options, f.training.packed_sequences)
        if not faults:
            return "dynamic context parallelism is off or has what it needs"
        return "Dynamic context parallelism requires " + " and ".join(faults)

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if _dynamic_cp_faults(v.options, bool(v.consts["packed_sequences"])):
            forbid(model, enforce)


DSV4_RULES: tuple[type[Constraint], ...] = (
    HybridPatternExcludesVppArgs,
    HybridPatternPipesExcludeUneven,
    HybridPatternSegmentsDivisible,
    DynamicCPRestrictions,
    ContiguousCPRequiresPackingScheduler,
    ContiguousCPVariants,
    DSv4TP1,
    DSv4CPRequiresTHD,
    DSv4CPContiguous,
    DSv4KernelBackend,
    ContiguousCPMtpTPSP,
    PackingSchedulerMoeDispatcher,
    DSv4NoCoreAttnRecompute,
    DSv4NoQkvLinearOffload,
    DSv4OGroups,
    DSv4CPLocalRowsGeWindow,
)
