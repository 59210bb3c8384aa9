"""Megatron-LM launch arguments for a parasol mapping (issue 8): the parallel part of the command line,
in groups as Megatron's arguments.py defines them, in a form `explain --megatron-args` reads back.

Flags follow NVIDIA/Megatron-LM main@d98e8a64: megatron/training/arguments.py, whose
ArgumentGroupFactory(TransformerConfig) (arguments.py:2373) turns the fields of
megatron/core/model_parallel_config.py and transformer_config.py into `--field-name` flags, and, for
DeepSeek-V4's hybrid layer pattern, dev@d48bd6be. Only the parallel part is emitted; the model, data,
tokenizer, precision, optimizer and checkpoint flags stay the user's.

The pipeline cut is carried by the mechanism constraints/rules/pipeline.py's `pipeline_split` picks from the
problem's options: a V4 model (or a hybrid pattern option) gets `--hybrid-layer-pattern` with `|` between
its virtual stages; options that fix a layout string, first/last counts or account-for slots keep that
mechanism; otherwise the simplest form that states the cut exactly: nothing for Megatron's even split,
`--decoder-first/last-pipeline-num-layers` for an uneven first or last stage, and
`--pipeline-model-parallel-layout` for any other cut and for every interleaved (VPP) mapping.

`round_trip` parses the emitted line back the way `parasol explain PROBLEM --megatron-args` does and
reports whether it is feasible and gives back the same mapping.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from parasol.constraints.physics.comm import group_link
from parasol.constraints.physics.memory import megatron_distributed_optimizer, megatron_param_gather
from parasol.constraints.physics.weight_format import fp8_param_gather_on
from parasol.constraints.physics.workload import overlap_settings, tp_overlap_applies
from parasol.constraints.rules.pipeline import PipelineSplit, pipeline_split
from parasol.errors import InputError
from parasol.hardware.gpu import compute_capability
from parasol.problems.derived import derive, interleaved_even_layout, stage_layer_totals
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping, RankOrder, Recompute
from parasol.problems.megatron.launch import FSDP_CHECKPOINTS
from parasol.problems.megatron.patterns import LAYER_WISE
from parasol.problems.model.architecture import PATTERN_SYMBOLS, Block, BlockKind, DSV4Attention
from parasol.problems.schema import Precision

MAIN = "Megatron-LM main@d98e8a64 "
DEV = "Megatron-LM dev@d48bd6be "
ARGS = MAIN + "megatron/training/arguments.py"
BLACKWELL_SM = 100
"""The first compute capability whose TP and CP no longer need CUDA_DEVICE_MAX_CONNECTIONS=1 (arguments.py:1455)."""
MPC = MAIN + "megatron/core/model_parallel_config.py"
CONFIG = MAIN + "megatron/core/transformer/transformer_config.py"

COMPARED_FIELDS = ("gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len", "recompute", "layout",
                   "rank_order")
"""Mapping fields the round trip must give back unchanged."""

HYBRID_ATTENTION = {4: "C", 128: "H", 0: "W"}
"""V4 attention symbol per compress ratio (dev@d48bd6be hybrid_layer_allocation.py:14-29: C CSA, H HCA,
W sliding window)."""
HYBRID_MLP = {BlockKind.dense: "-", BlockKind.moe: "E"}
"""Hybrid pattern MLP symbols (hybrid_layer_allocation.py:24-25)."""


@dataclass(frozen=True)
class Flag:
    """One command-line flag with its values (none for an on/off switch)."""

    name: str
    values: tuple[str, ...] = ()

    @property
    def pair(self) -> tuple[str, str | None]:
        """(flag, value): the values joined by spaces, None for a switch."""
        return self.name, " ".join(self.values) if self.values else None

    def shell(self) -> str:
        """The flag as shell words, values quoted where the shell needs it."""
        return " ".join([self.name, *(shlex.quote(v) for v in self.values)])


@dataclass(frozen=True)
class FlagGroup:
    """Flags of one kind with the Megatron-LM source that defines them."""

    name: str
    source: str
    flags: tuple[Flag, ...]


@dataclass(frozen=True)
class LaunchArgs:
    """The parallel part of a Megatron-LM launch line for one mapping."""

    groups: tuple[FlagGroup, ...]
    entry_point: str
    in_code: tuple[str, ...] = ()
    """TransformerConfig settings the run needs that Megatron-LM has no flag for (config_only_settings)."""

    @property
    def flags(self) -> tuple[Flag, ...]:
        """Every flag, group after group."""
        return tuple(f for g in self.groups for f in g.flags)

    def pairs(self) -> list[tuple[str, str | None]]:
        """The ordered (flag, value) list."""
        return [f.pair for f in self.flags]

    def text(self, indent: str = "") -> str:
        """The flags one per line with shell line continuations."""
        return " \\\n".join(indent + f.shell() for f in self.flags)


def _flag(name: str, *values: object) -> Flag:
    """A flag with its values as text."""
    return Flag(name, tuple(str(v) for v in values))


def _is_moe(problem: Problem) -> bool:
    """Whether the model has routed experts (EP, ETP and the dispatcher flags apply)."""
    return problem.model.moe is not None


def _hybrid_model(problem: Problem) -> bool:
    """Whether Megatron builds the model as a HybridModel: DeepSeek-V4 attention or a Mamba/GDN layer
    pattern (consts' hybrid_model, hybrid_layers)."""
    return isinstance(problem.model.attention, DSV4Attention) or problem.model.layer_pattern is not None


# ----------------------------------------------------------------------------------------------
# Flag groups


def degree_flags(problem: Problem, mapping: Mapping) -> FlagGroup:
    """--tensor/pipeline/context/expert-model-parallel-size and --expert-tensor-parallel-size (the
    ModelParallelConfig fields of model_parallel_config.py:55,83,100,127,130 as flags, arguments.py:2373),
    --sequence-parallel (model_parallel_config.py:94) when TP > 1 and the run uses it,
    --use-distributed-optimizer (arguments.py:3156; not with torch FSDP2, which refuses it, 1038-1039),
    --num-distributed-optimizer-instances (arguments.py:3216)
    and --use-tp-pp-dp-mapping (training/config/common_config.py:105) for the rank order tp-cp-ep-pp-dp."""
    training, options = problem.training, problem.spec.framework.options
    flags = [_flag("--tensor-model-parallel-size", mapping.tp), _flag("--pipeline-model-parallel-size", mapping.pp),
             _flag("--context-parallel-size", mapping.cp)]
    if _is_moe(problem):
        flags += [_flag("--expert-model-parallel-size", mapping.ep),
                  _flag("--expert-tensor-parallel-size", mapping.expert_tp)]
    if training.sequence_parallel and mapping.tp > 1:
        flags.append(_flag("--sequence-parallel"))
    if megatron_distributed_optimizer(training):
        flags.append(_flag("--use-distributed-optimizer"))
    if options.num_distributed_optimizer_instances > 1:
        flags.append(_flag("--num-distributed-optimizer-instances", options.num_distributed_optimizer_instances))
    if mapping.rank_order is RankOrder.dp_last:
        flags.append(_flag("--use-tp-pp-dp-mapping"))
    return FlagGroup("parallel degrees", f"{ARGS}:2373,3156,3216; {MPC}:55-130", tuple(flags))


def sharding_and_overlap_flags(problem: Problem, mapping: Mapping) -> FlagGroup:
    """FSDP (--use-megatron-fsdp with --data-parallel-sharding-strategy optim_grads_params, arguments.py:3190,
    and the checkpoint format it requires, --ckpt-format fsdp_dtensor, 1169-1170; or --use-torch-fsdp2 with
    --ckpt-format torch_dist, 1042-1043, --no-gradient-accumulation-fusion, 1040-1041, and
    --untie-embeddings-and-output-weights, 1044-1045), the overlap switches the step model prices as on
    (--overlap-grad-reduce 3121, --overlap-param-gather 3148, not under torch FSDP2: it needs the distributed
    optimizer or Megatron-FSDP, 1024-1026, and FSDP2 prefetches its own gathers; --tp-comm-overlap with TP > 1
    and SP, 1441, for a TP group inside one NVLink domain: workload.tp_overlap_applies), --delay-wgrad-compute,
    the optimizer's host share (--optimizer-cpu-offload, --optimizer-offload-fraction, 2918-2922) and
    fine-grained activation offloading (--fine-grained-activation-offloading --offload-modules,
    transformer_config.py:1323-1345)."""
    training, options = problem.training, problem.spec.framework.options
    overlap = overlap_settings(training, options)
    flags = []
    if training.fsdp == "megatron-fsdp":
        flags += [_flag("--use-megatron-fsdp"), _flag("--data-parallel-sharding-strategy", "optim_grads_params")]
    elif training.fsdp == "torch-fsdp2":
        flags.append(_flag("--use-torch-fsdp2"))
    if training.fsdp != "none":
        flags.append(_flag("--ckpt-format", FSDP_CHECKPOINTS[training.fsdp][0]))
    if training.fsdp == "torch-fsdp2":
        flags += [_flag("--no-gradient-accumulation-fusion"), _flag("--untie-embeddings-and-output-weights")]
    if overlap["grad_reduce_overlap"]:
        flags.append(_flag("--overlap-grad-reduce"))
        if overlap["param_gather_overlap"] and megatron_param_gather(training):
            flags.append(_flag("--overlap-param-gather"))
    tp_link = group_link(problem.hardware.topology, mapping, "tp")
    if tp_overlap_applies(overlap["tp_overlap"], tp_link) and training.sequence_parallel:
        flags.append(_flag("--tp-comm-overlap"))
    if options.delay_wgrad_compute:
        flags.append(_flag("--delay-wgrad-compute"))
    if options.optimizer_cpu_offload:
        flags += [_flag("--optimizer-cpu-offload"),
                  _flag("--optimizer-offload-fraction", options.optimizer_offload_fraction)]
    if options.offload_modules:
        flags += [_flag("--fine-grained-activation-offloading"), _flag("--offload-modules", *options.offload_modules)]
    if options.cpu_offloading and options.cpu_offloading_num_layers > 0:
        flags.append(_flag("--cpu-offloading-num-layers", options.cpu_offloading_num_layers))
    return FlagGroup("sharding, overlap and offloading", f"{ARGS}:1024-1047,1169,1441,1950-1951,2918-2922,3121,"
                     f"3148,3190; {CONFIG}:1323-1345", tuple(flags))


CONFIG_ONLY = ARGS + ":2307-2330"
"""Where Megatron-LM lists the TransformerConfig fields it builds no flag for ("no CLI argument exists for these")."""


def config_only_settings(problem: Problem) -> tuple[str, ...]:
    """The TransformerConfig settings the problem's options take that Megatron-LM has no flag for (CONFIG_ONLY):
    the run sets them where its model provider builds the config. --cpu-offloading-num-layers N > 0 switches CPU
    offloading on (arguments.py:1950-1951), so only keeping activations on the GPU and the FP8 SwiGLU input store
    are left to code."""
    options = problem.spec.framework.options
    settings = []
    if options.cpu_offloading and not options.cpu_offloading_activations:
        settings.append("cpu_offloading_activations=False")
    if options.activation_func_fp8_input_store:
        settings.append("activation_func_fp8_input_store=True")
    return tuple(settings)


def memory_precision_flags(problem: Problem, mapping: Mapping) -> FlagGroup:
    """The precision choices the memory ledger prices, when they leave Megatron's defaults: --fp8-recipe
    (transformer_config.py:594-599) and FP8 parameters (--fp8-param-gather, arguments.py:1095-1097; the ledger's
    weights, weight_format.fp8_param_gather_on) under FP8, and the precision-aware optimizer with its state
    dtypes (arguments.py:3667-3685), which --optimizer-cpu-offload needs (1884-1887); the FP8 SwiGLU input store
    (227-229) has no flag (config_only_settings)."""
    training, options = problem.training, problem.spec.framework.options
    flags = []
    if training.precision is Precision.fp8 and options.fp8_recipe != "delayed":
        flags.append(_flag("--fp8-recipe", options.fp8_recipe))
    if fp8_param_gather_on(training, options):
        flags.append(_flag("--fp8-param-gather"))
    if options.use_precision_aware_optimizer:
        flags.append(_flag("--use-precision-aware-optimizer"))
        for name, value in (("--main-params-dtype", options.main_params_dtype),
                            ("--exp-avg-dtype", options.exp_avg_dtype), ("--exp-avg-sq-dtype", options.exp_avg_sq_dtype)):
            if value != "fp32":
                flags.append(_flag(name, value))
    return FlagGroup("memory-saving precision", f"{ARGS}:1095-1097,1884-1887,3667-3685; {CONFIG}:227-229,594-599",
                     tuple(flags))


def batch_flags(problem: Problem, mapping: Mapping) -> FlagGroup:
    """--micro-batch-size and --global-batch-size (TrainingConfig, training/config/training_config.py:11-15,
    as flags by arguments.py:2863) and --seq-length (arguments.py:3305)."""
    flags = (_flag("--micro-batch-size", mapping.mbs), _flag("--global-batch-size", mapping.gbs),
             _flag("--seq-length", mapping.seq_len))
    return FlagGroup("batch", f"{ARGS}:2863,3305; {MAIN}megatron/training/config/training_config.py:11-15", flags)


def recompute_flags(problem: Problem, mapping: Mapping) -> FlagGroup:
    """--recompute-granularity, --recompute-method, --recompute-num-layers and --recompute-modules
    (transformer_config.py:532-560). Full recompute of every layer, the memory ledger's assumption, is
    --recompute-method uniform --recompute-num-layers 1 unless the options name others; selective recompute
    lists the run's modules. No recompute is Megatron's default and needs no flag."""
    options = problem.spec.framework.options
    if mapping.recompute is Recompute.full:
        flags = (_flag("--recompute-granularity", "full"),
                 _flag("--recompute-method", options.recompute_method or "uniform"),
                 _flag("--recompute-num-layers", options.recompute_num_layers or 1))
    elif mapping.recompute is Recompute.selective:
        flags = (_flag("--recompute-granularity", "selective"),
                 _flag("--recompute-modules", *problem.training.recompute_modules))
    else:
        flags = ()
    return FlagGroup("recompute", f"{CONFIG}:532-560", flags)


def moe_flags(problem: Problem, mapping: Mapping) -> FlagGroup:
    """--moe-token-dispatcher-type and --moe-flex-dispatcher-backend (transformer_config.py:891-898),
    --moe-grouped-gemm (850), --moe-expert-capacity-factor and --moe-pad-expert-input-to-capacity (917-921),
    --moe-shared-expert-overlap (717) and --overlap-moe-expert-parallel-comm; nothing for a dense model."""
    if not _is_moe(problem):
        return FlagGroup("MoE dispatch", f"{CONFIG}:850-921", ())
    options, training = problem.spec.framework.options, problem.training
    flags = [_flag("--moe-token-dispatcher-type", options.moe_token_dispatcher_type)]
    if options.moe_token_dispatcher_type == "flex":
        flags.append(_flag("--moe-flex-dispatcher-backend", options.moe_flex_dispatcher_backend))
    if options.moe_grouped_gemm:
        flags.append(_flag("--moe-grouped-gemm"))
    if training.capacity_factor is not None:
        flags.append(_flag("--moe-expert-capacity-factor", training.capacity_factor))
    for on, name in ((options.moe_pad_expert_input_to_capacity, "--moe-pad-expert-input-to-capacity"),
                     (options.moe_shared_expert_overlap, "--moe-shared-expert-overlap"),
                     (options.overlap_moe_expert_parallel_comm, "--overlap-moe-expert-parallel-comm")):
        if on:
            flags.append(_flag(name))
    return FlagGroup("MoE dispatch", f"{CONFIG}:717,850-921", tuple(flags))


def context_flags(problem: Problem, mapping: Mapping) -> FlagGroup:
    """With CP > 1: --cp-comm-type (arguments.py:3221), --hierarchical-context-parallel-sizes
    (model_parallel_config.py:103), --cp-partition-mode when not Megatron's zigzag (transformer_config.py:312),
    and --dynamic-context-parallel with --calculate-per-token-loss when the options use dynamic CP."""
    if mapping.cp == 1:
        return FlagGroup("context parallel", f"{ARGS}:3221", ())
    options = problem.spec.framework.options
    flags = [_flag("--cp-comm-type", options.cp_comm_type)]
    if options.hierarchical_context_parallel_sizes is not None:
        flags.append(_flag("--hierarchical-context-parallel-sizes", *options.hierarchical_context_parallel_sizes))
    if options.cp_partition_mode != "zigzag":
        flags.append(_flag("--cp-partition-mode", options.cp_partition_mode))
    if options.dynamic_context_parallel:
        flags.append(_flag("--dynamic-context-parallel"))
        if options.calculate_per_token_loss:
            flags.append(_flag("--calculate-per-token-loss"))
    return FlagGroup("context parallel", f"{ARGS}:3221; {MPC}:103; {CONFIG}:312", tuple(flags))


def pipeline_flags(problem: Problem, mapping: Mapping) -> FlagGroup:
    """How the blocks are cut over the PP·VPP virtual stages (module docstring): --hybrid-layer-pattern
    (arguments.py:3652-3659, dev hybrid_layer_allocation.py), --pipeline-model-parallel-layout
    (arguments.py:3103-3110, grammar pipeline_parallel_layer_layout.py:282-321),
    --decoder-first/last-pipeline-num-layers (arguments.py:3095-3102, transformer_config.py:2294-2368),
    --account-for-embedding/loss-in-pipeline-split (transformer_config.py:137-141) and
    --num-virtual-stages-per-pipeline-rank (arguments.py:3116-3117, 925-979); then
    --microbatch-group-size-per-virtual-pipeline-stage (model_parallel_config.py:431) and
    --no-overlap-p2p-communication (arguments.py:3118-3120) when the options set them."""
    options = problem.spec.framework.options
    layout = derive(problem.model, mapping).layout
    split = pipeline_split(options, _hybrid_model(problem), layout_explicit=True)
    if split is PipelineSplit.hybrid_pattern:
        flags = [_flag("--hybrid-layer-pattern", hybrid_pattern(problem, layout))]
    elif split is PipelineSplit.layout_string:
        flags = [_flag("--pipeline-model-parallel-layout", layout_string(problem, layout))]
    elif split is PipelineSplit.uneven_flags:
        flags = _required(_uneven(layout, mapping, options.decoder_first_pipeline_num_layers is not None,
                                  options.decoder_last_pipeline_num_layers is not None), layout, split)
    elif split is PipelineSplit.account_for:
        flags = _required(_accounted(problem, layout, mapping), layout, split)
    else:
        flags = _simplest(problem, layout, mapping)
    if mapping.vpp > 1 and options.microbatch_group_size_per_vp_stage is not None:
        flags.append(_flag("--microbatch-group-size-per-virtual-pipeline-stage",
                           options.microbatch_group_size_per_vp_stage))
    if not options.overlap_p2p_comm and mapping.pp > 1:
        flags.append(_flag("--no-overlap-p2p-communication"))
    return FlagGroup("pipeline", f"{ARGS}:925-999,3095-3120,3652-3659; "
                                 f"{MAIN}megatron/core/transformer/pipeline_parallel_layer_layout.py:282-321", tuple(flags))


def _required(flags: list[Flag] | None, layout: tuple[int, ...], split: PipelineSplit) -> list[Flag]:
    """The flags of the mechanism the problem's options fix, or an error when it cannot state this cut."""
    if flags is None:
        raise InputError(
            f"The cut {list(layout)} cannot be launched with {split.value}, which the problem's "
            "framework.options select.", field="framework.options", value=split.value,
            expected="a cut that mechanism expresses",
            fix="remove the first/last or account-for options so that parasol emits "
                "--pipeline-model-parallel-layout, or pick a mapping with that split.")
    return flags


def _vpp_flag(mapping: Mapping) -> list[Flag]:
    """--num-virtual-stages-per-pipeline-rank when the schedule is interleaved."""
    return [_flag("--num-virtual-stages-per-pipeline-rank", mapping.vpp)] if mapping.vpp > 1 else []


def _simplest(problem: Problem, layout: tuple[int, ...], mapping: Mapping) -> list[Flag]:
    """No options fix the mechanism: the even split or first/last counts when they state the cut with one
    stage per rank, else the layout string (always for VPP)."""
    if mapping.vpp == 1:
        for first, last in ((False, False), (True, False), (False, True), (True, True)):
            flags = _uneven(layout, mapping, first, last)
            if flags is not None:
                return flags
    return [_flag("--pipeline-model-parallel-layout", layout_string(problem, layout))]


def _uneven(layout: tuple[int, ...], mapping: Mapping, first: bool, last: bool) -> list[Flag] | None:
    """The --decoder-first/last-pipeline-num-layers flags (only those asked for) that make Megatron cut
    exactly `layout`, or None: each rank splits its blocks evenly over its virtual stages, the middle ranks
    hold equal positive counts and an emitted count is positive (transformer_config.py:2294-2368)."""
    pp, vpp = mapping.pp, mapping.vpp
    totals = stage_layer_totals(layout, pp)
    if any(n % vpp for n in totals) or tuple(layout) != interleaved_even_layout(totals, vpp):
        return None
    if pp == 1 and (first or last):
        return None
    middle = totals[int(first):pp - int(last)]
    if len(set(middle)) > 1 or (middle and middle[0] == 0):
        return None
    if (first and totals[0] == 0) or (last and totals[-1] == 0):
        return None
    flags = [_flag("--decoder-first-pipeline-num-layers", totals[0])] if first else []
    if last:
        flags.append(_flag("--decoder-last-pipeline-num-layers", totals[-1]))
    return flags + _vpp_flag(mapping)


def _accounted(problem: Problem, layout: tuple[int, ...], mapping: Mapping) -> list[Flag] | None:
    """--account-for-embedding/loss-in-pipeline-split as the options set them, when Megatron's even split of
    L + embedding + loss slots is exactly `layout` (transformer_config.py:2370-2415), else None."""
    options = problem.spec.framework.options
    embedding, loss = options.account_for_embedding_in_pipeline_split, options.account_for_loss_in_pipeline_split
    stages = mapping.pp * mapping.vpp
    slots = problem.model.num_layers + int(embedding) + int(loss)
    if slots % stages:
        return None
    expected = [slots // stages] * stages
    expected[0] -= int(embedding)
    expected[-1] -= int(loss)
    if tuple(expected) != layout:
        return None
    flags = [_flag(name) for on, name in ((embedding, "--account-for-embedding-in-pipeline-split"),
                                          (loss, "--account-for-loss-in-pipeline-split")) if on]
    return flags + _vpp_flag(mapping)


# ----------------------------------------------------------------------------------------------
# Layout string and hybrid pattern


def layout_stages(layout: Sequence[int], mtp_layers: int) -> list[str]:
    """Each virtual stage's symbols: E (embedding) first, t per decoder block, then on the last stage m per
    MTP layer and L (loss) (pipeline_parallel_layer_layout.py:94-145: one E first, one L last, MTP after the
    decoders in the last virtual stage of its rank)."""
    stages = []
    for k, blocks in enumerate(layout):
        head = "E" if k == 0 else ""
        tail = "m" * mtp_layers + "L" if k == len(layout) - 1 else ""
        stages.append(head + "t" * blocks + tail)
    return stages


def _compact(symbols: str) -> str:
    """One stage's symbols with runs of a symbol written x*n (pipeline_parallel_layer_layout.py:297-301)."""
    out, i = [], 0
    while i < len(symbols):
        j = i
        while j < len(symbols) and symbols[j] == symbols[i]:
            j += 1
        out.append(symbols[i] if j - i == 1 else f"{symbols[i]}*{j - i}")
        i = j
    return "".join(out)


def format_layout(stages: Sequence[str]) -> str:
    """A Megatron layout string for the stages' symbols: stages joined by '|', runs of equal stages (the
    last excepted, which has no '|' after it) folded as (stage|)*n followed by a cosmetic ','
    (pipeline_parallel_layer_layout.py:282-321; e.g. Et*3|(t*4|)*14,t*2mL)."""
    parts, k = [], 0
    while k < len(stages):
        j = k
        while j + 1 < len(stages) - 1 and stages[j + 1] == stages[k]:
            j += 1
        text = _compact(stages[k])
        if j > k:
            parts.append(f"({text}|)*{j - k + 1},")
        elif k == len(stages) - 1:
            parts.append(text)
        else:
            parts.append(text + "|")
        k = j + 1
    return "".join(parts).rstrip(",")


def layout_string(problem: Problem, layout: Sequence[int]) -> str:
    """--pipeline-model-parallel-layout for the blocks per virtual stage (Megatron's flat stage order)."""
    return format_layout(layout_stages(layout, problem.model.mtp_layers))


def _block_symbols(block: Block) -> str:
    """A block in the hybrid pattern: a layer-pattern block's one symbol (hybrid_layer_allocation.py:14-25),
    or a V4 block's attention symbol by compress ratio, then its MLP symbol."""
    for symbol, (mixer, mlp) in PATTERN_SYMBOLS.items():
        if block.compress_ratio is None and not block.mtp and (mixer, mlp) == (block.mixer, block.mlp):
            return symbol
    return HYBRID_ATTENTION.get(block.compress_ratio, "*") + HYBRID_MLP[block.mlp]


def _pattern_blocks(problem: Problem) -> tuple[list[str], str]:
    """Per main block its two pattern symbols, and the MTP part ('/'-separated depths, '' when none): from
    the options' --hybrid-layer-pattern when given, else from the V4 model's compress ratios."""
    given = problem.spec.framework.options.hybrid_layer_pattern
    if given is not None:
        main, sep, mtp = given.partition("/")
        flat = main.replace("|", "")
        if LAYER_WISE & set(flat):
            return list(flat), sep + mtp
        return [flat[i:i + 2] for i in range(0, len(flat), 2)], sep + mtp
    model = problem.model
    mtp = "".join("/" + _block_symbols(b) for b in model.mtp_blocks)
    return [_block_symbols(b) for b in model.blocks], mtp


def hybrid_pattern(problem: Problem, layout: Sequence[int]) -> str:
    """--hybrid-layer-pattern with '|' between the virtual stages (hybrid_layer_allocation.py: '|' marks the
    pipeline segments, '/' starts each MTP depth; Megatron sets VPP = segments / PP, arguments.py:840-862)."""
    blocks, mtp = _pattern_blocks(problem)
    segments, start = [], 0
    for count in layout:
        segments.append("".join(blocks[start:start + count]))
        start += count
    return "|".join(segments) + mtp


# ----------------------------------------------------------------------------------------------
# The whole line, the script and the round trip


GROUP_BUILDERS = (degree_flags, sharding_and_overlap_flags, memory_precision_flags, batch_flags, pipeline_flags,
                  recompute_flags, moe_flags, context_flags)


def megatron_args(problem: Problem, mapping: Mapping) -> LaunchArgs:
    """The parallel part of the Megatron-LM command line for `mapping`, group by group."""
    if problem.training.pipeline_schedule != "megatron":
        raise InputError(
            f"Megatron-LM has no {problem.training.pipeline_schedule} schedule: no launch line can state it.",
            field="training.pipeline_schedule", value=problem.training.pipeline_schedule, expected="megatron",
            fix="emit with pipeline_schedule: megatron (1F1B; --overlap-moe-expert-parallel-comm overlaps EP "
                "all-to-all as DualPipe does), or run DualPipe with deepseek-ai/DualPipe.")
    groups = tuple(g for g in (build(problem, mapping) for build in GROUP_BUILDERS) if g.flags)
    hybrid = any(f.name == "--hybrid-layer-pattern" for g in groups for f in g.flags)
    return LaunchArgs(groups, "pretrain_hybrid.py" if hybrid else "pretrain_gpt.py", config_only_settings(problem))


def mapping_summary(mapping: Mapping) -> str:
    """One line naming the degrees, batch and recompute of a mapping."""
    m = mapping
    return (f"TP{m.tp} PP{m.pp} CP{m.cp} EP{m.ep} ETP{m.expert_tp} VPP{m.vpp} MBS{m.mbs} GBS{m.gbs} "
            f"seq {m.seq_len}, recompute {m.recompute.value}")


def launch_environment(problem: Problem, mapping: Mapping) -> tuple[str, ...]:
    """The shell lines setting what Megatron-LM's argument checks ask of the environment: FSDP refuses
    CUDA_DEVICE_MAX_CONNECTIONS=1 (arguments.py:1048, 1166); otherwise TP or CP > 1 on GPUs before Blackwell
    requires it (1453-1479; a GPU whose compute capability parasol cannot state is taken as before). Fine-grained
    activation offloading with Transformer Engine 2.10 or later needs NVTE_CPU_OFFLOAD_V1=1 (1936-1939; set
    whatever the version, which parasol cannot see: older ones ignore it)."""
    lines = []
    sm = compute_capability(problem.hardware.gpu.name)
    if problem.training.fsdp != "none":
        lines.append(f"unset CUDA_DEVICE_MAX_CONNECTIONS  # FSDP refuses 1 ({ARGS}:1048,1166)")
    elif (mapping.tp > 1 or mapping.cp > 1) and (sm is None or sm < BLACKWELL_SM):
        lines.append(f"export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP or CP > 1 before Blackwell ({ARGS}:1453-1479)")
    if problem.spec.framework.options.offload_modules:
        lines.append(f"export NVTE_CPU_OFFLOAD_V1=1  # fine-grained activation offloading, TE >= 2.10 "
                     f"({ARGS}:1936-1939)")
    return tuple(lines)


def _branch_lines(problem: Problem) -> tuple[str, ...]:
    """The header lines naming the Megatron-LM branch a DeepSeek-V4 line needs: main@d98e8a64 has no V4 path (its
    parser refuses --cp-partition-mode and the dsv4_hybrid attention, its layer patterns the C/H/W symbols), so
    the real Megatron-LM main refuses these lines at argument parsing and dev@d48bd6be accepts them."""
    if not isinstance(problem.model.attention, DSV4Attention):
        return ()
    return (f"# DeepSeek-V4: run it with {DEV.strip()}, the branch these flags follow: {MAIN.strip()} has no V4",
            "# path (no --cp-partition-mode, no dsv4_hybrid attention, no C/H/W layer symbols) and stops at parsing.")


def launch_script(problem: Problem, mapping: Mapping, title: str) -> str:
    """A commented launch script: the environment Megatron's checks ask for (launch_environment), then torchrun
    with the job's geometry and the parallel flags, one per line."""
    args = megatron_args(problem, mapping)
    topo = problem.hardware.topology
    nodes, per_node = problem.gpus // topo.gpus_per_node, topo.gpus_per_node
    header = [
        "#!/usr/bin/env bash",
        f"# parasol: Megatron-LM launch flags for {title}",
        f"#   {mapping_summary(mapping)}; {problem.gpus:,} GPUs = {nodes:,} nodes x {per_node} GPUs.",
        "# Run it on every host of the host order (hosts.txt) with NODE_RANK = the host's line (0-based) and",
        "# MASTER_ADDR = the first host: global rank = NODE_RANK * GPUs per node + local rank, the order in",
        f"# which Megatron's groups ({mapping.rank_order.value}) land on the nodes as parasol judged them.",
        "# Only the parallel part is here: append the model, data, tokenizer, precision, optimizer and",
        "# checkpoint flags (add ' \\' to the last line).",
        f"# Check it: parasol explain {problem.source} --megatron-args-file THIS_FILE",
        *_branch_lines(problem),
    ]
    launcher = (f"torchrun --nnodes {nodes} --nproc-per-node {per_node} --node-rank \"${{NODE_RANK}}\" "
                f"--master-addr \"${{MASTER_ADDR}}\" --master-port \"${{MASTER_PORT:-6000}}\" \\\n"
                f"    {args.entry_point} \\\n")
    in_code = (f"# Set in code, on the TransformerConfig the model provider builds (Megatron-LM has no flag for "
               f"them, {CONFIG_ONLY}): {', '.join(args.in_code)}",) if args.in_code else ()
    lines = (*header, *in_code, *launch_environment(problem, mapping))
    return "\n".join(lines) + "\n" + launcher + args.text(indent="    ") + "\n"


@dataclass(frozen=True)
class RoundTrip:
    """The emitted line read back as `explain PROBLEM --megatron-args` reads it."""

    text: str
    feasible: bool
    emitted: dict
    parsed: dict
    violations: tuple[str, ...]
    notes: tuple[str, ...]
    metrics: dict = field(default_factory=dict)
    """The read-back mapping's metrics as explain prints them (step_time_s, peak_memory_gb, ...)."""

    @property
    def differences(self) -> dict[str, tuple[object, object]]:
        """Mapping fields that differ: field -> (emitted, parsed)."""
        return {k: (self.emitted[k], self.parsed[k]) for k in COMPARED_FIELDS if self.emitted[k] != self.parsed[k]}

    @property
    def ok(self) -> bool:
        """Feasible and the same mapping."""
        return self.feasible and not self.differences


def compared_mapping(problem: Problem, mapping: Mapping) -> dict:
    """The compared fields of a mapping, its layout as the cut it makes (the default split when unset)."""
    data = mapping.as_dict()
    data["layout"] = list(derive(problem.model, mapping).layout)
    return {k: data[k] for k in COMPARED_FIELDS}


def round_trip(problem: Problem, mapping: Mapping, text: str | None = None) -> RoundTrip:
    """Emit `mapping`'s launch script (or take `text`), read it back against `problem` on the mapping's
    own GPU count (a training pool the solver sized, solver/search/pools.py, launches on that many) and judge it."""
    from parasol.problems.megatron.launch import apply_launch, parse_launch
    from parasol.solver.diagnose.explain import explain

    if mapping.gpus != problem.gpus:
        problem = problem.resized(mapping.gpus)

    script = launch_script(problem, mapping, problem.spec.name or problem.source) if text is None else text
    parsed = parse_launch(script, source="emitted launch line", model=problem.model)
    updated, back, notes = apply_launch(problem, parsed, {})
    result = explain(updated, back, repairs=0)
    violations = tuple(v.rule for v in result.evaluation.violations)
    return RoundTrip(script, result.feasible, compared_mapping(problem, mapping), compared_mapping(updated, back),
                     violations, (*notes, *parsed.notes), result.metrics())
