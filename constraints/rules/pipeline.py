"""Pipeline rules: how the blocks are cut over PP·VPP virtual stages and what Megatron checks for each
way of describing the cut.

How parasol's `layout` maps onto Megatron's mechanisms (first match wins; `pipeline_split`):
1. hybrid pattern: a --hybrid-layer-pattern option, a DeepSeek-V4 model (Megatron builds V4 as a
   HybridModel whose pattern's `|` marks the stages, seed 000 §61 个块怎样分给流水线) or a model with a
   layer_pattern (Mamba/GDN hybrids, built by pretrain_hybrid.py; arguments.py:799-862). The pattern
   rules are the deepseek-v4 pack's (constraints/rules/deepseek_v4.py); here only the two pattern-text rules.
2. layout string: a --pipeline-model-parallel-layout option. Its text is parsed with
   problems/megatron/layout_string.py and judged by the layout-* rules (stages % PP, VPP, E/L/t/m counts).
3. uneven flags: --decoder-first/last-pipeline-num-layers. The uneven-* rules judge them.
4. account-for: --account-for-embedding/loss-in-pipeline-split. Megatron splits L' = L + E + L_loss
   slots evenly: layers-divisible-by-pp, vpp-layers-per-rank-divisible and the account-for-* rules.
5. parasol's own cut: an explicit `layout` (--set layout=… or mapping.layout) with none of the flags
   above. Any cut of PP·VPP stages is expressible as a layout string, so parasol realises it as
   --pipeline-model-parallel-layout `E…|…|…L`; nothing beyond layout-covers-blocks is checked.
6. even split: no layout and no flags. Megatron gets only --num-layers (and
   --num-virtual-stages-per-pipeline-rank for VPP) and splits evenly, so L % PP == 0 and
   (L/PP) % VPP == 0 are required (layers-divisible-by-pp, vpp-layers-per-rank-divisible), even when
   parasol's default split (derived.default_layout) would be uneven. Give a layout to cut unevenly.
The CP-SAT side reads the same choice from v.options, v.consts["hybrid_model"] and
v.consts["layout_explicit"] (mapping_consts; 0 when absent, as in a search without a fixed layout).

Sources: reference/megatron-rules.yaml (Megatron-LM main@d98e8a64) and megatron-groups.md
§2.3; the interleaved-schedule microbatch rules are in constraints/rules/schedule.py.
"""

from __future__ import annotations

from enum import StrEnum

from parasol.constraints.core.base import (
    ARGUMENTS,
    CONFIG,
    Citation,
    Constraint,
    Facts,
    Family,
    Severity,
    remainder_slack,
)
from parasol.constraints.core.consts import mapping_consts, model_consts
from parasol.constraints.rules.feature import SettingsRule
from parasol.errors import InputError
from parasol.problems.megatron.layout_string import ParsedLayout, parse_pipeline_layout
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.options import MegatronOptions

BLOCK = "Megatron-LM megatron/core/transformer/transformer_block.py"
LAYOUT = "Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py"
HYBRID = "Megatron-LM megatron/core/models/hybrid/hybrid_layer_allocation.py"


class LayoutCoversBlocks(Constraint):
    """The layout has PP·VPP entries summing to the number of blocks."""

    id = "layout-covers-blocks"
    family = Family.pipeline
    citation = Citation("Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py "
                        "(stage count % PP, count(t) == num_layers; validate_layer_layout, called from "
                        "megatron/core/transformer/transformer_config.py:2290)", MegatronStage.config)
    pack = None
    unit = "blocks"
    summary = "len(layout) == PP·VPP and sum(layout) == num_layers"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only an explicit layout can miss; Megatron's default split covers the blocks by construction
        (more virtual stages than blocks is virtual-stages-within-blocks)."""
        return f.mapping.layout is not None

    def slack(self, f: Facts) -> float:
        layout, m = f.derived.layout, f.mapping
        if m.layout is None:
            return 0.0
        if len(layout) != m.pp * m.vpp:
            return -float(abs(len(layout) - m.pp * m.vpp))
        return -float(abs(sum(layout) - f.model.num_layers))

    def message(self, f: Facts) -> str:
        layout, m = f.derived.layout, f.mapping
        if len(layout) != m.pp * m.vpp:
            return f"layout has {len(layout)} stages; PP·VPP = {m.pp}·{m.vpp} = {m.pp * m.vpp} are needed"
        return f"layout places {sum(layout)} blocks; the model has {f.model.num_layers}"

    def post(self, model, v, enforce) -> None:
        if not v.consts.get("layout_explicit", 0):
            return  # Megatron's default split has PP·VPP stages over every block by construction
        stages = v.consts["layout_stages"]
        if v.consts["layout_blocks"] != v.consts["num_layers"]:
            model.AddBoolOr([enforce.Not()])
        model.Add(v.product("pp", "vpp") == stages).OnlyEnforceIf(enforce)


class VirtualStagesWithinBlocks(Constraint):
    """Without an explicit layout every virtual stage holds a block, or the embedding or the loss when
    account_for_*_in_pipeline_split gives them a slot (transformer_block.py:187-200 builds >= 0 layers):
    parasol's default cut, and Megatron's even split and hybrid pattern that realise it, have no empty
    stage, so PP·VPP <= blocks + those slots."""

    id = "virtual-stages-within-blocks"
    family = Family.pipeline
    citation = Citation("parasol problems/derived.py default_layout (a block or a slot per virtual stage)")
    pack = None
    unit = "virtual stages"
    summary = "no explicit layout: PP·VPP <= L + [emb] + [loss]"

    def in_force(self, f: Facts) -> bool:
        """Only parasol's own cut (no explicit layout) places a block on every virtual stage."""
        return f.mapping.layout is None

    def slack(self, f: Facts) -> float:
        m = f.mapping
        return float(slots(f.options, f.model.num_layers) - m.pp * m.vpp) if m.layout is None else 0.0

    def message(self, f: Facts) -> str:
        m, room = f.mapping, slots(f.options, f.model.num_layers)
        return (f"PP·VPP = {m.pp}·{m.vpp} = {m.pp * m.vpp} virtual stages for {room} blocks and slots: a virtual "
                "stage would hold nothing (give an explicit layout, or lower PP or VPP)")

    def post(self, model, v, enforce) -> None:
        if not v.consts.get("layout_explicit", 0):
            model.Add(v.product("pp", "vpp") <= slots(v.options, v.consts["num_layers"])).OnlyEnforceIf(enforce)


