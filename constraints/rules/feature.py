"""Feature-compatibility rules of Megatron-Core: sequence parallelism, the rank order and MoE folding,
the distributed-optimizer instances, activation recomputation and offloading, deterministic mode, and
the deprecated flags parasol carries.

Sequence parallelism: `training.sequence_parallel` (default True) means "SP whenever TP > 1", so the
flag Megatron sees is on only for TP > 1. A problem that sets `sequence_parallel: true` itself asks for
--sequence-parallel even at TP 1: Megatron-LM's CLI then switches it off with a warning
(sp-auto-disabled-when-tp1), a Megatron Core user (options.megatron_core_api) gets an error (sp-requires-tp).

Recompute: the mapping's `recompute` is --recompute-granularity (none = unset); --recompute-method and
--recompute-num-layers are options; the selective modules are `training.recompute_modules`. Parasol's
`full` recomputes every layer (the memory ledger's assumption), which it launches as --recompute-method
uniform --recompute-num-layers 1 when the options leave both unset. So the two full-recompute rules judge
flags that are given: an explicit `recompute_method: null` (or a launch line that names full but no
method, which --megatron-args passes as an explicit None) is what Megatron rejects.

Sources: reference/megatron-rules.yaml (Megatron-LM main@d98e8a64), megatron-groups.md §1.2,
§2.5 and §2.7.
"""

from __future__ import annotations

from fractions import Fraction

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
from parasol.constraints.core.consts import model_consts
from parasol.problems.mapping import RankOrder
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.options import MegatronOptions

PARALLEL_STATE = "Megatron-LM megatron/core/parallel_state.py"
OFFLOADABLE = ("core_attn", "attn_proj", "expert_fc1", "fused_group_mlp", "moe_act", "attn_norm", "mlp_norm",
               "qkv_linear", "gdp_qkv")
INSIDE_MOE = ("moe_act", "expert_fc1", "fused_group_mlp")


class SettingsRule(Constraint):
    """Base of rules over flags and the recompute choice: slack is minus the number of unmet conditions.

    `unmet(options, consts, recompute)` names the failing conditions for one recompute granularity; the
    CP-SAT side forbids each recompute choice (or, without one, the rule) whose list is not empty."""

    family = Family.feature
    unit = "settings"
    exact = True
    reads_recompute = False

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        """The failing conditions (override); `consts` is model_consts(problem)."""
        return []

    def _unmet(self, f: Facts) -> list[str]:
        return self.unmet(f.options, model_consts(f.problem), f.mapping.recompute.value)

    def slack(self, f: Facts) -> float:
        return -float(len(self._unmet(f)))

    def message(self, f: Facts) -> str:
        return "; ".join(self._unmet(f)) or f"{self.summary}: holds"

    def post(self, model, v, enforce) -> None:
        if not self.reads_recompute:
            if self.unmet(v.options, v.consts, "none"):
                model.AddBoolOr([enforce.Not()])
            return
        for choice, literal in v.recompute.items():
            if self.unmet(v.options, v.consts, choice):
                model.AddBoolOr([enforce.Not(), literal.Not()])


class WarningRule(SettingsRule):
    """A flag Megatron rewrites and reports: triggered when `unmet` is not empty, never infeasible."""

    severity = Severity.warning

    def post(self, model, v, enforce) -> None:
        """A warning restricts nothing: Megatron accepts the mapping."""


# --- sequence parallelism --------------------------------------------------------------------------

class SPRequiresTP(Constraint):
    """Megatron Core API: a config with sequence parallelism needs TP > 1."""

    id = "sp-requires-tp"
    family = Family.feature
    citation = Citation("Megatron-LM megatron/core/model_parallel_config.py:502-504", MegatronStage.config)
    unit = "TP"
    summary = "Megatron Core API: sequence_parallel -> TP > 1"

    def _on(self, options: MegatronOptions, consts: dict[str, int]) -> bool:
        return options.megatron_core_api and bool(consts["sequence_parallel_requested"])

    def in_force(self, f: Facts) -> bool:
        """Only a Megatron Core config that asks for SP needs TP >= 2."""
        return self._on(f.options, model_consts(f.problem))

    def slack(self, f: Facts) -> float:
        return float(f.mapping.tp - 2) if self._on(f.options, model_consts(f.problem)) else 0.0

    def message(self, f: Facts) -> str:
        return f"Cannot use sequence parallelism without tensor parallelism (TP = {f.mapping.tp})"

    def post(self, model, v, enforce) -> None:
        if self._on(v.options, v.consts):
            model.Add(v.tp >= 2).OnlyEnforceIf(enforce)


