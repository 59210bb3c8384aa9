"""Read a Megatron-LM launch line or launch script (`explain --megatron-args`, issue 3 part 4: "a launch
script is enough"): the model, the parallel mapping, the Megatron options and the training run it
describes, with Megatron-LM's own defaults for what it leaves out.

Defaults and rewrites follow NVIDIA/Megatron-LM main@d98e8a64 (megatron/training/arguments.py,
megatron/core/transformer/transformer_config.py) and, for DeepSeek-V4 (its hybrid pattern and its flags, DEV_FLAGS),
dev@d48bd6be.
Nothing is executed. The shell layer understands `NAME=value`, arrays `NAME=( … )` / `NAME+=( … )`,
`$NAME`, `${NAME}`, `${NAME[@]}`, `${NAME:-default}` and integer arithmetic `$(( … ))` (+ - * / %, as bash
computes them); a variable or expression it cannot resolve is named in an
InputError when a modelled flag needs it, and in a note otherwise. Every flag parasol does not model
is kept and reported as a note.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from parasol.errors import InputError
from parasol.files import read_input_text
from parasol.hardware.presets import load_preset
from parasol.hardware.topology import ClusterTopology
from parasol.problems.derived import interleaved_even_layout
from parasol.problems.loader import Problem, problem_from_parts
from parasol.problems.mapping import Mapping
from parasol.problems.mapping_input import build_mapping
from parasol.problems.megatron.context import Context, LaunchWarning
from parasol.problems.megatron.flags import OWN_PARSER_PROGRAMS, Flags, flag_error
from parasol.problems.megatron.layout_string import parse_pipeline_layout
from parasol.problems.megatron.model_flags import (
    MODEL_FLAGS,
    OLDER_LINEAR_ATTENTION_FLAG,
    compare_reference,
    model_from_flags,
    model_gaps,
)
from parasol.problems.megatron.patterns import parse_hybrid_pattern
from parasol.problems.megatron.shell import SOURCE, launch_command, shown
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.model.architecture import (
    DSV4Attention,
    ModelArchitecture,
)
from parasol.problems.model.catalog import load_model
from parasol.problems.options import MegatronOptions, uses_backend
from parasol.problems.schema import RECOMPUTE_MODULES, UNPRICED_RECOMPUTE_MODULES, Training

ARGS = "Megatron-LM megatron/training/arguments.py"
CONFIG = "Megatron-LM megatron/core/transformer/transformer_config.py"


@dataclass(frozen=True)
class ParsedLaunch:
    """What a launch line says. `mapping_fields`, `training_fields` and the options in
    `options.model_fields_set` hold only what the line gives (explicitly or through a flag that
    implies it), so they can override a problem file; Megatron's defaults for the rest are applied
    when there is no problem file (`launch_problem`)."""

    model: ModelArchitecture | None
    mapping_fields: dict
    options: MegatronOptions
    training_fields: dict
    notes: tuple[str, ...]
    warnings: tuple[LaunchWarning, ...] = ()
    launcher_gpus: int | None = None
    launcher_ranks_per_node: int | None = None
    deepseek_v4: bool = False
    model_unavailable: str | None = None
    whole: bool = False
    """Whether the line names its model (--num-layers): a whole launch line, whose on/off switches Megatron runs
    off when absent, rather than a fragment of parallel flags to join to one (seed 000's configuration A)."""
    hybridep_ranks: int | None = None
    """HYBRIDEP_DOMAIN_VARIABLE in the command's environment: the ranks Hybrid-EP takes as one NVLink domain."""
    segment_nodes: int | None = None
    """Slurm's --segment: the nodes of each piece of the allocation placed within one NVLink block."""


DEGREE_FLAGS = {
    "tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size",
    "cp": "--context-parallel-size", "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size", "mbs": "--micro-batch-size",
    "gbs": "--global-batch-size", "seq_len": "--seq-length",
}
PIPELINE_FLAGS = ("the launch line's pipeline flags (--num-virtual-stages-per-pipeline-rank, "
                   "--num-layers-per-virtual-pipeline-stage, --pipeline-model-parallel-layout, "
                   "--hybrid-layer-pattern, --decoder-first/last-pipeline-num-layers, --account-for-*)")


def _recompute(c: Context, options: dict) -> str | None:
    """--recompute-granularity as Megatron rewrites it: --recompute-activations forces 'selective'
    (arguments.py:607-609); --moe-layer-recompute turns anything but 'full' into 'selective'
    (transformer_config.py:2014-2025, which rejects it with 'full')."""
    f = c.flags
    granularity = f.choice("--recompute-granularity", ("full", "selective"))
    if f.switch("--recompute-activations"):
        options["recompute_activations"] = True
        granularity = "selective"
    if f.switch("--moe-layer-recompute"):
        options["moe_layer_recompute"] = True
        if granularity != "full":
            granularity = "selective"
            c.moe_layer_recompute = True
    return granularity


def _layers_for_layout(c: Context, model: ModelArchitecture | None) -> int | None:
    """Main blocks the pipeline flags split: the model's, else --num-layers."""
    if model is not None:
        return model.num_layers
    if c.reference is not None:
        return c.reference.num_layers
    return c.flags.integer("--num-layers")


def _vpp_from_layers_per_stage(k: int, layers: int | None, pp: int, options: dict) -> int:
    """vpp = (L'/PP)/k, L' counting embedding/loss slots when accounted for; when the divisions are not
    whole the nearest VPP is kept and rule vpp-from-layers-per-vstage says why Megatron stops."""
    if layers is None:
        raise InputError("--num-layers-per-virtual-pipeline-stage needs the number of layers.",
                         field="--num-layers-per-virtual-pipeline-stage",
                         fix="pass --num-layers or a problem file.")
    options["num_layers_per_virtual_pipeline_stage"] = k
    total = layers + int(options.get("account_for_embedding_in_pipeline_split", False)) \
        + int(options.get("account_for_loss_in_pipeline_split", False))
    return max(1, total // pp // k)


def _uneven_layout(layers: int, pp: int, vpp: int, first: int | None, last: int | None) -> tuple[int, ...] | None:
    """Blocks per virtual stage for --decoder-first/last-pipeline-num-layers (transformer_config.py:2294-2368);
    None when Megatron's divisibility rules fail (the uneven-* rules then say why)."""
    ends = [n for n in (first, last) if n is not None]
    middle_layers, middle_stages = layers - sum(ends), pp - len(ends)
    if middle_stages < 0 or (middle_layers > 0) != (middle_stages > 0) or (middle_stages and middle_layers % middle_stages):
        return None
    per_rank = [middle_layers // middle_stages if middle_stages else 0] * pp
    if first is not None:
        per_rank[0] = first
    if last is not None:
        per_rank[-1] = last
    if any(n % vpp for n in per_rank):
        return None
    return interleaved_even_layout(per_rank, vpp)


def _accounted_layout(layers: int, pp: int, vpp: int, embedding: bool, loss: bool) -> tuple[int, ...] | None:
    """Blocks per virtual stage when the embedding and/or loss take a layer slot (rule account-for-divisible)."""
    total = layers + int(embedding) + int(loss)
    stages = pp * vpp
    if total % stages:
        return None
    counts = [total // stages] * stages
    counts[0] -= int(embedding)
    counts[-1] -= int(loss)
    return tuple(counts) if min(counts) >= 0 else None


def _check_hybrid_vpp_sources(c: Context, k: int | None, v: int | None, layout_text: str | None) -> None:
    """A hybrid pattern with `|` segments sets the virtual stages itself; another virtual-stage flag beside it
    is refused here (arguments.py:814-838). Conflicts among the other flags are rules (vpp-args-mutually-exclusive,
    vpp-layers-per-vstage-excludes-uneven)."""
    if c.pattern is None or len(c.pattern.segments) <= 1:
        return
    given = [name for name, on in (("--num-layers-per-virtual-pipeline-stage", k is not None),
                                   ("--num-virtual-stages-per-pipeline-rank", v is not None),
                                   ("--pipeline-model-parallel-layout", layout_text is not None)) if on]
    if given:
        raise InputError(
            f"{given[0]} and --hybrid-layer-pattern cannot be set together: Megatron takes the virtual pipeline "
            f"stages from the pattern's `|` segments and stops at argument validation ({ARGS}:814-838).",
            field=given[0], fix="describe the virtual stages with the pattern's `|` segments only.")


def _pipeline(c: Context, model: ModelArchitecture | None, pp: int, options: dict) -> dict:
    """vpp and layout from the pipeline flags; the raw strings stay in the options for the rules."""
    f = c.flags
    layers = _layers_for_layout(c, model)
    k = f.integer("--num-layers-per-virtual-pipeline-stage")
    v = f.integer("--num-virtual-stages-per-pipeline-rank")
    layout_text = f.one("--pipeline-model-parallel-layout")
    if layout_text is not None:
        options["pipeline_model_parallel_layout"] = layout_text
    _check_hybrid_vpp_sources(c, k, v, layout_text)
    out: dict = {}
    if v is None and k is None and layout_text is None:
        v = _older_vpp_flag(c)
    if v is not None:
        options["num_virtual_stages_per_pipeline_rank"] = v
        out["vpp"] = v
    if k is not None:
        out["vpp"] = _vpp_from_layers_per_stage(k, layers, pp, options)
    if layout_text is not None:
        out.update(_stages(parse_pipeline_layout(layout_text, layers or 0).block_counts, pp))
    if c.pattern is not None and len(c.pattern.segments) > 1:
        out.update(_stages(c.pattern.segments, pp))
    if "layout" not in out and layers is not None:
        layout = _derived_layout(layers, pp, out.get("vpp", 1), options)
        if layout is not None:
            out["layout"] = layout
    return out


OLDER_VPP_FLAG = "--virtual-pipeline-model-parallel-size"
"""Older Megatron-LM's VPP flag, which main's parser no longer takes (--num-virtual-stages-per-pipeline-rank replaced
it): scripts written for older releases still carry it."""


def _older_vpp_flag(c: Context) -> int | None:
    """VPP from OLDER_VPP_FLAG, read as older Megatron meant it and noted: Megatron-LM main stops at parsing it."""
    v = c.flags.integer(OLDER_VPP_FLAG)
    if v is not None:
        c.notes.append(f"{OLDER_VPP_FLAG} {v}: Megatron-LM main does not take this older flag and stops at parsing "
                       f"(unrecognized arguments); judged as --num-virtual-stages-per-pipeline-rank {v}, its name now")
    return v


def _stages(counts: tuple[int, ...], pp: int) -> dict:
    """vpp and layout from explicit virtual stages (layout string or hybrid segments); when their
    number is not a multiple of PP nothing is set and the stage-count rules report it."""
    if len(counts) % pp:
        return {}
    return {"vpp": len(counts) // pp, "layout": counts}


def _derived_layout(layers: int, pp: int, vpp: int, options: dict) -> tuple[int, ...] | None:
    """The layout uneven first/last counts or accounted embedding/loss imply (None when neither is given)."""
    first = options.get("decoder_first_pipeline_num_layers")
    last = options.get("decoder_last_pipeline_num_layers")
    if first is not None or last is not None:
        return _uneven_layout(layers, pp, vpp, first, last)
    embedding = options.get("account_for_embedding_in_pipeline_split", False)
    loss = options.get("account_for_loss_in_pipeline_split", False)
    if embedding or loss:
        return _accounted_layout(layers, pp, vpp, embedding, loss)
    return None


def _mapping(c: Context, model: ModelArchitecture | None, options: dict) -> dict:
    """Mapping fields the line gives: degrees, batch, sequence, recompute, vpp and layout."""
    f = c.flags
    fields: dict = {}
    for key, flag in DEGREE_FLAGS.items():
        value = f.integer(flag)
        if value is not None:
            fields[key] = value
    recompute = _recompute(c, options)
    if recompute is not None:
        fields["recompute"] = recompute
    fields.update(_pipeline(c, model, fields.get("pp", 1), options))
    return fields


def _set(options: dict, key: str, value: object) -> None:
    """Record an option when the flag gave one."""
    if value is not None:
        options[key] = value


def _dispatcher_options(c: Context, options: dict) -> None:
    """MoE dispatcher flags; --moe-enable-deepep is deprecated and maps to the deepep backend."""
    f = c.flags
    _set(options, "moe_token_dispatcher_type", f.choice("--moe-token-dispatcher-type", ("allgather", "alltoall", "flex")))
    _set(options, "moe_flex_dispatcher_backend",
         f.choice("--moe-flex-dispatcher-backend", ("deepep", "hybridep", "ncclep")))
    if f.switch("--moe-enable-deepep"):
        options["moe_enable_deepep"] = True
        options.setdefault("moe_flex_dispatcher_backend", "deepep")
        c.warnings.append(LaunchWarning(
            "--moe-enable-deepep", "moe_enable_deepep is deprecated; use --moe-token-dispatcher-type flex "
            "--moe-flex-dispatcher-backend deepep (it requires the flex dispatcher)",
            f"{CONFIG}:1743-1752", MegatronStage.config))
    _set(options, "moe_router_score_function",
         f.choice("--moe-router-score-function", ("softmax", "sigmoid", "sqrtsoftplus")))
    balancing = f.words("--moe-router-load-balancing-type")
    if balancing is not None:
        options["moe_router_load_balancing_type"] = tuple(balancing)
    _set(options, "moe_router_group_topk", f.integer("--moe-router-group-topk"))
    _set(options, "moe_router_num_groups", f.integer("--moe-router-num-groups"))
    for flag, key in (("--moe-pad-expert-input-to-capacity", "moe_pad_expert_input_to_capacity"),
                      ("--moe-router-pre-softmax", "moe_router_pre_softmax"),
                      ("--moe-grouped-gemm", "moe_grouped_gemm"),
                      ("--moe-shared-expert-overlap", "moe_shared_expert_overlap"),
                      ("--overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm")):
        if f.switch(flag):
            options[key] = True


def _cp_options(c: Context, options: dict) -> None:
    """Context-parallel flags: --cp-comm-type (per-layer lists judged by their first value)."""
    f = c.flags
    kinds = f.words("--cp-comm-type")
    if kinds is not None:
        for kind in kinds:
            if kind not in ("p2p", "a2a", "allgather", "a2a+p2p"):
                raise flag_error("--cp-comm-type", kind, "p2p, a2a, allgather or a2a+p2p")
        options["cp_comm_type"] = kinds[0]
        if len(set(kinds)) > 1:
            c.notes.append(f"--cp-comm-type gives {len(kinds)} per-layer values; parasol judged {kinds[0]!r}")
    sizes = f.words("--hierarchical-context-parallel-sizes")
    if sizes is not None:
        if not all(s.isdigit() and int(s) > 0 for s in sizes):
            raise flag_error("--hierarchical-context-parallel-sizes", " ".join(sizes), "positive whole numbers")
        options["hierarchical_context_parallel_sizes"] = tuple(int(s) for s in sizes)
    _set(options, "cp_partition_mode", f.choice("--cp-partition-mode", ("zigzag", "contiguous")))


def _pipeline_options(c: Context, options: dict) -> None:
    """Pipeline flags the pipeline rules read."""
    f = c.flags
    _set(options, "microbatch_group_size_per_vp_stage",
         f.integer("--microbatch-group-size-per-virtual-pipeline-stage"))
    if f.switch("--no-overlap-p2p-communication"):
        options["overlap_p2p_comm"] = False
    if f.switch("--overlap-p2p-communication"):
        options["overlap_p2p_comm"] = True
    _set(options, "decoder_first_pipeline_num_layers", f.integer("--decoder-first-pipeline-num-layers"))
    _set(options, "decoder_last_pipeline_num_layers", f.integer("--decoder-last-pipeline-num-layers"))
    for flag, key in (("--account-for-embedding-in-pipeline-split", "account_for_embedding_in_pipeline_split"),
                      ("--account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split"),
                      ("--use-tp-pp-dp-mapping", "use_tp_pp_dp_mapping")):
        if f.switch(flag):
            options[key] = True


def _other_options(c: Context, options: dict) -> None:
    """Bias, recompute method, optimizer instances, kernels, offloading and loss flags."""
    f = c.flags
    if f.given("--disable-bias-linear"):
        options["add_bias_linear"] = not f.switch("--disable-bias-linear")
    _set(options, "recompute_method", f.choice("--recompute-method", ("uniform", "block")))
    _set(options, "recompute_num_layers", f.integer("--recompute-num-layers"))
    _set(options, "num_distributed_optimizer_instances", f.integer("--num-distributed-optimizer-instances"))
    _set(options, "dsa_kernel_backend", f.choice("--dsa-kernel-backend", ("cudnn", "none", "tilelang")))
    _set(options, "cross_entropy_fusion_impl", f.choice("--cross-entropy-fusion-impl", ("native", "te")))
    modules = f.words("--offload-modules")
    if modules is not None:
        options["offload_modules"] = modules
    _set(options, "kv_channels", f.integer("--kv-channels"))
    rampup = f.words("--rampup-batch-size")
    if rampup is not None:
        if len(rampup) != 3 or not all(r.isdigit() and int(r) > 0 for r in rampup):
            raise flag_error("--rampup-batch-size", " ".join(rampup), "three positive whole numbers: START INCREMENT SAMPLES")
        options["rampup_batch_size"] = tuple(int(r) for r in rampup)
    _config_only_flags(c)
    for flag, key in (("--deterministic-mode", "deterministic_mode"), ("--cpu-offloading", "cpu_offloading"),
                      ("--calculate-per-token-loss", "calculate_per_token_loss"),
                      ("--cross-entropy-loss-fusion", "cross_entropy_loss_fusion"),
                      ("--dynamic-context-parallel", "dynamic_context_parallel"),
                      ("--delay-wgrad-compute", "delay_wgrad_compute"),
                      ("--optimizer-cpu-offload", "optimizer_cpu_offload")):
        if f.switch(flag):
            options[key] = True
    _overlap_options(c, options)
    _precision_options(c, options)
    layers = f.integer("--cpu-offloading-num-layers", minimum=0)
    if layers is not None:
        options["cpu_offloading_num_layers"] = layers
        if layers > 0:
            options["cpu_offloading"] = True
    if f.switch("--no-cpu-offloading-activations"):
        options["cpu_offloading_activations"] = False


CONFIG_ONLY_FLAGS = {
    "--cpu-offloading": "it follows --cpu-offloading-num-layers N > 0 (arguments.py:1950-1951)",
    "--no-cpu-offloading-activations": "TransformerConfig.cpu_offloading_activations is set in code "
                                       "(arguments.py:2321)",
    "--activation-func-fp8-input-store": "TransformerConfig.activation_func_fp8_input_store is set in code "
                                         "(arguments.py:2330)",
}
"""Flags for TransformerConfig fields Megatron-LM builds no flag for (arguments.py:2307-2330, "no CLI argument exists
for these"), which older scripts and parasol's own earlier launch lines carry, with how the field is set instead."""


DEV_FLAGS = frozenset({
    "--cp-partition-mode", "--dynamic-context-parallel", "--sequence-packing-scheduler",
    "--o-groups", "--o-lora-rank", "--original-max-position-embeddings", "--csa-compress-ratios",
    "--csa-window-size", "--csa-compress-rotary-base", "--moe-n-hash-layers", "--enable-hyper-connections",
    "--num-residual-streams", "--use-fused-mhc",
})
"""Flags of the DeepSeek-V4 dev branch that main's parser lacks: a V4 launch line runs on dev. dev@d48bd6be
arguments.py defines --o-groups, --o-lora-rank (4916-4927), --original-max-position-embeddings (4901-4906) and
--csa-compress-ratios (4961-4974); the others are TransformerConfig fields its ArgumentGroupFactory turns into flags
(arguments.py:2729-2826; transformer_config.py:1566-1616 the CP ones, 369-377 csa_*, 874 moe_n_hash_layers, 1212-1224
mHC)."""

NOTED_ELSEWHERE = frozenset({*CONFIG_ONLY_FLAGS, OLDER_VPP_FLAG, OLDER_LINEAR_ATTENTION_FLAG}) | DEV_FLAGS
"""Flags main's parser lacks that are not noted as such by Flags.unparsed: their readers note them (saying what to
write instead), or they are DEV_FLAGS."""


def _config_only_flags(c: Context) -> None:
    """Each CONFIG_ONLY_FLAGS flag the line gives, noted: Megatron-LM stops at parsing it; parasol reads it as the
    setting it names (_other_options, _precision_options)."""
    for flag, instead in CONFIG_ONLY_FLAGS.items():
        if c.flags.given(flag):
            c.notes.append(f"{flag}: Megatron-LM has no such flag and stops at parsing (unrecognized arguments); "
                           f"{instead}; judged with the setting it names")


def _precision_options(c: Context, options: dict) -> None:
    """The FP8 recipe (transformer_config.py:594-599), FP8 parameters (--fp8-param-gather: absent means off,
    as in Megatron), the FP8 SwiGLU input store (227-229) and the precision-aware optimizer with its state
    dtypes (arguments.py:3667-3685): what the ledger prices."""
    f = c.flags
    _set(options, "fp8_recipe", f.choice("--fp8-recipe", ("delayed", "tensorwise", "blockwise", "mxfp8", "custom")))
    options["fp8_param_gather"] = f.switch("--fp8-param-gather")
    for flag, key in (("--activation-func-fp8-input-store", "activation_func_fp8_input_store"),
                      ("--use-precision-aware-optimizer", "use_precision_aware_optimizer")):
        if f.switch(flag):
            options[key] = True
    _set(options, "main_params_dtype", f.choice("--main-params-dtype", ("fp32", "fp16")))
    for flag, key in (("--exp-avg-dtype", "exp_avg_dtype"), ("--exp-avg-sq-dtype", "exp_avg_sq_dtype")):
        _set(options, key, f.choice(flag, ("fp32", "fp16", "bf16", "fp8")))


def _overlap_options(c: Context, options: dict) -> None:
    """The overlap switches a launch line sets: absent means off, as in Megatron (arguments.py:3121,3148;
    --tp-comm-overlap), so the line's run is priced as it runs; the host share of the optimizer; the
    fine-grained offloading switch that --offload-modules needs (transformer_config.py:2127-2131)."""
    f = c.flags
    for flag, key in (("--tp-comm-overlap", "tp_comm_overlap"), ("--overlap-grad-reduce", "overlap_grad_reduce"),
                      ("--overlap-param-gather", "overlap_param_gather")):
        options[key] = f.switch(flag)
    fraction = f.number("--optimizer-offload-fraction")
    if fraction is not None:
        if not 0.0 <= fraction <= 1.0:
            raise flag_error("--optimizer-offload-fraction", str(fraction), "a number from 0 to 1")
        options["optimizer_offload_fraction"] = fraction
    fine_grained = f.switch("--fine-grained-activation-offloading")
    if options.get("offload_modules") and not fine_grained:
        c.notes.append("--offload-modules without --fine-grained-activation-offloading: Megatron offloads "
                       "nothing; parasol judged the modules as offloaded")


def _hybrid_option(c: Context, options: dict) -> None:
    """--hybrid-layer-pattern (or the deprecated --hybrid-override-pattern) kept raw and parsed."""
    f = c.flags
    text = f.one("--hybrid-layer-pattern")
    old = f.one("--hybrid-override-pattern")
    if old is not None:
        c.warnings.append(LaunchWarning("--hybrid-override-pattern", "--hybrid-override-pattern is "
                                        "deprecated. Use --hybrid-layer-pattern instead.", f"{ARGS}:743-755"))
        text = text or old
    if text is not None:
        options["hybrid_layer_pattern"] = text
        c.pattern = parse_hybrid_pattern(text)


def _training(c: Context, mapping: dict) -> dict:
    """Training fields: sequence, batch, precision, optimizer sharding, SP, recompute, capacity, packing."""
    f = c.flags
    out: dict = {}
    for key, field in (("seq_len", "seq_len"), ("gbs", "global_batch"), ("mbs", "micro_batch"),
                       ("recompute", "recompute")):
        if key in mapping:
            out[field] = mapping[key]
    fp8 = f.choice("--fp8-format", ("e4m3", "hybrid"))
    bf16 = f.switch("--bf16")
    if fp8 is not None:
        out["precision"] = "fp8"
    elif bf16:
        out["precision"] = "bf16"
    if f.switch("--fp16"):
        out.setdefault("precision", "bf16")
        c.notes.append("--fp16: parasol models 16-bit training as BF16 (same bytes per value)")
    if f.switch("--use-distributed-optimizer"):
        out["distributed_optimizer"] = True
    if f.switch("--grad-reduce-in-bf16") or f.choice("--main-grads-dtype", ("fp32", "bf16")) == "bf16":
        out["grad_dtype"] = "bf16"
    fsdp = _fsdp(c)
    if fsdp is not None:
        out["fsdp"] = fsdp
    if f.switch("--sequence-parallel"):
        out["sequence_parallel"] = True
    modules = f.words("--recompute-modules")
    if modules is not None:
        bad = [m for m in modules if m not in RECOMPUTE_MODULES]
        if bad:
            raise flag_error("--recompute-modules", " ".join(bad), "modules among " + ", ".join(RECOMPUTE_MODULES)
                             + " (Megatron-LM refuses any other, transformer_config.py:1944-1961)")
        unpriced = [m for m in modules if m in UNPRICED_RECOMPUTE_MODULES]
        if unpriced:
            c.notes.append(f"--recompute-modules {' '.join(unpriced)}: accepted by Megatron, not priced by parasol "
                           "(their activations stay in the memory ledger, their recompute adds no time)")
        out["recompute_modules"] = modules
    if c.moe_layer_recompute:
        base = out.get("recompute_modules", ("core_attn",))
        out["recompute_modules"] = (*base, "moe") if "moe" not in base else base
    factor = f.number("--moe-expert-capacity-factor")
    if factor is not None:
        out["capacity_factor"] = factor if factor > 0 else None
    if f.one("--sequence-packing-scheduler") is not None:
        out["packed_sequences"] = True
    return out


FSDP2_UNTIED = "--untie-embeddings-and-output-weights"
"""A model flag that torch FSDP2 asks for (arguments.py:1044-1045): parasol's launch writes it with --use-torch-fsdp2,
so beside that flag it is not noted as a model flag (a tied model is still told apart by compare_reference)."""

FSDP_CHECKPOINTS = {"megatron-fsdp": ("fsdp_dtensor",), "torch-fsdp2": ("torch_dist", "torch_dcp")}
"""The --ckpt-format values each FSDP accepts, the first the one a launch line of parasol's takes
(arguments.py:1169-1170 and 1042-1043); without FSDP any."""


MEGATRON_CHECKPOINT_FORMAT = "torch_dist"
"""Megatron-LM's --ckpt-format when a line gives none (training_config.py:486)."""


def _fsdp_checkpoint(c: Context, accepted: tuple[str, ...]) -> None:
    """--ckpt-format (Megatron's default without it, MEGATRON_CHECKPOINT_FORMAT), read where FSDP constrains it: a
    format that FSDP refuses is noted (Megatron's argument checks stop the run); it changes nothing parasol prices."""
    given = c.flags.one("--ckpt-format")
    chosen = given or MEGATRON_CHECKPOINT_FORMAT
    if accepted and chosen not in accepted:
        shown_as = f"--ckpt-format {chosen}" if given else f"no --ckpt-format (Megatron's default {chosen})"
        c.notes.append(f"{shown_as}: this FSDP needs {' or '.join(accepted)} ({ARGS}:1042-1043,1169-1170); add "
                       f"--ckpt-format {accepted[0]}, or Megatron stops at its argument checks")


def _param_gather_with_optimizer_step(c: Context, vpp: int) -> None:
    """--overlap-param-gather-with-optimizer-step, a flag parasol does not price: the prerequisites Megatron checks
    (arguments.py:1066-1072: the distributed optimizer, --overlap-param-gather and interleaving) each noted when
    unmet, since the argument checks then stop the run."""
    f = c.flags
    if not f.switch("--overlap-param-gather-with-optimizer-step"):
        return
    needs = [what for what, met in (("--use-distributed-optimizer", f.switch("--use-distributed-optimizer")),
                                    ("--overlap-param-gather", f.switch("--overlap-param-gather")),
                                    ("an interleaved schedule (VPP > 1)", vpp > 1)) if not met]
    if needs:
        c.notes.append(f"--overlap-param-gather-with-optimizer-step needs {', '.join(needs)} ({ARGS}:1066-1072); "
                       "Megatron stops at its argument checks")


def _torch_fsdp2_flags(c: Context) -> None:
    """The flags torch FSDP2 refuses beside it, noted (Megatron's argument checks stop the run; parasol prices the
    run as sharded either way): the distributed optimizer, gradient-accumulation fusion (on by default) and FP16
    (which parasol judges as BF16)."""
    f = c.flags
    if f.given("--fp16"):
        c.notes.append(f"--fp16: --use-torch-fsdp2 refuses it ({ARGS}:1046-1047); Megatron stops at its argument "
                       "checks")
    if f.switch("--use-distributed-optimizer"):
        c.notes.append(f"--use-distributed-optimizer: --use-torch-fsdp2 refuses it ({ARGS}:1038-1039); Megatron stops "
                       "at its argument checks (FSDP2 shards the optimizer state itself)")
    if not f.switch("--no-gradient-accumulation-fusion"):
        c.notes.append("gradient-accumulation fusion is on by default and --use-torch-fsdp2 refuses it "
                       f"({ARGS}:1040-1041): add --no-gradient-accumulation-fusion")


def _fsdp(c: Context) -> str | None:
    """--use-megatron-fsdp (with --data-parallel-sharding-strategy, default optim_grads_params,
    arguments.py:3190) or --use-torch-fsdp2: the fully sharded run parasol models; a Megatron-FSDP
    strategy that keeps weights whole is judged as the distributed optimizer and noted."""
    f = c.flags
    strategy = f.choice("--data-parallel-sharding-strategy", ("no_shard", "optim", "optim_grads", "optim_grads_params"))
    torch_fsdp2, megatron_fsdp = f.switch("--use-torch-fsdp2"), f.switch("--use-megatron-fsdp")
    kind = "torch-fsdp2" if torch_fsdp2 else "megatron-fsdp" if megatron_fsdp else None
    _fsdp_checkpoint(c, FSDP_CHECKPOINTS.get(kind, ()))
    if kind == "torch-fsdp2":
        _torch_fsdp2_flags(c)
    if kind != "megatron-fsdp":
        return kind
    if strategy in (None, "optim_grads_params"):
        return "megatron-fsdp"
    c.notes.append(f"--data-parallel-sharding-strategy {strategy}: parasol models full sharding only; judged "
                   "with the weights and gradients whole" + (" and the optimizer state sharded" if strategy != "no_shard" else ""))
    return "none"


def _options(c: Context) -> dict:
    """Every Megatron option the line sets."""
    options: dict = {}
    _dispatcher_options(c, options)
    _cp_options(c, options)
    _pipeline_options(c, options)
    _other_options(c, options)
    return options


def parse_launch(text: str, *, source: str = SOURCE, model: ModelArchitecture | None = None) -> ParsedLaunch:
    """Read a launch line or script. `model` is the problem's model when there is a problem file: it
    replaces the line's model flags (which are compared with it) and its blocks are what the pipeline
    flags split."""
    command = launch_command(text, source)
    f = Flags(command.words, command.program)
    f.check_known()
    c = Context(flags=f, reference=model, notes=list(command.notes))
    if not f.own_parser:
        c.notes.append(f"{command.program} is not one of the Megatron-LM programs parasol reads "
                       f"({', '.join(sorted(OWN_PARSER_PROGRAMS))}): parasol explains the model its flags describe, "
                       "without what the program adds (a vision encoder, a reward model, …)")
    options: dict = {}
    _hybrid_option(c, options)
    options.update(_options(c))
    c.notes.extend(f.repeat_notes())
    if f.stray:
        c.notes.append("ignored words before the first flag: " + shown(" ".join(f.stray)))
    tp = f.integer("--tensor-model-parallel-size") or 1
    gaps = model_gaps(c)
    built = model_from_flags(c, tp) if gaps is None and model is None else None
    if model is not None:
        compare_reference(c)
        compared = [name for name in f.take_given(MODEL_FLAGS)
                    if not (name == FSDP2_UNTIED and f.given("--use-torch-fsdp2"))]
        if compared:
            c.notes.append(f"model flags compared with the problem's model {model.name}, which is used: "
                           + ", ".join(compared))
    mapping = _mapping(c, built, options)
    _param_gather_with_optimizer_step(c, mapping.get("vpp", 1))
    training = _training(c, mapping)
    try:
        opts = MegatronOptions(**options)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"Invalid Megatron option from the launch line: {err['msg']}.",
                         field=str(err["loc"][0]), value=err.get("input"),
                         fix="correct the matching flag.") from None
    refused = f.unparsed(NOTED_ELSEWHERE)
    ranks = command.ranks
    return ParsedLaunch(
        model=built, mapping_fields=mapping, options=opts, training_fields=training,
        notes=(*c.notes, *refused, *f.unused()), warnings=tuple(c.warnings),
        launcher_gpus=None if ranks is None else ranks[0], launcher_ranks_per_node=None if ranks is None else ranks[1],
        deepseek_v4=bool(c.pattern and c.pattern.dsv4), model_unavailable=gaps, whole=f.given("--num-layers"),
        hybridep_ranks=_hybridep_ranks(dict(command.environment)), segment_nodes=command.segment_nodes,
    )


HYBRIDEP_DOMAIN_VARIABLE = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"
HYBRIDEP_BUFFER = "DeepEP hybrid-ep@94a9f8f deep_ep/hybrid_ep_buffer.py"


def _hybridep_ranks(environment: dict[str, str]) -> int | None:
    """HYBRIDEP_DOMAIN_VARIABLE: Hybrid-EP takes that many consecutive ranks of its group as one NVLink domain
    instead of the ranks it detects (hybrid_ep_buffer.py:61-73); None when the command does not set it."""
    text = environment.get(HYBRIDEP_DOMAIN_VARIABLE)
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise InputError(f"{HYBRIDEP_DOMAIN_VARIABLE} must be a whole number of ranks.", field=HYBRIDEP_DOMAIN_VARIABLE,
                         value=text, expected="a whole number >= 1 (Hybrid-EP reads it with int(), "
                                              f"{HYBRIDEP_BUFFER}:63-65)",
                         fix=f"set {HYBRIDEP_DOMAIN_VARIABLE} to the GPUs of one NVLink domain, or unset it.")
    return int(text)


def hybridep_domain(parsed: ParsedLaunch, options: MegatronOptions, topology: ClusterTopology,
                    notes: list[str]) -> int | None:
    """The NVLink domain a job runs on when its launch line sets HYBRIDEP_DOMAIN_VARIABLE to K below the
    hardware's domain under the Hybrid-EP backend: K consecutive ranks then talk over NVLink as one domain, which
    holds only on an allocation in K-GPU segments of the larger domains (Slurm --segment; NVIDIA's GB200 recipes
    set 64 on NVL72), so the job is judged on K-GPU domains (noted). None when the line leaves the domain as it
    is; a K above the domain is an error, since Hybrid-EP would map ranks it cannot reach as one domain."""
    k, domain = parsed.hybridep_ranks, topology.gpus_per_nvlink_domain
    if k is None or k == domain or not uses_backend(options, "hybridep"):
        return None
    if k > domain:
        raise InputError(f"{HYBRIDEP_DOMAIN_VARIABLE}={k} is more ranks than an NVLink domain of the job holds "
                         f"({domain} GPUs): Hybrid-EP would take ranks it cannot reach over NVLink as one domain "
                         f"({HYBRIDEP_BUFFER}:61-83).", field=HYBRIDEP_DOMAIN_VARIABLE, value=k,
                         expected=f"at most {domain}", fix=f"set it to {domain} or less, or unset it (Hybrid-EP then "
                                                          "detects the ranks it reaches).")
    if k % topology.gpus_per_node:
        notes.append(f"{HYBRIDEP_DOMAIN_VARIABLE}={k}: Hybrid-EP takes {k} ranks as one NVLink domain, fewer than a "
                     f"node's {topology.gpus_per_node} GPUs; parasol judges its groups on the {domain}-GPU domains")
        return None
    notes.append(f"{HYBRIDEP_DOMAIN_VARIABLE}={k}: Hybrid-EP takes {k} consecutive ranks as one NVLink domain "
                 f"({HYBRIDEP_BUFFER}:61-83), which holds on {k}-GPU segments of the {domain}-GPU domains (Slurm "
                 f"--segment): judged on {k}-GPU NVLink domains (hardware.topology.gpus_per_nvlink_domain: {k})")
    return k


def segment_domain(parsed: ParsedLaunch, topology: ClusterTopology, notes: list[str]) -> int | None:
    """The NVLink domain of a job Slurm allocates in --segment pieces smaller than the hardware's domains: each
    piece lies within one block (an NVL72 rack), so the job's ranks share NVLink a segment at a time (noted); None
    when the launch line gives no segment or one of whole domains or more."""
    nodes = parsed.segment_nodes
    if nodes is None or nodes * topology.gpus_per_node >= topology.gpus_per_nvlink_domain:
        return None
    gpus = nodes * topology.gpus_per_node
    notes.append(f"Slurm --segment={nodes}: the job is allocated in pieces of {nodes} nodes ({gpus} GPUs), each within "
                 f"one {topology.gpus_per_nvlink_domain}-GPU NVLink domain: judged on {gpus}-GPU NVLink domains "
                 f"(hardware.topology.gpus_per_nvlink_domain: {gpus})")
    return gpus


def line_domain(parsed: ParsedLaunch, options: MegatronOptions, topology: ClusterTopology,
                notes: list[str]) -> int | None:
    """The NVLink domain the launch line says its job runs on: its Slurm segments (segment_domain), then Hybrid-EP's
    ranks per domain against them (hybridep_domain), each noted; None when it says nothing smaller than `topology`'s."""
    segment = segment_domain(parsed, topology, notes)
    if segment is not None:
        topology = topology.model_copy(update={"gpus_per_nvlink_domain": segment})
    return hybridep_domain(parsed, options, topology, notes) or segment


def _line_domain_note(problem: Problem, parsed: ParsedLaunch, options: MegatronOptions) -> str | None:
    """Beside a problem file, whose hardware section is the user's own statement: a note when the launch line
    implies smaller NVLink domains (line_domain), which it does not override."""
    domain = line_domain(parsed, options, problem.hardware.topology, [])
    if domain is None:
        return None
    said = [text for given, text in ((parsed.segment_nodes, f"Slurm --segment={parsed.segment_nodes}"),
                                     (parsed.hybridep_ranks, f"{HYBRIDEP_DOMAIN_VARIABLE}={parsed.hybridep_ranks}"))
            if given is not None]
    return (f"the launch line ({', '.join(said)}) implies {domain}-GPU NVLink domains; judged on the problem's "
            f"{problem.hardware.topology.gpus_per_nvlink_domain}-GPU domains (write hardware.topology."
            f"gpus_per_nvlink_domain: {domain} if the job runs so)")


def read_launch_file(path: str | Path) -> str:
    """The text of a launch script."""
    return read_input_text(path, "launch script", "--megatron-args-file")


def _set_value(value: object) -> str:
    """A mapping value written as `--set` text."""
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(getattr(value, "value", value))


def _check_conflicts(fields: dict, sets: dict[str, str]) -> None:
    """A --set that disagrees with the launch line is an error (neither silently wins)."""
    for key, text in sets.items():
        if key not in fields or _set_value(fields[key]) == text.replace(" ", ""):
            continue
        flag = DEGREE_FLAGS.get(key, "--recompute-granularity" if key == "recompute" else PIPELINE_FLAGS)
        raise InputError(
            f"--set {key}={text} conflicts with the launch line ({flag} gives {_set_value(fields[key])}).",
            field=key, value=text, fix=f"drop --set {key} or change the launch line, so that one value remains.")


def _merged_options(base: MegatronOptions, parsed: ParsedLaunch, extra: dict | None = None) -> MegatronOptions:
    """`base` with the options the launch line sets."""
    data = base.model_dump()
    data.update(extra or {})
    data.update({k: getattr(parsed.options, k) for k in parsed.options.model_fields_set})
    return MegatronOptions.model_validate(data)


def _training_section(data: dict) -> Training:
    """Validated training fields; a bad combination names the field."""
    try:
        return Training.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"Invalid training setting from the launch line: {err['msg']}.",
                         field=f"training.{err['loc'][0]}", value=err.get("input"),
                         fix="correct the matching flag.") from None


def apply_launch(problem: Problem, parsed: ParsedLaunch, sets: dict[str, str]) -> tuple[Problem, Mapping, tuple[str, ...]]:
    """The problem with the launch line's training and options, and the mapping it runs (the
    problem's mapping < the launch line < --set; a --set that disagrees with the line is an error)."""
    _check_conflicts(parsed.mapping_fields, sets)
    spec = problem.spec
    notes: list[str] = []
    if parsed.launcher_gpus is not None and parsed.launcher_gpus != problem.gpus:
        notes.append(f"the launcher starts {parsed.launcher_gpus} GPUs; judged on the problem's {problem.gpus}")
    section = spec.mapping
    pipeline_keys = {"pp", "vpp", "layout"} & set(parsed.mapping_fields)
    if section is not None and section.layout is not None and pipeline_keys and "layout" not in parsed.mapping_fields:
        section = section.model_copy(update={"layout": None})
        notes.append("the problem's mapping.layout is replaced by the launch line's pipeline")
    training = _training_section(spec.training.model_dump() | _line_training(problem, parsed, notes))
    defaults = _line_option_defaults(problem, parsed, notes)
    framework = spec.framework.model_copy(update={"options": _merged_options(spec.framework.options, parsed, defaults)})
    domain_note = _line_domain_note(problem, parsed, framework.options)
    if domain_note is not None:
        notes.append(domain_note)
    new_spec = spec.model_copy(update={"training": training, "framework": framework, "mapping": section})
    updated = dataclasses.replace(problem, spec=new_spec)
    return updated, build_mapping(updated, {**parsed.mapping_fields, **sets}), tuple(notes)


LINE_SWITCHES = {"distributed_optimizer": ("--use-distributed-optimizer", "the distributed optimizer"),
                 "sequence_parallel": ("--sequence-parallel", "sequence parallelism")}
"""Training settings a launch line switches on by a flag and Megatron runs off without it: read from a whole line
(ParsedLaunch.whole) even beside a problem file; a fragment, and an absent recompute flag (Megatron has no "off"
for it), keep the problem's."""

MEGATRON_TRAINING_DEFAULTS: dict = {key: False for key in LINE_SWITCHES}
"""Training defaults of Megatron-LM where parasol's differ (no distributed optimizer, no SP): the switches off."""


def _whole_line_note(flag: str, runs: str, field: str, value: bool) -> str:
    """The note for a setting a whole launch line runs at Megatron's default where the problem sets it otherwise."""
    return (f"no {flag}: judged {runs}, as Megatron runs this whole launch line (the problem's {field} is "
            f"{str(value).lower()})")


def _line_training(problem: Problem, parsed: ParsedLaunch, notes: list[str]) -> dict:
    """The training fields the launch line sets: a whole line (ParsedLaunch.whole) also runs the switches it leaves
    out off (MEGATRON_TRAINING_DEFAULTS), each one the problem has on noted (SP only where TP > 1); a fragment sets
    only what it gives."""
    line = (MEGATRON_TRAINING_DEFAULTS if parsed.whole else {}) | parsed.training_fields
    tp, training = parsed.mapping_fields.get("tp", 1), problem.spec.training
    notes += [_whole_line_note(flag, f"without {what}", f"training.{key}", True)
              for key, (flag, what) in LINE_SWITCHES.items()
              if key in line and getattr(training, key) and not line[key] and (key != "sequence_parallel" or tp > 1)]
    return line

class OptionDefault(NamedTuple):
    """An option whose Megatron-LM default differs from parasol's: Megatron's value, the flag that moves it off that,
    how a whole line without the flag runs, and whether the difference is noted only for a MoE model."""

    value: bool
    flag: str
    runs: str
    moe_only: bool


OPTION_DEFAULTS = {
    "add_bias_linear": OptionDefault(True, "--disable-bias-linear", "with biases on the linear layers", False),
    "moe_grouped_gemm": OptionDefault(False, "--moe-grouped-gemm", "without grouped GEMM", True),
}
"""Options whose Megatron-LM defaults differ from parasol's (transformer_config.py:212-214, 850); grouped GEMM
runs the experts, so its difference is noted for MoE models alone."""

MEGATRON_OPTION_DEFAULTS: dict = {key: default.value for key, default in OPTION_DEFAULTS.items()}
"""Option defaults of Megatron-LM where parasol's differ (OPTION_DEFAULTS' values)."""


def _line_option_defaults(problem: Problem, parsed: ParsedLaunch, notes: list[str]) -> dict:
    """The options a whole launch line (ParsedLaunch.whole) leaves at Megatron's defaults where parasol's differ
    (MEGATRON_OPTION_DEFAULTS), as Megatron runs it beside a problem file (e.g. --recompute-modules moe_act without
    --moe-grouped-gemm is refused, transformer_config.py:1965-1968); each one the problem set otherwise is noted.
    Empty for a fragment: it keeps the problem's options."""
    if not parsed.whole:
        return {}
    own, options = parsed.options.model_fields_set, problem.spec.framework.options
    left = {key: default for key, default in OPTION_DEFAULTS.items() if key not in own}
    for key, default in left.items():
        if getattr(options, key) != default.value and (problem.model.moe is not None or not default.moe_only):
            notes.append(_whole_line_note(default.flag, default.runs, f"framework.options.{key}", getattr(options, key)))
    return {key: default.value for key, default in left.items()}


def _standalone_model(parsed: ParsedLaunch, model_name: str | None) -> ModelArchitecture:
    """The model of a run without a problem file: --model, else the launch line's flags."""
    if model_name is not None:
        return load_model(model_name)
    if parsed.model is None:
        raise InputError(
            f"Cannot build the model from the launch line: {parsed.model_unavailable}.", field=SOURCE,
            expected="--num-layers, --hidden-size and --num-attention-heads (plus the other model flags)",
            fix="add the model flags, pass --model NAME (`parasol models`), or explain a problem file.")
    return parsed.model


def _standalone_gpus(parsed: ParsedLaunch, gpus: int | None, notes: list[str]) -> int:
    """--gpus, else the ranks the launcher starts (shell.Command.ranks)."""
    if gpus is not None:
        if parsed.launcher_gpus is not None and parsed.launcher_gpus != gpus:
            notes.append(f"the launcher starts {parsed.launcher_gpus} GPUs; judged on --gpus {gpus}")
        return gpus
    if parsed.launcher_gpus is None:
        raise InputError("The GPU count is unknown.", field="--gpus",
                         fix="pass --gpus N (the launcher's rank counts are missing or not numbers: torchrun's "
                             "--nproc_per_node × --nnodes, srun's --ntasks or --ntasks-per-node × --nodes, mpirun's "
                             "-np).")
    return parsed.launcher_gpus


def _standalone_training(parsed: ParsedLaunch, gpus: int, notes: list[str]) -> dict:
    """Training section with Megatron's defaults; GBS defaults to MBS·DP (rule gbs-default)."""
    training = {**MEGATRON_TRAINING_DEFAULTS, **parsed.training_fields}
    if "seq_len" not in training:
        raise InputError("The launch line has no --seq-length.", field="--seq-length",
                         fix="add --seq-length (tokens per sequence), e.g. --seq-length 8192.")
    if "precision" not in training:
        notes.append("no --bf16/--fp16/--fp8-format: Megatron would train in FP32, which parasol does not "
                     "model; judged as BF16")
    if "global_batch" not in training:
        m = parsed.mapping_fields
        model_size = m.get("tp", 1) * m.get("pp", 1) * m.get("cp", 1)
        training["global_batch"] = m.get("mbs", 1) * max(1, gpus // model_size)
        rounded = " (DP rounded down: the world is not divisible by TP·PP·CP)" if gpus % model_size else ""
        notes.append(f"--global-batch-size defaults to MBS·DP = {training['global_batch']}{rounded} (rule gbs-default)")
    return training


def launch_problem(parsed: ParsedLaunch, *, hardware: str, gpus: int | None = None, model_name: str | None = None,
                   sets: dict[str, str] | None = None) -> tuple[Problem, Mapping, tuple[str, ...]]:
    """A problem and mapping from the launch line alone (no problem file): the model from its flags
    (or --model), the run from --seq-length/--global-batch-size…, Megatron's defaults for the rest, and
    the megatron-core pack, plus deepseek-v4 for a C/H/W hybrid pattern or a DeepSeek-V4 model;
    `sets` pin mapping fields as --set does (never gpus, which --gpus gives)."""
    pinned = sets or {}
    if "gpus" in pinned:
        raise InputError("--set gpus is not used without a problem file.", field="--set", value=pinned["gpus"],
                         fix="pass --gpus N instead.")
    _check_conflicts(parsed.mapping_fields, pinned)
    notes: list[str] = []
    model = _standalone_model(parsed, model_name)
    count = _standalone_gpus(parsed, gpus, notes)
    training = _standalone_training(parsed, count, notes)
    options = _merged_options(MegatronOptions(), parsed, MEGATRON_OPTION_DEFAULTS)
    packs = ["megatron-core"]
    if parsed.deepseek_v4 or isinstance(model.attention, DSV4Attention):
        packs.append("deepseek-v4")
    node = {"ranks_per_node": parsed.launcher_ranks_per_node} if parsed.launcher_gpus == count else {}
    domain = line_domain(parsed, options, load_preset(hardware).topology, notes)
    if domain is not None:
        node["topology"] = {"gpus_per_nvlink_domain": domain}
    sections = {"training": training, "hardware": {"preset": hardware, "gpus": count, **node},
                "framework": {"rule_packs": packs, "options": options.model_dump()}}
    problem = problem_from_parts(model, sections, source=SOURCE)
    return problem, build_mapping(problem, {**parsed.mapping_fields, **pinned}), tuple(notes)