class PipelineSplit(StrEnum):
    """The Megatron mechanism that realises a mapping's pipeline cut (module docstring)."""

    hybrid_pattern = "hybrid layer pattern"
    layout_string = "--pipeline-model-parallel-layout"
    uneven_flags = "--decoder-first/last-pipeline-num-layers"
    account_for = "even split with account-for-embedding/loss"
    parasol_layout = "parasol's explicit layout (emitted as --pipeline-model-parallel-layout)"
    even = "even split"


def pipeline_split(options: MegatronOptions, hybrid_model: bool, layout_explicit: bool) -> PipelineSplit:
    """Which mechanism carries the cut, first match in the module docstring's order."""
    if options.hybrid_layer_pattern is not None or hybrid_model:
        return PipelineSplit.hybrid_pattern
    if options.pipeline_model_parallel_layout is not None:
        return PipelineSplit.layout_string
    if uneven_set(options):
        return PipelineSplit.uneven_flags
    if account_for(options):
        return PipelineSplit.account_for
    return PipelineSplit.parasol_layout if layout_explicit else PipelineSplit.even


def split_of(f: Facts) -> PipelineSplit:
    """The mechanism of one mapping (Python side)."""
    consts = model_consts(f.problem)
    return pipeline_split(f.options, bool(consts["hybrid_model"] or consts["hybrid_layers"]),
                          bool(mapping_consts(f)["layout_explicit"]))


def split_of_vars(v) -> PipelineSplit:  # noqa: ANN001 - DecisionVars
    """The mechanism the CP-SAT side sees (the same constants)."""
    hybrid = bool(v.consts["hybrid_model"] or v.consts.get("hybrid_layers", 0))
    return pipeline_split(v.options, hybrid, bool(v.consts.get("layout_explicit", 0)))


def uneven_set(options: MegatronOptions) -> bool:
    """Whether a first/last-stage layer count is given."""
    return (options.decoder_first_pipeline_num_layers is not None
            or options.decoder_last_pipeline_num_layers is not None)


def account_for(options: MegatronOptions) -> bool:
    """Whether the embedding or the loss takes a layer slot in the split."""
    return options.account_for_embedding_in_pipeline_split or options.account_for_loss_in_pipeline_split


def slots(options: MegatronOptions, num_layers: int) -> int:
    """L' = L + [embedding slot] + [loss slot], the count Megatron splits evenly."""
    return (num_layers + int(options.account_for_embedding_in_pipeline_split)
            + int(options.account_for_loss_in_pipeline_split))


EVEN_SPLITS = (PipelineSplit.even, PipelineSplit.account_for)