class SPAutoDisabledWhenTP1(Constraint):
    """Megatron-LM CLI: --sequence-parallel with TP 1 is switched off with a warning (not rejected)."""

    id = "sp-auto-disabled-when-tp1"
    family = Family.feature
    citation = Citation(f"{ARGUMENTS}:1430-1439", MegatronStage.arguments)
    severity = Severity.warning
    unit = "settings"
    summary = "CLI: TP == 1 -> sequence_parallel := False (warning)"
    exact = True

    def slack(self, f: Facts) -> float:
        asked = model_consts(f.problem)["sequence_parallel_requested"]
        return -1.0 if asked and not f.options.megatron_core_api and f.mapping.tp == 1 else 0.0

    def message(self, f: Facts) -> str:
        return "Disabling sequence parallelism because tensor model parallelism is disabled"

    def post(self, model, v, enforce) -> None:
        """A warning restricts nothing: Megatron accepts the mapping."""


class TPCommOverlapRequiresSP(Constraint):
    """--tp-comm-overlap overlaps the SP all-gather/reduce-scatter with GEMMs: it needs SP, hence TP > 1."""

    id = "tp-comm-overlap-requires-sp"
    family = Family.feature
    citation = Citation(f"{ARGUMENTS}:1441-1442", MegatronStage.arguments)
    unit = "TP"
    summary = "tp_comm_overlap -> sequence_parallel (and TP > 1)"

    def in_force(self, f: Facts) -> bool:
        """Only --tp-comm-overlap needs SP and TP >= 2."""
        return bool(f.options.tp_comm_overlap)

    def slack(self, f: Facts) -> float:
        if not f.options.tp_comm_overlap:
            return 0.0
        return float(f.mapping.tp - 2) if f.training.sequence_parallel else -1.0

    def message(self, f: Facts) -> str:
        return ("Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled "
                f"(TP = {f.mapping.tp}, sequence_parallel {'on' if f.training.sequence_parallel else 'off'})")

    def post(self, model, v, enforce) -> None:
        if not v.options.tp_comm_overlap:
            return
        if not v.consts["sequence_parallel"]:
            model.AddBoolOr([enforce.Not()])
            return
        model.Add(v.tp >= 2).OnlyEnforceIf(enforce)


class SPActivationSeqDivisibleByTP(Constraint):
    """With SP each TP rank holds rows/TP of the activations' first dimension; rows = S/CP (packed THD
    input: MBS·S/CP), which must divide by TP at the first forward."""

    id = "sp-activation-seq-divisible-by-tp"
    family = Family.divisibility
    citation = Citation("Megatron-LM megatron/core/tensor_parallel/mappings.py:71-74,175-178", MegatronStage.runtime)
    unit = "rows"
    summary = "SP and TP > 1 -> (S/CP, or MBS·S/CP packed) % TP == 0"
    exact = True

    def _rows_numerator(self, f: Facts) -> int:
        m = f.mapping
        return m.seq_len * (m.mbs if f.training.packed_sequences else 1)

    def in_force(self, f: Facts) -> bool:
        """Only sequence-parallel TP ranks split the rows."""
        return f.training.sequence_parallel and f.mapping.tp > 1

    def slack(self, f: Facts) -> float:
        m = f.mapping
        if not f.training.sequence_parallel or m.tp == 1:
            return 0.0
        return remainder_slack(Fraction(self._rows_numerator(f), m.cp), m.tp)

    def message(self, f: Facts) -> str:
        m = f.mapping
        rows = self._rows_numerator(f) / m.cp
        return (f"First dimension of the tensor should be divisible by tensor parallel size ({rows:g} rows per "
                f"CP rank, TP = {m.tp})")

    def post(self, model, v, enforce) -> None:
        if not v.consts["sequence_parallel"]:
            return
        on = v.all_of([enforce, v.at_least("tp", 2)], "sp_rows_on")
        if not v.consts["packed_sequences"]:
            v.divides(v.product("cp", "tp"), v.seq_len, "sp_rows", on)
            return
        rows = model.NewIntVar(v.seq_len, v.seq_len * v.upper("mbs"), "sp_rows_numerator")
        model.Add(rows == v.seq_len * v.mbs)
        v.divides(v.product("cp", "tp"), rows, "sp_rows", on)