class LayersDivisibleByPP(Constraint):
    """Megatron's even split gives every pipeline rank L'/PP layer slots. validate_args asserts it only when
    no virtual-stage flag is given; with VPP the model build asserts it (vpp-layers-per-rank-divisible), with
    --num-layers-per-virtual-pipeline-stage vpp-from-layers-per-vstage does."""

    id = "layers-divisible-by-pp"
    family = Family.pipeline
    citation = Citation(f"{ARGUMENTS}:985-998; {BLOCK}:147-158", MegatronStage.arguments)
    unit = "layers"
    summary = "even split, no VPP flag: (L + [emb] + [loss]) % PP == 0"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only Megatron's even split (plain or account-for) without virtual stages divides L' by PP here."""
        return (split_of(f) in EVEN_SPLITS and f.mapping.vpp == 1
                and f.options.num_layers_per_virtual_pipeline_stage is None)

    def slack(self, f: Facts) -> float:
        if not self.in_force(f):
            return 0.0
        return remainder_slack(slots(f.options, f.model.num_layers), f.mapping.pp)

    def message(self, f: Facts) -> str:
        n, pp = slots(f.options, f.model.num_layers), f.mapping.pp
        return (f"Number of layers should be divisible by the pipeline-model-parallel size ({n} layer slots on PP "
                f"{pp}, remainder {n % pp}); give an explicit layout to cut unevenly")

    def post(self, model, v, enforce) -> None:
        if split_of_vars(v) in EVEN_SPLITS and v.options.num_layers_per_virtual_pipeline_stage is None:
            on = v.all_of([enforce, v.at_least("vpp", 2).Not()], "layers_pp_on")
            v.divides(v.pp, slots(v.options, v.consts["num_layers"]), "layers_pp", on)


class VppLayersPerRankDivisible(Constraint):
    """Under an even split with interleaving each rank's L'/PP slots split evenly over its VPP stages."""

    id = "vpp-layers-per-rank-divisible"
    family = Family.pipeline
    citation = Citation(f"{BLOCK}:161-179", MegatronStage.model_build)
    unit = "layers"
    summary = "even split, PP > 1, VPP > 1: L' % (PP·VPP) == 0"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only an even split with a pipeline and interleaving divides the slots by PP·VPP."""
        return split_of(f) in EVEN_SPLITS and f.mapping.pp > 1 and f.mapping.vpp > 1

    def slack(self, f: Facts) -> float:
        m = f.mapping
        if split_of(f) not in EVEN_SPLITS or m.pp == 1 or m.vpp == 1:
            return 0.0
        return remainder_slack(slots(f.options, f.model.num_layers), m.pp * m.vpp)

    def message(self, f: Facts) -> str:
        m, n = f.mapping, slots(f.options, f.model.num_layers)
        per_rank = n // m.pp if n % m.pp == 0 else round(n / m.pp, 3)
        return f"num_layers_per_pipeline_rank {per_rank} should be divisible by vp_size {m.vpp}"

    def post(self, model, v, enforce) -> None:
        if split_of_vars(v) in EVEN_SPLITS:
            on = v.all_of([enforce, v.at_least("pp", 2), v.at_least("vpp", 2)], "vpp_layers_on")
            v.divides(v.product("pp", "vpp"), slots(v.options, v.consts["num_layers"]), "layers_pp_vpp", on)


def vpp_flags_given(options: MegatronOptions) -> list[str]:
    """The virtual-stage flags set, of the three Megatron accepts one of."""
    return [flag for flag, on in (
        ("--num-layers-per-virtual-pipeline-stage", options.num_layers_per_virtual_pipeline_stage is not None),
        ("--num-virtual-stages-per-pipeline-rank", options.num_virtual_stages_per_pipeline_rank is not None),
        ("--pipeline-model-parallel-layout", options.pipeline_model_parallel_layout is not None)) if on]


class VppFromLayersPerVStage(Constraint):
    """--num-layers-per-virtual-pipeline-stage k: Megatron derives VPP = (L'/PP)/k and asserts both
    divisions are whole, so PP·VPP·k must equal the L' layer slots. Only when k is the one virtual-stage flag:
    beside another, Megatron stops at vpp-args-mutually-exclusive before deriving anything."""

    id = "vpp-from-layers-per-vstage"
    family = Family.pipeline
    citation = Citation(f"{ARGUMENTS}:953-977", MegatronStage.arguments)
    unit = "layers"
    summary = "k given: PP·VPP·k == L + [emb] + [loss]"
    exact = True

    def _k(self, options: MegatronOptions) -> int | None:
        alone = vpp_flags_given(options) == ["--num-layers-per-virtual-pipeline-stage"]
        return options.num_layers_per_virtual_pipeline_stage if alone else None

    def in_force(self, f: Facts) -> bool:
        """Only a launch line whose VPP comes from --num-layers-per-virtual-pipeline-stage derives it this way."""
        return self._k(f.options) is not None

    def slack(self, f: Facts) -> float:
        k = self._k(f.options)
        if k is None:
            return 0.0
        return -float(abs(slots(f.options, f.model.num_layers) - f.mapping.pp * f.mapping.vpp * k))

    def message(self, f: Facts) -> str:
        k, n, pp = f.options.num_layers_per_virtual_pipeline_stage, slots(f.options, f.model.num_layers), f.mapping.pp
        if k is None:
            return "--num-layers-per-virtual-pipeline-stage is not given"
        if n % pp:
            return (f"number of layers of the model must be divisible pipeline model parallel size ({n} layer "
                    f"slots, PP {pp})")
        if (n // pp) % k:
            return (f"number of layers per pipeline stage must be divisible number of layers per virtual pipeline "
                    f"stage ({n // pp} per rank, {k} per virtual stage)")
        return f"{n} layer slots over PP {pp} with {k} layers per virtual stage give VPP {n // pp // k}, not {f.mapping.vpp}"

    def post(self, model, v, enforce) -> None:
        k = self._k(v.options)
        if k is not None:
            model.Add(k * v.product("pp", "vpp") == slots(v.options, v.consts["num_layers"])).OnlyEnforceIf(enforce)


class VppArgsMutuallyExclusive(SettingsRule):
    """Megatron takes the virtual stages from one flag: layers per virtual stage, virtual stages per rank or the
    layout string."""

    family = Family.pipeline
    id = "vpp-args-mutually-exclusive"
    citation = Citation(f"{ARGUMENTS}:927-939", MegatronStage.arguments)
    summary = "at most one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, " \
              "--pipeline-model-parallel-layout"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        given = vpp_flags_given(options)
        if len(given) <= 1:
            return []
        return [f"No more than one of the following arguments can be set at the same time: {', '.join(given)}"]


class VppLayersPerVStageExcludesUneven(SettingsRule):
    """When VPP comes from --num-layers-per-virtual-pipeline-stage (no layout string, no virtual stages per rank),
    uneven first/last stages are refused: they need --num-virtual-stages-per-pipeline-rank."""

    family = Family.pipeline
    id = "vpp-layers-per-vstage-excludes-uneven"
    citation = Citation(f"{ARGUMENTS}:953-956", MegatronStage.arguments)
    summary = "layers per virtual stage given -> no decoder first/last pipeline num layers"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if vpp_flags_given(options) != ["--num-layers-per-virtual-pipeline-stage"] or not uneven_set(options):
            return []
        return ["please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree when "
                f"enable uneven pipeline parallelism (--num-layers-per-virtual-pipeline-stage "
                f"{options.num_layers_per_virtual_pipeline_stage} is given)"]


class VppFromVirtualStagesPerRank(Constraint):
    """--num-virtual-stages-per-pipeline-rank v alone (no other virtual-stage flag, no hybrid pattern): Megatron
    takes VPP = v, so the mapping's VPP is v."""

    id = "vpp-from-virtual-stages-per-rank"
    family = Family.pipeline
    citation = Citation(f"{ARGUMENTS}:976-979", MegatronStage.arguments)
    unit = "virtual stages"
    summary = "v given alone: VPP == v"
    exact = True

    def _v(self, options: MegatronOptions) -> int | None:
        alone = vpp_flags_given(options) == ["--num-virtual-stages-per-pipeline-rank"]
        return options.num_virtual_stages_per_pipeline_rank if alone and options.hybrid_layer_pattern is None else None

    def in_force(self, f: Facts) -> bool:
        """Only a launch line whose VPP comes from --num-virtual-stages-per-pipeline-rank."""
        return self._v(f.options) is not None

    def slack(self, f: Facts) -> float:
        v = self._v(f.options)
        return 0.0 if v is None else -float(abs(f.mapping.vpp - v))

    def message(self, f: Facts) -> str:
        return (f"--num-virtual-stages-per-pipeline-rank {f.options.num_virtual_stages_per_pipeline_rank} sets VPP; "
                f"the mapping has VPP {f.mapping.vpp}")

    def post(self, model, v, enforce) -> None:
        n = self._v(v.options)
        if n is not None:
            model.Add(v.vpp == n).OnlyEnforceIf(enforce)


class VppRequiresPPGt1(Constraint):
    """Interleaving needs a pipeline (PP >= 2)."""

    id = "vpp-requires-pp-gt-1"
    family = Family.pipeline
    citation = Citation(f"{ARGUMENTS}:1000-1004; megatron/core/parallel_state.py:827-831", MegatronStage.arguments)
    unit = "pipeline stages"
    summary = "VPP > 1 -> PP > 1"

    def in_force(self, f: Facts) -> bool:
        """Only an interleaved schedule needs a pipeline."""
        return f.mapping.vpp > 1

    def slack(self, f: Facts) -> float:
        return float(f.mapping.pp - 2) if f.mapping.vpp > 1 else 0.0

    def message(self, f: Facts) -> str:
        return ("When interleaved schedule is used, pipeline-model-parallel size should be greater than 1 "
                f"(VPP {f.mapping.vpp}, PP {f.mapping.pp})")

    def post(self, model, v, enforce) -> None:
        model.Add(v.pp >= 2).OnlyEnforceIf([enforce, v.at_least("vpp", 2)])


class VppNoOverlapRequiresPPGt2(Constraint):
    """Interleaving without p2p overlap (--no-overlap-p2p-communication) needs PP >= 3."""

    id = "vpp-no-overlap-requires-pp-gt-2"
    family = Family.pipeline
    citation = Citation(f"{ARGUMENTS}:1005-1009", MegatronStage.arguments)
    unit = "pipeline stages"
    summary = "VPP > 1 and not overlap_p2p_comm -> PP > 2"

    def in_force(self, f: Facts) -> bool:
        """Only interleaving without p2p overlap needs PP >= 3."""
        return f.mapping.vpp > 1 and not f.options.overlap_p2p_comm

    def slack(self, f: Facts) -> float:
        if f.mapping.vpp == 1 or f.options.overlap_p2p_comm:
            return 0.0
        return float(f.mapping.pp - 3)

    def message(self, f: Facts) -> str:
        return ("When interleaved schedule is used and p2p communication overlap is disabled, "
                "pipeline-model-parallel size should be greater than 2 to avoid having multiple p2p sends and "
                f"recvs between same 2 ranks per communication batch (PP {f.mapping.pp})")

    def post(self, model, v, enforce) -> None:
        if not v.options.overlap_p2p_comm:
            model.Add(v.pp >= 3).OnlyEnforceIf([enforce, v.at_least("vpp", 2)])


class NonInterleavedDisablesP2POverlap(Constraint):
    """Without VPP Megatron switches p2p overlap (and aligned param gather) off and says so: a warning."""

    id = "non-interleaved-disables-p2p-overlap"
    family = Family.pipeline
    citation = Citation(f"{ARGUMENTS}:1010-1018; megatron/core/pipeline_parallel/schedules.py:2181-2184",
                        MegatronStage.arguments)
    severity = Severity.warning
    unit = "settings"
    summary = "VPP == 1 and PP > 1 -> overlap_p2p_comm := False (warning)"
    exact = True

    def slack(self, f: Facts) -> float:
        m = f.mapping
        return -1.0 if f.options.overlap_p2p_comm and m.vpp == 1 and m.pp > 1 else 0.0

    def message(self, f: Facts) -> str:
        return ("WARNING: Setting args.overlap_p2p_comm and args.align_param_gather to False since "
                "non-interleaved schedule does not support overlapping p2p communication and aligned param AG")

    def post(self, model, v, enforce) -> None:
        """A warning restricts nothing: Megatron accepts the mapping."""


def middle(options: MegatronOptions, num_layers: int) -> tuple[int, int]:
    """(Lm, stages set): layers left for the middle stages and how many end stages have a fixed count."""
    first, last = options.decoder_first_pipeline_num_layers, options.decoder_last_pipeline_num_layers
    return num_layers - (first or 0) - (last or 0), int(first is not None) + int(last is not None)


class UnevenRule(Constraint):
    """Base of the first/last-stage rules: they judge the flags whenever one is set."""

    family = Family.pipeline
    unit = "layers"
    exact = True


class UnevenFirstDivisibleByVpp(UnevenRule):
    """With VPP the first stage's layers split over its virtual stages."""

    id = "uneven-first-divisible-by-vpp"
    citation = Citation(f"{CONFIG}:2306-2317", MegatronStage.config)
    summary = "decoder_first_pipeline_num_layers % VPP == 0"
    flag = "decoder_first_pipeline_num_layers"
    label = "first"

    def in_force(self, f: Facts) -> bool:
        """Only a given first/last-stage layer count is split over VPP."""
        return getattr(f.options, self.flag) is not None

    def slack(self, f: Facts) -> float:
        n = getattr(f.options, self.flag)
        return 0.0 if n is None else remainder_slack(n, f.mapping.vpp)

    def message(self, f: Facts) -> str:
        n = getattr(f.options, self.flag)
        return (f"number of layers at {self.label} stage: {n}must be divisible by virtual pipelineparallel degree "
                f"{f.mapping.vpp}")

    def post(self, model, v, enforce) -> None:
        n = getattr(v.options, self.flag)
        if n is not None:
            v.divides(v.vpp, n, f"{self.label}_vpp", enforce)


class UnevenLastDivisibleByVpp(UnevenFirstDivisibleByVpp):
    """With VPP the last stage's layers split over its virtual stages."""

    id = "uneven-last-divisible-by-vpp"
    citation = Citation(f"{CONFIG}:2325-2336", MegatronStage.config)
    summary = "decoder_last_pipeline_num_layers % VPP == 0"
    flag = "decoder_last_pipeline_num_layers"
    label = "last"


class UnevenMiddleConsistency(UnevenRule):
    """Layers left for the middle stages exactly when middle stages exist: (Lm > 0) == (PP − set > 0)."""

    id = "uneven-middle-consistency"
    citation = Citation(f"{CONFIG}:2294-2345", MegatronStage.config)
    unit = "pipeline stages"
    summary = "(L − first − last > 0) == (PP − #set > 0)"

    def in_force(self, f: Facts) -> bool:
        """Only first/last-stage counts leave middle stages to check."""
        return uneven_set(f.options)

    def slack(self, f: Facts) -> float:
        if not uneven_set(f.options):
            return 0.0
        lm, fixed = middle(f.options, f.model.num_layers)
        pm = f.mapping.pp - fixed
        if lm > 0:
            return float(min(pm - 1, 0))
        return float(-pm) if pm > 0 else 0.0

    def message(self, f: Facts) -> str:
        lm, fixed = middle(f.options, f.model.num_layers)
        return f"Mismatch: {lm} middle layers remaining but {f.mapping.pp - fixed} middle PP stages available."

    def post(self, model, v, enforce) -> None:
        if not uneven_set(v.options):
            return
        lm, fixed = middle(v.options, v.consts["num_layers"])
        if lm > 0:
            model.Add(v.pp >= fixed + 1).OnlyEnforceIf(enforce)
        else:
            model.Add(v.pp <= fixed).OnlyEnforceIf(enforce)


class UnevenMiddleDivisible(UnevenRule):
    """The middle stages share the remaining layers evenly: Lm % Pm == 0 (Pm = PP − #set > 0)."""

    id = "uneven-middle-divisible"
    citation = Citation(f"{CONFIG}:2347-2353; {BLOCK}:130-134", MegatronStage.config)
    summary = "PP − #set > 0 -> (L − first − last) % (PP − #set) == 0"
    per_vpp = False

    def _divisor(self, f: Facts) -> int:
        return (f.mapping.pp - middle(f.options, f.model.num_layers)[1]) * (f.mapping.vpp if self.per_vpp else 1)

    def _idle(self, f: Facts) -> bool:
        pm = f.mapping.pp - middle(f.options, f.model.num_layers)[1]
        return not uneven_set(f.options) or pm <= 0 or (self.per_vpp and f.mapping.vpp == 1)

    def in_force(self, f: Facts) -> bool:
        """Only middle stages left by first/last-stage counts split the remaining layers."""
        return not self._idle(f)

    def slack(self, f: Facts) -> float:
        if self._idle(f):
            return 0.0
        return remainder_slack(abs(middle(f.options, f.model.num_layers)[0]), self._divisor(f))

    def message(self, f: Facts) -> str:
        lm, fixed = middle(f.options, f.model.num_layers)
        return (f"number of layers at middle stage: {lm} must be divisible bythe middle pipeline model parallel size "
                f"{f.mapping.pp - fixed}")

    def post(self, model, v, enforce) -> None:
        if not uneven_set(v.options):
            return
        lm, fixed = middle(v.options, v.consts["num_layers"])
        if lm == 0:
            return
        has_middle = v.at_least("pp", fixed + 1)
        pm = model.NewIntVar(0, v.upper("pp"), f"{self.id}_pm")
        model.Add(pm == v.pp - fixed).OnlyEnforceIf(has_middle)
        model.Add(pm == 0).OnlyEnforceIf(has_middle.Not())
        conds = [enforce, has_middle]
        divisor = pm
        if self.per_vpp:
            conds.append(v.at_least("vpp", 2))
            divisor = v.times(pm, v.vpp, f"{self.id}_pm_vpp")
        v.divides(divisor, abs(lm), self.id, v.all_of(conds, f"{self.id}_on"))


class UnevenMiddleDivisibleByVpp(UnevenMiddleDivisible):
    """With VPP each middle rank's layers split over its virtual stages: Lm % (Pm·VPP) == 0."""

    id = "uneven-middle-divisible-by-vpp"
    citation = Citation(f"{CONFIG}:2355-2368", MegatronStage.config)
    summary = "PP − #set > 0 and VPP > 1 -> ((L − first − last)/(PP − #set)) % VPP == 0"
    per_vpp = True

    def message(self, f: Facts) -> str:
        lm, fixed = middle(f.options, f.model.num_layers)
        pm = f.mapping.pp - fixed
        per_rank = lm // pm if pm > 0 and lm % pm == 0 else round(lm / max(pm, 1), 3)
        return (f"number of layers on each middle pipeline rank:{per_rank} must be divisible by virtualpipeline "
                f"parallel degree {f.mapping.vpp}")


class UnevenExcludesAccountFor(SettingsRule):
    """First/last-stage counts and the account-for flags are two ways to say the same thing: pick one."""

    family = Family.pipeline
    id = "uneven-excludes-account-for"
    citation = Citation(f"{CONFIG}:2229-2239; {BLOCK}:108-112", MegatronStage.config)
    summary = "not (first/last set and account_for_embedding/loss)"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if uneven_set(options) and account_for(options):
            return ["num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage cannot beset at the "
                    "same time with account_for_embedding_in_pipeline_splitand account_for_loss_in_pipeline_split"]
        return []


def account_for_applies(options: MegatronOptions) -> bool:
    """The account-for split is in use: a flag set, no first/last counts, no layout string."""
    return account_for(options) and not uneven_set(options) and options.pipeline_model_parallel_layout is None


class AccountForDivisible(Constraint):
    """The L' slots (layers plus embedding/loss) split evenly over PP·VPP virtual stages."""

    id = "account-for-divisible"
    family = Family.pipeline
    citation = Citation(f"{CONFIG}:2370-2415", MegatronStage.config)
    unit = "layers"
    summary = "account-for: L' % (PP·VPP) == 0"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only the account-for split divides the slots over PP·VPP."""
        return account_for_applies(f.options)

    def slack(self, f: Facts) -> float:
        if not account_for_applies(f.options):
            return 0.0
        return remainder_slack(slots(f.options, f.model.num_layers), f.mapping.pp * f.mapping.vpp)

    def message(self, f: Facts) -> str:
        n, m = slots(f.options, f.model.num_layers), f.mapping
        if n % m.pp:
            return (f"num_layers: {n} after enableaccount_for_embedding_in_pipeline_split or "
                    f"account_for_loss_in_pipeline_split must be divisibleby pipeline_model_parallel_size {m.pp}")
        return (f"number of layers on each pipeline rank: {n // m.pp}(after enable ...) must be divisible "
                f"byvirtual_pipeline_model_parallel_size{m.vpp}")

    def post(self, model, v, enforce) -> None:
        if account_for_applies(v.options):
            v.divides(v.product("pp", "vpp"), slots(v.options, v.consts["num_layers"]), "account_slots", enforce)


class AccountForEnoughLayers(Constraint):
    """Each virtual stage gets L'/(PP·VPP) slots; the first and last must have room for the embedding and
    the loss: L' >= PP·VPP."""

    id = "account-for-enough-layers"
    family = Family.pipeline
    citation = Citation(f"{BLOCK}:188-201", MegatronStage.model_build)
    unit = "layer slots"
    summary = "account-for: L' >= PP·VPP"

    def in_force(self, f: Facts) -> bool:
        """Only the account-for split needs a slot per virtual stage."""
        return account_for_applies(f.options)

    def slack(self, f: Facts) -> float:
        if not account_for_applies(f.options):
            return 0.0
        return float(slots(f.options, f.model.num_layers) - f.mapping.pp * f.mapping.vpp)

    def message(self, f: Facts) -> str:
        stage = "first" if f.options.account_for_embedding_in_pipeline_split else "last"
        return (f"Not enough layers in the {stage} virtual pipeline stage ({slots(f.options, f.model.num_layers)} "
                f"slots over {f.mapping.pp * f.mapping.vpp} virtual stages)")

    def post(self, model, v, enforce) -> None:
        if account_for_applies(v.options):
            model.Add(v.product("pp", "vpp") <= slots(v.options, v.consts["num_layers"])).OnlyEnforceIf(enforce)


def parsed_layout(options: MegatronOptions, num_layers: int) -> ParsedLayout | None:
    """The layout string of the options, parsed; None when there is none or it does not parse."""
    text = options.pipeline_model_parallel_layout
    if text is None:
        return None
    try:
        return parse_pipeline_layout(text, num_layers)
    except InputError:
        return None


class LayoutExcludesOtherPPArgs(SettingsRule):
    """A layout string says everything: no first/last counts, no account-for flags beside it."""

    family = Family.pipeline
    id = "layout-excludes-other-pp-args"
    citation = Citation(f"{CONFIG}:2241-2259", MegatronStage.config)
    summary = "layout string -> no first/last counts, no account-for flags"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.pipeline_model_parallel_layout is None:
            return []
        others = [name for name, on in (
            ("decoder_first_pipeline_num_layers", options.decoder_first_pipeline_num_layers is not None),
            ("decoder_last_pipeline_num_layers", options.decoder_last_pipeline_num_layers is not None),
            ("account_for_embedding_in_pipeline_split", options.account_for_embedding_in_pipeline_split),
            ("account_for_loss_in_pipeline_split", options.account_for_loss_in_pipeline_split)) if on]
        return [f"pipeline_model_parallel_layout cannot be set with other pipeline layout arguments: {name}"
                for name in others]


class LayoutValidChars(SettingsRule):
    """The layout string reads as Megatron's language (E, L, t, m, '|', ',', (..)*n, x*n)."""

    family = Family.pipeline
    id = "layout-valid-chars"
    citation = Citation(f"{LAYOUT}:282-321; {ARGUMENTS}:941-952", MegatronStage.arguments)
    summary = "layout string uses only E/L/t/m, '|', ',' and repeats"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        text = options.pipeline_model_parallel_layout
        if text is None:
            return []
        try:
            parse_pipeline_layout(text, consts["num_layers"])
        except InputError as exc:
            return [exc.detail]
        return []


class LayoutStagesDivisibleByPP(Constraint):
    """The layout string's stages are PP·VPP: their count is a multiple of PP."""

    id = "layout-stages-divisible-by-pp"
    family = Family.pipeline
    citation = Citation(f"{ARGUMENTS}:941-952; {LAYOUT}:40-46", MegatronStage.arguments)
    unit = "stages"
    summary = "layout stages % PP == 0"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only a parseable layout string is checked."""
        return parsed_layout(f.options, f.model.num_layers) is not None

    def slack(self, f: Facts) -> float:
        parsed = parsed_layout(f.options, f.model.num_layers)
        return 0.0 if parsed is None else remainder_slack(parsed.num_stages, f.mapping.pp)

    def message(self, f: Facts) -> str:
        parsed = parsed_layout(f.options, f.model.num_layers)
        stages = parsed.num_stages if parsed else 0
        return (f"The length of pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size "
                f"(num_stages={stages}, pipeline_model_parallel_size={f.mapping.pp})")

    def post(self, model, v, enforce) -> None:
        parsed = parsed_layout(v.options, v.consts["num_layers"])
        if parsed is not None:
            v.divides(v.pp, parsed.num_stages, "layout_stages_pp", enforce)


class LayoutVppConsistent(Constraint):
    """The mapping's VPP is the layout string's: stages == PP·VPP."""

    id = "layout-vpp-consistent"
    family = Family.pipeline
    citation = Citation(f"{CONFIG}:2275-2287", MegatronStage.config)
    unit = "stages"
    summary = "layout stages == PP·VPP"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only a parseable layout string is checked."""
        return parsed_layout(f.options, f.model.num_layers) is not None

    def slack(self, f: Facts) -> float:
        parsed = parsed_layout(f.options, f.model.num_layers)
        return 0.0 if parsed is None else -float(abs(parsed.num_stages - f.mapping.pp * f.mapping.vpp))

    def message(self, f: Facts) -> str:
        parsed = parsed_layout(f.options, f.model.num_layers)
        stages, pp = (parsed.num_stages if parsed else 0), f.mapping.pp
        detected = stages // pp if stages % pp == 0 else round(stages / pp, 3)
        return (f"virtual_pipeline_model_parallel_size conflicts with pipeline_model_parallel_layout, "
                f"(vpp={f.mapping.vpp}, detected_vpp_size={detected})")

    def post(self, model, v, enforce) -> None:
        parsed = parsed_layout(v.options, v.consts["num_layers"])
        if parsed is not None:
            model.Add(v.product("pp", "vpp") == parsed.num_stages).OnlyEnforceIf(enforce)


class LayoutEmbeddingLossOnce(SettingsRule):
    """The layout starts with the embedding and ends with the loss, each exactly once."""

    family = Family.pipeline
    id = "layout-embedding-loss-once"
    citation = Citation(f"{LAYOUT}:94-106 via {CONFIG}:2290", MegatronStage.config)
    summary = "layout: first symbol E, last L, one of each"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        parsed = parsed_layout(options, consts["num_layers"])
        if parsed is None:
            return []
        flat, out = parsed.flat, []
        if not flat.startswith("E"):
            out.append(f"The first layer must be embedding, but got {flat[:1] or 'nothing'}")
        if not flat.endswith("L"):
            out.append(f"The last layer must be loss, but got {flat[-1:] or 'nothing'}")
        if flat.count("E") != 1:
            out.append(f"Embedding must be specified exactly once (found {flat.count('E')})")
        if flat.count("L") != 1:
            out.append(f"Loss must be specified exactly once (found {flat.count('L')})")
        return out


class LayoutDecoderCount(Constraint):
    """The layout string places every decoder layer once: count('t') == num_layers."""

    id = "layout-decoder-count"
    family = Family.pipeline
    citation = Citation(f"{LAYOUT}:107-110 via {CONFIG}:2290", MegatronStage.config)
    unit = "layers"
    summary = "layout: count(t) == num_layers"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only a parseable layout string is checked."""
        return parsed_layout(f.options, f.model.num_layers) is not None

    def slack(self, f: Facts) -> float:
        parsed = parsed_layout(f.options, f.model.num_layers)
        return 0.0 if parsed is None else -float(abs(parsed.missing_decoder_layers))

    def message(self, f: Facts) -> str:
        parsed = parsed_layout(f.options, f.model.num_layers)
        placed = parsed.decoder_count if parsed else 0
        return f"Number of decoder layers {placed}must match num_layers {f.model.num_layers}"

    def post(self, model, v, enforce) -> None:
        parsed = parsed_layout(v.options, v.consts["num_layers"])
        if parsed is not None and parsed.missing_decoder_layers:
            model.AddBoolOr([enforce.Not()])


def mtp_text_unmet(parsed: ParsedLayout, mtp_layers: int) -> list[str]:
    """The MTP placement conditions that do not depend on PP."""
    flat, out = parsed.flat, []
    if flat.count("m") != mtp_layers:
        out.append(f"Number of mtp layers in layout ({flat.count('m')}) must match mtp_num_layers ({mtp_layers})")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        out.append("decoder layers must be placed before MTP layers")
    if any(parsed.stages[s].count("m") != mtp_layers for s in parsed.mtp_stages):
        out.append("All of the MTP layers must be in the same one virtual pipeline stage")
    return out


class LayoutMtpPlacement(Constraint):
    """MTP layers come after every decoder layer, all in one stage, which is the last virtual stage of its
    pipeline rank: every stage k holding 'm' has k >= stages − PP."""

    id = "layout-mtp-placement"
    family = Family.pipeline
    citation = Citation(f"{LAYOUT}:111-145 via {CONFIG}:2290", MegatronStage.config)
    unit = "settings"
    summary = "layout: count(m) == MTP layers, after the decoders, in one last-virtual stage"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only a parseable layout string is checked."""
        return parsed_layout(f.options, f.model.num_layers) is not None

    def _unmet(self, f: Facts) -> list[str]:
        parsed = parsed_layout(f.options, f.model.num_layers)
        if parsed is None:
            return []
        out = mtp_text_unmet(parsed, f.model.mtp_layers)
        if parsed.mtp_stages and min(parsed.mtp_stages) < parsed.num_stages - f.mapping.pp:
            out.append("Currently we restrict that the MTP should be always in the last virtual pipeline stage of "
                       f"that rank (stage {min(parsed.mtp_stages)} of {parsed.num_stages} on PP {f.mapping.pp})")
        return out

    def slack(self, f: Facts) -> float:
        return -float(len(self._unmet(f)))

    def message(self, f: Facts) -> str:
        return "; ".join(self._unmet(f)) or f"{self.summary}: holds"

    def post(self, model, v, enforce) -> None:
        parsed = parsed_layout(v.options, v.consts["num_layers"])
        if parsed is None:
            return
        if mtp_text_unmet(parsed, v.consts["mtp_layers"]):
            model.AddBoolOr([enforce.Not()])
        elif parsed.mtp_stages:
            model.Add(v.pp >= parsed.num_stages - min(parsed.mtp_stages)).OnlyEnforceIf(enforce)


def hybrid_parts(options: MegatronOptions) -> list[str]:
    """The main pattern and the MTP sub-patterns of --hybrid-layer-pattern ('/'-separated); [] if unset."""
    pattern = options.hybrid_layer_pattern
    return [] if pattern is None else pattern.split("/")


class HybridNoAttentionPlusMLA(SettingsRule):
    """A hybrid pattern holds standard attention ('*') or MLA/DSA ('+', 'D'), not both."""

    id = "hybrid-no-attention-plus-mla"
    family = Family.feature
    citation = Citation(f"{HYBRID}:296-298,324-326", MegatronStage.model_build)
    summary = "hybrid pattern: not both '*' and 'D'/'+'"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        mixed = [p for p in hybrid_parts(options) if "*" in p and ("D" in p or "+" in p)]
        return [f"Not supported to have both Attention and MLA/DSA in one model (pattern part {p!r})" for p in mixed]


class HybridMtpPatternsIdentical(SettingsRule):
    """Every MTP sub-pattern of a hybrid pattern is the same."""

    id = "hybrid-mtp-patterns-identical"
    family = Family.feature
    citation = Citation(f"{HYBRID}:258-266", MegatronStage.model_build)
    summary = "hybrid pattern: all '/'-separated MTP patterns identical"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        mtp = hybrid_parts(options)[1:]
        return [f"All MTP patterns must be identical. Pattern 1 is '{mtp[0]}', but pattern {i} is '{p}'. Full "
                f"pattern: '{options.hybrid_layer_pattern}'" for i, p in enumerate(mtp[1:], start=2) if p != mtp[0]]