# --- rank order (MoE folding) and distributed-optimizer instances ----------------------------------

class NonPPLastOrderRequiresEqualDP(Constraint):
    """With --use-tp-pp-dp-mapping (the mapping's rank order tp-cp-ep-pp-dp) and PP > 1 attention and
    expert DP must be equal, i.e. TP·CP == ETP·EP (both grids factor the same N/PP ranks)."""

    id = "non-pp-last-order-requires-equal-dp"
    family = Family.divisibility
    citation = Citation(f"{PARALLEL_STATE}:898-902; megatron/training/config/common_config.py:105-107",
                        MegatronStage.process_groups)
    unit = "ranks"
    summary = "order tp-cp-ep-pp-dp and PP > 1 -> D_a == D_e (TP·CP == ETP·EP)"
    exact = True
    text = "When not using pp-last rank ordering, the data parallel size of the attention and moe layers must be the same"

    def in_force(self, f: Facts) -> bool:
        """Only the tp-cp-ep-pp-dp order with a pipeline ties D_a to D_e."""
        return (f.mapping.rank_order == RankOrder.dp_last or f.options.use_tp_pp_dp_mapping) and f.mapping.pp > 1

    def slack(self, f: Facts) -> float:
        m = f.mapping
        if not (m.rank_order == RankOrder.dp_last or f.options.use_tp_pp_dp_mapping) or m.pp == 1:
            return 0.0
        return -float(abs(m.tp * m.cp - m.expert_tp * m.ep))

    def message(self, f: Facts) -> str:
        m = f.mapping
        return (f"{self.text} (TP·CP = {m.tp * m.cp}, ETP·EP = {m.expert_tp * m.ep}: D_a = {float(f.derived.dp_attn):g}, "
                f"D_e = {float(f.derived.dp_expert):g})")

    def post(self, model, v, enforce) -> None:
        ordered = [] if v.options.use_tp_pp_dp_mapping else [v.flag("rank_order_dp_last")]
        model.Add(v.product("tp", "cp") == v.product("etp", "ep")).OnlyEnforceIf(
            [enforce, v.at_least("pp", 2), *ordered])


class PPGroupsIdentical(NonPPLastOrderRequiresEqualDP):
    """The attention and expert grids must give the same pipeline groups; with the pp-last order this is
    automatic, with tp-cp-ep-pp-dp and PP > 1 the PP stride TP·CP must equal ETP·EP."""

    id = "pp-groups-identical"
    citation = Citation(f"{PARALLEL_STATE}:904-907", MegatronStage.process_groups)
    summary = "order tp-cp-ep-pp-dp and PP > 1 -> PP stride TP·CP == ETP·EP"
    text = "Pipeline parallel groups are expected to be the same for Non-Expert and Expert part"


class DistOptInstancesDivideDpCp(Constraint):
    """The partial distributed optimizer splits the D_a·CP data-parallel ranks into equal instances."""

    id = "distopt-instances-divide-dp-cp"
    family = Family.divisibility
    citation = Citation(f"{PARALLEL_STATE}:922-926", MegatronStage.process_groups)
    unit = "GPUs"
    summary = "(D_a·CP) % num_distributed_optimizer_instances == 0, i.e. N % (TP·PP·instances) == 0"
    exact = True
    grid = ("tp", "pp")
    text = "Data parallel size should be divisible by partial DistOpt shard factor"

    def _grid(self, f: Facts) -> int:
        m = f.mapping
        sizes = {"tp": m.tp, "pp": m.pp, "etp": m.expert_tp, "ep": m.ep}
        out = 1
        for name in self.grid:
            out *= sizes[name]
        return out

    def in_force(self, f: Facts) -> bool:
        """Only a partial distributed optimizer (several instances) splits the ranks."""
        return f.options.num_distributed_optimizer_instances != 1

    def slack(self, f: Facts) -> float:
        inst = f.options.num_distributed_optimizer_instances
        return 0.0 if inst == 1 else remainder_slack(f.mapping.gpus, self._grid(f) * inst)

    def message(self, f: Facts) -> str:
        inst = f.options.num_distributed_optimizer_instances
        return (f"{self.text} (N = {f.mapping.gpus} over {'·'.join(self.grid).upper()} = {self._grid(f)} leaves "
                f"{f.mapping.gpus / self._grid(f):g} ranks for {inst} instances)")

    def post(self, model, v, enforce) -> None:
        inst = v.options.num_distributed_optimizer_instances
        if inst == 1:
            return
        if v.gpus % inst:
            model.AddBoolOr([enforce.Not()])
            return
        v.divides(v.product(*self.grid), v.gpus // inst, f"{self.id}_grid", enforce)


class DistOptInstancesDivideEdp(DistOptInstancesDivideDpCp):
    """The expert data-parallel ranks split into the same number of optimizer instances."""

    id = "distopt-instances-divide-edp"
    citation = Citation(f"{PARALLEL_STATE}:1447-1449", MegatronStage.process_groups)
    summary = "D_e % num_distributed_optimizer_instances == 0, i.e. N % (ETP·EP·PP·instances) == 0"
    grid = ("etp", "ep", "pp")
    text = "Expert data parallel size should be divisible by partial DistOpt shard factor"


# --- recompute and offloading ----------------------------------------------------------------------

def given_as_none(options: MegatronOptions, name: str) -> bool:
    """An option explicitly given as unset (None); left out, parasol fills it in (module docstring)."""
    return getattr(options, name) is None and name in options.model_fields_set


class RecomputeFullNeedsMethod(SettingsRule):
    """Full recompute needs --recompute-method (uniform or block); parasol fills uniform when it is left out."""

    id = "recompute-full-needs-method"
    citation = Citation(f"{CONFIG}:1908-1917", MegatronStage.config)
    summary = "recompute full -> recompute_method in {uniform, block}"
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if recompute == "full" and given_as_none(options, "recompute_method"):
            return ['Using recompute_granularity: full so recompute_method must be "block" or "uniform"']
        return []


class RecomputeFullNeedsNumLayers(SettingsRule):
    """Full recompute needs --recompute-num-layers (only 'set' is checked, not its range); parasol fills 1 when
    it is left out."""

    id = "recompute-full-needs-num-layers"
    citation = Citation(f"{CONFIG}:1919-1925", MegatronStage.config)
    summary = "recompute full -> recompute_num_layers set"
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if recompute == "full" and given_as_none(options, "recompute_num_layers"):
            return ["When using recompute_granularity: full recompute_num_layers must be between 1 and "
                    "num_layers_per_pipeline_rank (it is not set)"]
        return []


class RecomputeSelectiveNoNumLayers(SettingsRule):
    """Selective recompute takes no --recompute-num-layers."""

    id = "recompute-selective-no-num-layers"
    citation = Citation(f"{CONFIG}:1926-1932", MegatronStage.config)
    summary = "recompute selective -> recompute_num_layers unset"
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if recompute == "selective" and options.recompute_num_layers is not None:
            return ["When using recompute_granularity: selective recompute_num_layers must be None."]
        return []


class RecomputeSelectiveNoMethod(SettingsRule):
    """Selective recompute takes no --recompute-method (checked by the CLI)."""

    id = "recompute-selective-no-method"
    citation = Citation(f"{ARGUMENTS}:1425-1428", MegatronStage.arguments)
    summary = "recompute selective -> recompute_method unset"
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if recompute == "selective" and options.recompute_method is not None:
            return ["recompute method is not yet supported for selective recomputing granularity"]
        return []


class RecomputeModulePrereqs(SettingsRule):
    """Selective modules need their feature: moe_act grouped GEMM, mla_up_proj MLA, gdn_norm_out gated DeltaNet
    blocks (Megatron's experimental attention variant gdn), shared_experts no shared-expert overlap, and under FP8
    moe_act and layernorm a recipe other than delayed scaling (the Transformer Engine 2.6 clause beside it is not
    observable)."""

    id = "recompute-module-prereqs"
    citation = Citation(f"{CONFIG}:1964-2012", MegatronStage.config)
    summary = ("selective modules: moe_act -> grouped gemm, mla_up_proj -> MLA, gdn_norm_out -> gated DeltaNet, "
               "shared_experts -> no overlap, FP8 moe_act/layernorm -> not delayed scaling")
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if recompute != "selective":
            return []
        out = []
        if consts["recompute_moe_act"] and not options.moe_grouped_gemm:
            out.append("moe_act in recompute_modules is only supported with moe_grouped_gemm.")
        if consts["recompute_mla_up_proj"] and not consts["multi_latent_attention"]:
            out.append("mla_up_proj in recompute_modules is only supported with multi_latent_attention.")
        if consts["recompute_gdn_norm_out"] and not consts["gdn_value_heads"]:
            out.append("gdn_norm_out in recompute_modules is only supported with experimental_attention_variant='gdn' "
                       "or 'gdn2'.")
        if consts["recompute_shared_experts"] and options.moe_shared_expert_overlap:
            out.append("shared_experts recompute cannot work with --moe-shared-expert-overlap.")
        if (consts["fp8"] and (consts["recompute_moe_act"] or consts["recompute_layernorm"])
                and options.fp8_recipe == "delayed"):
            out.append("Delayed scaling does not support moe_act and layernorm recompute for fp8.")
        return out


MHC_OFFLOAD_CONFLICTS_ON_DEV = ("attn_norm", "mlp_norm")
"""The offloaded modules mHC recompute refuses on Megatron-LM dev@d48bd6be: its checkpoints wrap the norms, whose
offload chunks are not yet set up when the replay starts (transformer_config.py:2314-2335); main refuses any
fine-grained offloading with it."""


class MhcRecomputeModule(SettingsRule):
    """Recomputing 'mhc' needs mHC connections (hc_mult > 1) and excludes 'mlp'; main refuses it with any
    fine-grained offloading, the dev branch a DeepSeek-V4 model runs on only with the norms offloaded
    (dev@d48bd6be transformer_config.py:2294-2335)."""

    id = "mhc-recompute-module"
    citation = Citation(f"{CONFIG}:2027-2051; dev@d48bd6be transformer_config.py:2294-2335", MegatronStage.config)
    summary = "selective 'mhc' -> mHC model, no 'mlp' module, no activation offloading (on dev: of the norms)"
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if recompute != "selective" or not consts["recompute_mhc"]:
            return []
        out = []
        if consts["hc_mult"] <= 1:
            switch = "enable_hyper_connections" if consts["runs_on_dev"] else "enable_mhc_connections"
            out.append(f"'mhc' in recompute_modules requires {switch}=True.")
        if consts["recompute_mlp"]:
            out.append("'mhc' and 'mlp' in recompute_modules cannot be used together.")
        offloaded = options.offload_modules or ()
        if consts["runs_on_dev"]:
            conflicting = [m for m in MHC_OFFLOAD_CONFLICTS_ON_DEV if m in offloaded]
            if conflicting:
                out.append(f"'mhc' in recompute_modules is incompatible with offload_modules {conflicting}.")
        elif offloaded:
            out.append("'mhc' recompute cannot be combined with fine-grained activation offloading.")
        return out


class CpuOffloading(Constraint):
    """CPU activation offloading works only for fewer layers than the model has, without a pipeline and
    without recomputation."""

    id = "cpu-offloading"
    family = Family.feature
    citation = Citation(f"{CONFIG}:1884-1899,2800-2801", MegatronStage.config)
    unit = "settings"
    summary = "cpu_offloading -> cpu_offloading_num_layers < layers, PP == 1 and no recompute"
    exact = True

    def _unmet(self, f: Facts) -> list[str]:
        if not f.options.cpu_offloading:
            return []
        out = []
        layers = f.problem.model.num_layers
        if f.options.cpu_offloading_num_layers >= layers:
            out.append(f"CPU offloading can be done only for layers less than {layers}")
        if f.mapping.pp > 1:
            out.append(f"Currently there is no support for Pipeline parallelism with CPU offloading (PP = {f.mapping.pp})")
        if f.mapping.recompute.value != "none":
            out.append("CPU offloading does not work when activation recomputation is enabled")
        return out

    def in_force(self, f: Facts) -> bool:
        """Only CPU offloading restricts PP and recompute."""
        return f.options.cpu_offloading

    def slack(self, f: Facts) -> float:
        return -float(len(self._unmet(f)))

    def message(self, f: Facts) -> str:
        return "; ".join(self._unmet(f)) or f"{self.summary}: holds"

    def post(self, model, v, enforce) -> None:
        if not v.options.cpu_offloading:
            return
        if v.options.cpu_offloading_num_layers >= v.consts["num_layers"]:
            model.AddBoolOr([enforce.Not()])
        model.Add(v.pp == 1).OnlyEnforceIf(enforce)
        for choice, literal in v.recompute.items():
            if choice != "none":
                model.AddBoolOr([enforce.Not(), literal.Not()])


class FineGrainedOffload(SettingsRule):
    """Fine-grained activation offloading (options.offload_modules): not with CPU offloading, known modules,
    attn_proj only with core_attn, nothing inside MoE while the whole MoE layer is recomputed."""

    id = "fine-grained-offload"
    citation = Citation(f"{CONFIG}:2127-2194", MegatronStage.config)
    summary = "offload_modules: no cpu_offloading, known modules, attn_proj needs core_attn, none inside a recomputed MoE"
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        mods = options.offload_modules
        if not mods:
            return []
        out = []
        if options.cpu_offloading:
            out.append("fine-grained activation offloading cannot be combined with cpu_offloading")
        unknown = [m for m in mods if m not in OFFLOADABLE]
        if unknown:
            out.append(f"Invalid offload_modules {unknown}; allowed: {list(OFFLOADABLE)}")
        if "attn_proj" in mods and "core_attn" not in mods:
            out.append("attn_proj cannot be set to offload_modules alone without core_attn")
        inside = sorted(set(INSIDE_MOE) & set(mods))
        if recompute == "selective" and consts["recompute_moe"] and inside:
            out.append(f"Cannot offload {inside} while recomputing the entire MoE layer.")
        return out


class OptimizerCpuOffloadPrecisionAware(SettingsRule):
    """--optimizer-cpu-offload runs through the precision-aware optimizer's code path, so it needs
    --use-precision-aware-optimizer (the hybrid device optimizer reuses it)."""

    id = "optimizer-cpu-offload-precision-aware"
    citation = Citation(f"{ARGUMENTS}:1884-1887", MegatronStage.arguments)
    summary = "optimizer_cpu_offload -> use_precision_aware_optimizer"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.optimizer_cpu_offload and not options.use_precision_aware_optimizer:
            return ["The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`, "
                    "as the hybrid device optimizer reuses the code path of this flag."]
        return []


class OverlapParamGather(SettingsRule):
    """--overlap-param-gather overlaps the distributed optimizer's (or Megatron-FSDP's) parameter all-gather with
    the next forward, started by the gradient reduce's overlap: it needs one of those and --overlap-grad-reduce
    (Muon's layer-wise optimizer counts as the distributed one here: Megatron switches it after this check)."""

    id = "overlap-param-gather"
    citation = Citation(f"{ARGUMENTS}:1024-1029", MegatronStage.arguments)
    summary = "overlap_param_gather -> (distributed optimizer or Megatron-FSDP) and overlap_grad_reduce"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if not options.overlap_param_gather:
            return []
        out = []
        if not consts["megatron_param_gather"]:
            out.append("--overlap-param-gather only supported with distributed optimizer, megatron fsdp, or dist_muon")
        if options.overlap_grad_reduce is False:
            out.append("Must use --overlap-param-gather with --overlap-grad-reduce")
        return out


class Fp8ParamGatherSharded(SettingsRule):
    """--fp8-param-gather keeps TE's GEMM weights as FP8 parameters, gathered by the distributed optimizer or
    an FSDP (the check runs after torch FSDP2 has turned the flag off: fsdp2-fp8-param-gather-off)."""

    id = "fp8-param-gather-sharded"
    citation = Citation(f"{ARGUMENTS}:1095-1097", MegatronStage.arguments)
    summary = "fp8_param_gather -> distributed optimizer, torch FSDP2 or Megatron-FSDP"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.fp8_param_gather and not (consts["megatron_param_gather"] or consts["torch_fsdp2"]):
            return ["--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron fsdp, or "
                    "inference mode"]
        return []


class Fp8ParamNeedsFp8(SettingsRule):
    """--fp8-param-gather becomes TransformerConfig.fp8_param (argument_utils.py:312), which needs an FP8 recipe
    (--fp8-format); torch FSDP2 has turned the flag off before (arguments.py:1051-1056)."""

    id = "fp8-param-needs-fp8"
    citation = Citation(f"{CONFIG}:1566-1567", MegatronStage.config)
    summary = "fp8_param_gather -> FP8 training"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.fp8_param_gather and not consts["fp8"] and not consts["torch_fsdp2"]:
            return ["fp8_param must be used together with fp8 mode."]
        return []


class Fp8ParamGatherCpuOffloadDelayed(SettingsRule):
    """With the optimizer on the host, FP8 parameters need delayed scaling (the hybrid device optimizer casts
    the master weights to FP8 under that recipe only)."""

    id = "fp8-param-gather-cpu-offload-delayed"
    citation = Citation(f"{ARGUMENTS}:1888-1891", MegatronStage.arguments)
    summary = "optimizer_cpu_offload and fp8_param_gather -> fp8_recipe delayed"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if (options.optimizer_cpu_offload and options.fp8_param_gather and not consts["torch_fsdp2"]
                and options.fp8_recipe != "delayed"):
            return ["When `--fp8-param-gather` is enabled, the optimizer cpu offload must be used in conjunction "
                    "with `--fp8-recipe delayed`."]
        return []


class Fsdp2Fp8ParamGatherOff(WarningRule):
    """Under torch FSDP2 Megatron turns --fp8-param-gather off (TE 2.0 and later) and gathers BF16: the
    ledger then holds BF16 weights with their cached FP8 copy (weight_format.fp8_param_gather_on)."""

    id = "fsdp2-fp8-param-gather-off"
    citation = Citation(f"{ARGUMENTS}:1051-1056", MegatronStage.arguments)
    summary = "torch FSDP2 turns fp8_param_gather off (warning)"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.fp8_param_gather and consts["torch_fsdp2"]:
            return ["FSDP2 FP8 param gather is not supported yet in TE 2.0, will fallback to bf16all_gather "
                    "instead, turning off fp8_param_gather"]
        return []


TE_QUANTIZATION = "TransformerEngine@d0067d0 transformer_engine/pytorch/quantization.py"


class Fp8RecipeOnGpu(SettingsRule):
    """Transformer Engine checks the FP8 recipe against the GPU when FP8 autocast starts (check_recipe_support):
    per-tensor scaling needs SM 8.9 or later, blockwise SM 9.0 (and CUDA 12.9), MXFP8 SM 10.x or 11.x (not 12.0
    and later yet). A GPU whose SM parasol cannot name is not judged."""

    id = "fp8-recipe-on-gpu"
    citation = Citation(f"{TE_QUANTIZATION}:149-185,228-240 (check_recipe_support)", MegatronStage.not_megatron)
    summary = "FP8 recipe -> the GPU's SM supports it (TE)"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        sm = consts["gpu_sm"]
        if not consts["fp8"] or not sm:
            return []
        if options.fp8_recipe == "mxfp8" and sm >= 120:
            return ["MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet."]
        if options.fp8_recipe == "mxfp8" and sm < 100:
            return ["Device compute capability 10.0 or higher required for MXFP8 execution."]
        if options.fp8_recipe == "blockwise" and sm < 90:
            return ["FP8 block scaled GEMM requires compute capability 9.0 or higher and CUDA >= 12.9."]
        if sm < 89:
            return ["Device compute capability 8.9 or higher required for FP8 execution."]
        return []


class DelayWgradRequiresEPOverlap(SettingsRule):
    """--delay-wgrad-compute runs the weight gradients inside the EP all-to-all overlap's schedule, so it needs
    --overlap-moe-expert-parallel-comm (the TE version the CLI also checks is not observable)."""

    id = "delay-wgrad-requires-ep-overlap"
    citation = Citation(f"{CONFIG}:3073-3077", MegatronStage.config)
    summary = "delay_wgrad_compute -> overlap_moe_expert_parallel_comm"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.delay_wgrad_compute and not options.overlap_moe_expert_parallel_comm:
            return ["overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute"]
        return []


class Fp8InputStoreSwiGLU(SettingsRule):
    """--activation-func-fp8-input-store keeps the SwiGLU input in FP8: any other activation is refused."""

    id = "fp8-input-store-swiglu"
    citation = Citation(f"{CONFIG}:2467-2469", MegatronStage.config)
    summary = "activation_func_fp8_input_store -> SwiGLU MLPs"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.activation_func_fp8_input_store and not consts["swiglu"]:
            return ["Storing activation input in FP8 is supported only for SwiGLU."]
        return []


# --- determinism and deprecated flags --------------------------------------------------------------

class DeterministicMode(SettingsRule):
    """--deterministic-mode needs the cross-entropy fusion and TP comm overlap off (the TE environment
    variable it also checks is not observable)."""

    id = "deterministic-mode"
    citation = Citation("Megatron-LM megatron/training/determinism.py:24,119-158", MegatronStage.arguments)
    summary = "deterministic_mode -> no cross_entropy_loss_fusion, no tp_comm_overlap"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if not options.deterministic_mode:
            return []
        bad = [flag for flag, on in (("cross_entropy_loss_fusion=False", options.cross_entropy_loss_fusion),
                                      ("tp_comm_overlap=False", options.tp_comm_overlap)) if on]
        return [f"--deterministic-mode requires: {', '.join(bad)}. Adjust these options to continue."] if bad else []


class TECrossEntropyFusionOff(SettingsRule):
    """Megatron-LM's CLI refuses the fused cross-entropy loss on Transformer Engine's kernels (stability issues);
    a Megatron Core user gets only a warning (model_parallel_config.py:536-543)."""

    id = "te-cross-entropy-fusion-off"
    citation = Citation(f"{ARGUMENTS}:1697-1702", MegatronStage.arguments)
    summary = "cross_entropy_loss_fusion -> cross_entropy_fusion_impl native"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if (options.cross_entropy_loss_fusion and options.cross_entropy_fusion_impl == "te"
                and not options.megatron_core_api):
            return ["Transformer Engine cross entropy loss fusion is disabled due to stability issues. Use "
                    "--cross-entropy-fusion-impl native, or omit --cross-entropy-loss-fusion."]
        return []


class DeprecatedRampupBatchSize(WarningRule):
    """--rampup-batch-size is deprecated and ignored: the run uses the full GBS from the first step."""

    id = "deprecated-rampup-batch-size"
    citation = Citation("Megatron-LM megatron/core/num_microbatches_calculator.py:100-104", MegatronStage.global_vars)
    summary = "rampup_batch_size is ignored (warning)"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.rampup_batch_size is None:
            return []
        return ["rampup_batch_size is deprecated and will be removed in a future release. Use "
                "step_batch_size_schedule instead."]


class RecomputeActivationsAlias(WarningRule):
    """--recompute-activations sets the granularity to selective, replacing the mapping's choice."""

    id = "recompute-activations-alias"
    citation = Citation(f"{ARGUMENTS}:607-609", MegatronStage.arguments)
    summary = "recompute_activations -> recompute_granularity := selective (warning when it differs)"
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.recompute_activations and recompute != "selective":
            return [f"--recompute-activations makes Megatron recompute selectively, not {recompute!r}"]
        return []


class DeprecatedMoeLayerRecompute(SettingsRule):
    """--moe-layer-recompute is deprecated (it becomes selective recompute of 'moe') and rejects full."""

    id = "deprecated-moe-layer-recompute"
    citation = Citation(f"{CONFIG}:2014-2025", MegatronStage.config)
    summary = "moe_layer_recompute -> recompute != full"
    reads_recompute = True

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.moe_layer_recompute and recompute == "full":
            return ["--moe-layer-recompute is deprecated. Do not set --moe-layer-recompute with full recompute "
                    "granularity."]
        return []
