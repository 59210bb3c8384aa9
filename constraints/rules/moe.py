"""MoE rules: experts spread evenly over EP; EP needs experts; MoE with TP needs sequence parallelism;
the token dispatcher and its flex backends, capacity padding, and the EP all-to-all overlap.

Sources: reference/megatron-rules.yaml (Megatron-LM main@d98e8a64) and megatron-groups.md
§2.6. The capacity factor is the problem's `training.capacity_factor` (None = dropless); the deprecated
--moe-enable-deepep selects the deepep backend (transformer_config.py:1743-1752).
"""

from __future__ import annotations

from abc import abstractmethod
from fractions import Fraction

from parasol.constraints.core.base import Citation, Constraint, Facts, Family, remainder_slack
from parasol.constraints.core.consts import model_consts
from parasol.constraints.physics.comm import DEEPEP_NVL_PEERS
from parasol.constraints.rules.feature import SettingsRule
from parasol.problems.mapping import Mapping
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.options import MegatronOptions, flex_backend, uses_backend
from parasol.problems.rank_groups import domain_shares, expert_sizes, order_of

CONFIG = "Megatron-LM megatron/core/transformer/transformer_config.py"
DISPATCHER = "Megatron-LM megatron/core/transformer/moe/token_dispatcher.py"


class ExpertsDivisibleByEP(Constraint):
    """Every EP rank holds the same number of routed experts."""

    id = "experts-divisible-by-ep"
    family = Family.moe
    citation = Citation("Megatron-LM megatron/training/arguments.py:1657-1658; "
                        "megatron/core/transformer/moe/moe_layer.py:182-187", MegatronStage.arguments)
    unit = "experts"
    summary = "num_experts % EP == 0"
    exact = True

    def applies(self, problem) -> bool:
        return problem.model.moe is not None

    def slack(self, f: Facts) -> float:
        return remainder_slack(f.model.moe.num_experts, f.mapping.ep)

    def message(self, f: Facts) -> str:
        return (f"Number of experts should be a multiple of expert model parallel_size. ({f.model.moe.num_experts} "
                f"experts, EP {f.mapping.ep})")

    def post(self, model, v, enforce) -> None:
        v.divides(v.ep, v.consts["num_experts"], "experts_ep", enforce)


class EPRequiresExperts(Constraint):
    """A dense model cannot use expert parallelism."""

    id = "ep-requires-experts"
    family = Family.moe
    citation = Citation("Megatron-LM megatron/training/arguments.py:1648-1656; "
                        "megatron/core/transformer/transformer_config.py:1595-1596", MegatronStage.arguments)
    unit = "EP"
    summary = "EP > 1 -> the model has routed experts"
    exact = True

    def applies(self, problem) -> bool:
        return problem.model.moe is None

    def slack(self, f: Facts) -> float:
        return float(1 - f.mapping.ep)

    def message(self, f: Facts) -> str:
        return f"num_experts must be non None to use expert model parallelism (EP = {f.mapping.ep}, dense model)"

    def post(self, model, v, enforce) -> None:
        model.Add(v.ep == 1).OnlyEnforceIf(enforce)


class MoERule(SettingsRule):
    """Base of the MoE rules over flags: they apply to models with routed experts."""

    family = Family.moe

    def applies(self, problem) -> bool:  # noqa: ANN001 - Problem
        return problem.model.moe is not None


class MoETPRequiresSP(Constraint):
    """Training an MoE layer with TP > 1 needs sequence parallelism (raised at the first MoE forward)."""

    id = "moe-tp-requires-sp"
    family = Family.moe
    citation = Citation("Megatron-LM megatron/core/transformer/moe/moe_layer.py:636-640; "
                        "megatron/core/model_parallel_config.py:560-565", MegatronStage.runtime)
    unit = "TP"
    summary = "MoE and TP > 1 -> sequence_parallel"
    exact = True

    def applies(self, problem) -> bool:
        return problem.model.moe is not None

    def in_force(self, f: Facts) -> bool:
        """Only without sequence parallelism must TP stay 1."""
        return not f.training.sequence_parallel

    def slack(self, f: Facts) -> float:
        return 0.0 if f.training.sequence_parallel else float(1 - f.mapping.tp)

    def message(self, f: Facts) -> str:
        return ("During training, performance may degrade if MoE and tensor parallelismare enabled without also "
                f"enabling sequence parallelism. (TP = {f.mapping.tp}, sequence_parallel off)")

    def post(self, model, v, enforce) -> None:
        if not v.consts["sequence_parallel"]:
            model.Add(v.tp == 1).OnlyEnforceIf(enforce)


class MoEBiasRequiresETP1(Constraint):
    """Linear biases in MoE layers work only without expert tensor parallelism."""

    id = "moe-bias-requires-etp1"
    family = Family.moe
    citation = Citation(f"{CONFIG}:2612-2615", MegatronStage.config)
    unit = "ETP"
    summary = "MoE and add_bias_linear -> ETP == 1"
    exact = True

    def applies(self, problem) -> bool:
        return problem.model.moe is not None

    def in_force(self, f: Facts) -> bool:
        """Only linear biases (--add-bias-linear) force ETP 1."""
        return f.options.add_bias_linear

    def slack(self, f: Facts) -> float:
        return float(1 - f.mapping.expert_tp) if f.options.add_bias_linear else 0.0

    def message(self, f: Facts) -> str:
        return f"Bias in Moe is only supported when ETP==1 (ETP = {f.mapping.expert_tp}, --add-bias-linear)"

    def post(self, model, v, enforce) -> None:
        if v.options.add_bias_linear:
            model.Add(v.etp == 1).OnlyEnforceIf(enforce)


class DeepEPNCCLEPNeedEtpEpGt1(Constraint):
    """The DeepEP and NCCL-EP backends exchange tokens inside the expert TP×EP group, which needs 2+ ranks."""
    reads_choices = True
    reads_grid_only = True

    id = "deepep-ncclep-need-etp-ep-gt-1"
    family = Family.moe
    citation = Citation(f"{DISPATCHER}:84-92,1836,1854", MegatronStage.model_build)
    unit = "ranks"
    summary = "flex with deepep/ncclep -> ETP·EP > 1"

    def applies(self, problem) -> bool:
        return problem.model.moe is not None

    def in_force(self, f: Facts) -> bool:
        """Only the DeepEP and NCCL-EP flex backends need two or more expert ranks."""
        return uses_backend(f.options, "deepep", "ncclep")

    def slack(self, f: Facts) -> float:
        if not uses_backend(f.options, "deepep", "ncclep"):
            return 0.0
        return float(f.mapping.expert_tp * f.mapping.ep - 2)

    def message(self, f: Facts) -> str:
        name = "DeepEP" if flex_backend(f.options) == "deepep" else "NCCL EP"
        return f"{name} dispatcher requires TPxEP > 1 (ETP·EP = {f.mapping.expert_tp}·{f.mapping.ep})"

    def post(self, model, v, enforce) -> None:
        if uses_backend(v.options, "deepep", "ncclep"):
            model.Add(v.product("etp", "ep") >= 2).OnlyEnforceIf(enforce)


DEEPEP = "DeepEP hybrid-ep@94a9f8f csrc/deep_ep.cpp"
DEEPEP_RDMA_PEERS = 20
"""NUM_MAX_RDMA_PEERS of DeepEP (csrc/kernels/configs.cuh:4)."""


def deepep_group_ok(expert_tp: int, ep: int) -> bool:
    """Whether DeepEP's normal kernels take an ETP×EP group of this size (DeepEPGroupSize)."""
    ranks = expert_tp * ep
    return (ranks < DEEPEP_NVL_PEERS or ranks % DEEPEP_NVL_PEERS == 0) and ranks <= DEEPEP_NVL_PEERS * DEEPEP_RDMA_PEERS


class DeepEPGroupSize(Constraint):
    """DeepEP's normal kernels (the ones Megatron's flex dispatcher builds: Buffer(group, nvl bytes, rdma
    bytes), fused_a2a.py:68, not low-latency mode) split the ETP×EP group into RDMA ranks of 8 NVLink peers:
    the group has fewer than 8 ranks or a multiple of 8, and at most 8·20 = 160 ranks."""

    reads_choices = True
    reads_grid_only = True
    id = "deepep-group-size"
    family = Family.moe
    citation = Citation(f"{DEEPEP}:152-153 (EP_HOST_ASSERT in Buffer::Buffer; the buffer is built at the first "
                        "dispatch, megatron/core/transformer/moe/fused_a2a.py:60-68)", MegatronStage.not_megatron)
    unit = "ranks"
    summary = "flex with deepep -> ETP·EP < 8 or ETP·EP % 8 == 0, and ETP·EP <= 160"
    exact = True

    def applies(self, problem) -> bool:
        return problem.model.moe is not None

    def in_force(self, f: Facts) -> bool:
        """Only the DeepEP backend of the flex dispatcher builds DeepEP's buffer."""
        return uses_backend(f.options, "deepep")

    def slack(self, f: Facts) -> float:
        if not self.in_force(f):
            return 0.0
        ranks = f.mapping.expert_tp * f.mapping.ep
        uneven = -float(ranks % DEEPEP_NVL_PEERS) if ranks >= DEEPEP_NVL_PEERS else 0.0
        return min(uneven, float(DEEPEP_NVL_PEERS * DEEPEP_RDMA_PEERS - ranks))

    def message(self, f: Facts) -> str:
        return (f"DeepEP takes an ETP×EP group of fewer than {DEEPEP_NVL_PEERS} ranks or a multiple of "
                f"{DEEPEP_NVL_PEERS}, at most {DEEPEP_NVL_PEERS * DEEPEP_RDMA_PEERS} (ETP·EP = "
                f"{f.mapping.expert_tp}·{f.mapping.ep}); the hybridep backend takes groups that share NVLink "
                "domains evenly (hybridep-even-domains)")

    def post(self, model, v, enforce) -> None:
        if not uses_backend(v.options, "deepep"):
            return
        ranks = v.product("etp", "ep")
        model.Add(ranks <= DEEPEP_NVL_PEERS * DEEPEP_RDMA_PEERS).OnlyEnforceIf(enforce)
        small = model.NewBoolVar("deepep_small_group")
        model.Add(ranks <= DEEPEP_NVL_PEERS - 1).OnlyEnforceIf([enforce, small])
        quotient = model.NewIntVar(0, DEEPEP_RDMA_PEERS, "deepep_rdma_ranks")
        model.Add(ranks == DEEPEP_NVL_PEERS * quotient).OnlyEnforceIf([enforce, small.Not()])


HYBRID_EP = "DeepEP hybrid-ep@94a9f8f"
HYBRIDEP_MOST_DOMAINS = 33
"""NVLink domains one Hybrid-EP group may span: its inter-node warp (32 lanes) loads the other domains' memory
registrations at once, INTER_NODE_GROUP::size() >= NUM_OF_NODES - 1 (hybrid_ep_backend.cuh:1046, 2758)."""


def tp_ep_shares(m: Mapping, domain: int) -> frozenset[tuple[int, ...]]:
    """How many ranks of each ETP×EP group (the expert grid's tp and ep dimensions, Megatron's groups) each
    NVLink domain of `domain` GPUs holds (rank_groups.domain_shares); a group larger than the cluster, which the
    expert grid's own rule refuses, is read as one group."""
    sizes = expert_sizes(m)
    return domain_shares(sizes | {"dp": max(sizes["dp"], 1)}, ("tp", "ep"), domain, order_of(m))


class _HybridEPLayout(Constraint):
    """Base of Hybrid-EP's rules on how an ETP×EP group (the flex dispatcher's group, token_dispatcher.py:1845-1847)
    lies on NVLink domains: each member counts the members it reaches over NVLink as its domain's ranks
    (hybrid_ep_buffer.py:62, allocator.cu detect_accessible_ranks: same fabric or host) and builds its
    buffer and kernels from that count. In force only under the flex dispatcher's hybridep backend."""

    reads_choices = True
    reads_grid_only = True
    family = Family.moe
    exact = True

    def applies(self, problem) -> bool:
        return problem.model.moe is not None

    def in_force(self, f: Facts) -> bool:
        """Only the hybridep backend of the flex dispatcher builds Hybrid-EP's buffer."""
        return uses_backend(f.options, "hybridep")

    @abstractmethod
    def layout_slack(self, shares: frozenset[tuple[int, ...]], experts_per_rank: Fraction) -> float:
        """The rule's slack over the groups' domain shares (tp_ep_shares) and the experts each rank holds."""

    def _shares(self, f: Facts) -> frozenset[tuple[int, ...]]:
        return tp_ep_shares(f.mapping, f.problem.hardware.topology.gpus_per_nvlink_domain)

    def slack(self, f: Facts) -> float:
        if not self.in_force(f):
            return 0.0
        return self.layout_slack(self._shares(f), Fraction(f.model.moe.num_experts, f.mapping.ep))

    def post(self, model, v, enforce) -> None:
        if not uses_backend(v.options, "hybridep"):
            return
        domain, experts = v.consts["gpus_per_nvlink_domain"], v.consts["num_experts"]
        allowed = [(etp, ep) for etp in v.domain_values("etp") for ep in v.domain_values("ep")
                   if self.layout_slack(tp_ep_shares(Mapping(gpus=v.gpus, gbs=1, seq_len=1, ep=ep, etp=etp), domain),
                                        Fraction(experts, ep)) >= 0]
        if allowed:
            model.AddAllowedAssignments([v.etp, v.ep], allowed).OnlyEnforceIf(enforce)
        else:
            model.AddBoolOr([enforce.Not()])


class HybridEPEvenDomains(_HybridEPLayout):
    """Every NVLink domain an ETP×EP group touches holds the same number of its members: Hybrid-EP asserts that the
    group size divides the count each member reaches, and takes rank mod / div that count as the member's local
    rank and domain, which only agree across the group when the count is the same in every domain."""

    id = "hybridep-even-domains"
    citation = Citation(f"{HYBRID_EP} deep_ep/hybrid_ep_buffer.py:74-83 (asserts 'The number of ranks ... should be "
                        "divisible by the number of ranks per node'; local_rank, node_rank, num_of_nodes)",
                        MegatronStage.not_megatron)
    unit = "ranks"
    summary = "flex with hybridep -> every NVLink domain an ETP×EP group touches holds as many of its ranks"

    def layout_slack(self, shares: frozenset[tuple[int, ...]], experts_per_rank: Fraction) -> float:
        return -float(max(max(p) - min(p) for p in shares))

    def message(self, f: Facts) -> str:
        m, domain = f.mapping, f.problem.hardware.topology.gpus_per_nvlink_domain
        splits = ", ".join("+".join(map(str, p)) for p in sorted(self._shares(f)))
        return (f"Hybrid-EP needs every NVLink domain of an ETP×EP group to hold as many of its ranks: groups of "
                f"{m.expert_tp}·{m.ep} ranks on domains of {domain} GPUs split {splits}; ETP·EP dividing the domain "
                "or a multiple of it splits evenly (a job allocated in segments of fewer nodes per domain sees smaller "
                "domains: the launch script's #SBATCH --segment, NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN, or "
                "hardware.topology.gpus_per_nvlink_domain)")


class HybridEPExpertsPerDomain(_HybridEPLayout):
    """Hybrid-EP's dispatch and combine kernels move each token's routing probabilities for the experts of one
    domain by TMA in 16-byte units: experts per rank × the group's ranks per domain is a multiple of 4."""

    id = "hybridep-experts-per-domain"
    citation = Citation(f"{HYBRID_EP} csrc/hybrid_ep/backend/hybrid_ep_backend.cuh:4325, 4571 (static_assert "
                        "'expert per node must be multiple of 4')", MegatronStage.not_megatron)
    unit = "experts"
    summary = "flex with hybridep -> (experts / EP) · ETP×EP ranks per NVLink domain ≡ 0 (mod 4)"

    def layout_slack(self, shares: frozenset[tuple[int, ...]], experts_per_rank: Fraction) -> float:
        return min(remainder_slack(experts_per_rank * piece, 4) for p in shares for piece in p)

    def message(self, f: Facts) -> str:
        pieces = " or ".join(str(piece) for piece in sorted({piece for p in self._shares(f) for piece in p}))
        return (f"Hybrid-EP needs a multiple of 4 experts per NVLink domain of its group: "
                f"{f.model.moe.num_experts}/{f.mapping.ep} experts per rank × {pieces} ranks per domain")


class HybridEPDomainCount(_HybridEPLayout):
    """One Hybrid-EP group spans at most HYBRIDEP_MOST_DOMAINS NVLink domains."""

    id = "hybridep-domain-count"
    citation = Citation(f"{HYBRID_EP} csrc/hybrid_ep/backend/hybrid_ep_backend.cuh:1046, 2758 (static_assert "
                        "INTER_NODE_GROUP::size() >= NUM_OF_NODES - 1, one warp)", MegatronStage.not_megatron)
    unit = "domains"
    summary = f"flex with hybridep -> an ETP×EP group spans at most {HYBRIDEP_MOST_DOMAINS} NVLink domains"
    exact = False

    def layout_slack(self, shares: frozenset[tuple[int, ...]], experts_per_rank: Fraction) -> float:
        return float(HYBRIDEP_MOST_DOMAINS - max(len(p) for p in shares))

    def message(self, f: Facts) -> str:
        domains = max(len(p) for p in self._shares(f))
        return (f"a Hybrid-EP group spans at most {HYBRIDEP_MOST_DOMAINS} NVLink domains: ETP·EP = "
                f"{f.mapping.expert_tp}·{f.mapping.ep} spans {domains}")


class DeepEPFlagRequiresFlex(MoERule):
    """The deprecated --moe-enable-deepep works only with the flex dispatcher and not with hybridep."""
    reads_choices = True

    id = "deepep-flag-requires-flex"
    citation = Citation(f"{CONFIG}:1743-1752", MegatronStage.config)
    summary = "moe_enable_deepep -> flex dispatcher, backend != hybridep"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if not options.moe_enable_deepep:
            return []
        out = []
        if options.moe_token_dispatcher_type != "flex":
            out.append("DeepEP backend is only supported with flex token dispatcher.")
        if options.moe_flex_dispatcher_backend == "hybridep":
            out.append("Only one backend is supported for flex token dispatcher.")
        return out


class NCCLEPRequiresFlex(MoERule):
    """The ncclep backend belongs to the flex dispatcher."""
    reads_choices = True

    id = "ncclep-requires-flex"
    citation = Citation(f"{CONFIG}:1763-1774", MegatronStage.config)
    summary = "backend ncclep -> flex dispatcher"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if flex_backend(options) == "ncclep" and options.moe_token_dispatcher_type != "flex":
            return ["moe_flex_dispatcher_backend='ncclep' requires moe_token_dispatcher_type='flex'."]
        return []


class NCCLEPNoDropPad(MoERule):
    """NCCL EP is dropless only: no capacity factor, no padding to capacity."""
    reads_choices = True

    id = "ncclep-no-drop-pad"
    citation = Citation(f"{DISPATCHER}:1554-1556", MegatronStage.model_build)
    summary = "flex with ncclep -> no capacity factor, no pad to capacity"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if not uses_backend(options, "ncclep"):
            return []
        if consts["capacity_factor_set"] or options.moe_pad_expert_input_to_capacity:
            return ["drop and pad is not supported yet with the 'ncclep' backend."]
        return []


class DeepEPNoPadToCapacity(MoERule):
    """DeepEP cannot pad expert inputs to capacity."""
    reads_choices = True

    id = "deepep-no-pad-to-capacity"
    citation = Citation(f"{CONFIG}:1754-1761", MegatronStage.config)
    summary = "flex with deepep -> not moe_pad_expert_input_to_capacity"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if uses_backend(options, "deepep") and options.moe_pad_expert_input_to_capacity:
            return ["Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity"]
        return []


class PadRequiresCapacityFactor(MoERule):
    """Padding to capacity needs a capacity (training.capacity_factor)."""

    id = "pad-requires-capacity-factor"
    citation = Citation(f"{CONFIG}:1862-1866", MegatronStage.config)
    summary = "moe_pad_expert_input_to_capacity -> capacity factor set"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.moe_pad_expert_input_to_capacity and not consts["capacity_factor_set"]:
            return ["moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity"]
        return []


class TopK1NeedsPreSoftmax(MoERule):
    """Top-1 routing with a softmax score applied after the top-k has a zero gradient (softmax over one
    value), so Megatron's config asks for --moe-router-pre-softmax unless Sinkhorn balances the load."""

    id = "topk1-needs-pre-softmax"
    citation = Citation(f"{CONFIG}:2661-2669", MegatronStage.config)
    summary = "top-k 1 and softmax score -> pre-softmax, or sinkhorn load balancing"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        sinkhorn = options.moe_router_load_balancing_type == ("sinkhorn",)
        if (consts["moe_top_k"] == 1 and options.moe_router_score_function == "softmax"
                and not options.moe_router_pre_softmax and not sinkhorn):
            return ["Please use --moe-router-pre-softmax when topk is 1."]
        return []


class GroupLimitedRouting(MoERule):
    """Group-limited routing (--moe-router-group-topk) needs the number of groups, which must divide the
    experts and be at least the groups each token may pick."""

    id = "group-limited-routing"
    citation = Citation(f"{CONFIG}:2671-2689", MegatronStage.config)
    summary = "moe_router_group_topk -> num_groups set, E % num_groups == 0, group_topk <= num_groups"

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        topk, groups, experts = options.moe_router_group_topk, options.moe_router_num_groups, consts["num_experts"]
        if topk is None:
            return []
        if groups is None:
            return ["When using group limited routing, moe_router_num_groups must be specified."]
        bad = []
        if experts % groups:
            bad.append(f"num_moe_experts ({experts}) should be divisible by moe_router_num_groups ({groups}).")
        if topk > groups:
            bad.append(f"moe_router_group_topk ({topk}) should be smaller than moe_router_num_groups ({groups}).")
        return bad


class SharedExpertOverlapDispatcher(MoERule):
    """Overlapping the shared experts with dispatch needs the alltoall or flex dispatcher."""
    reads_choices = True

    id = "shared-expert-overlap-dispatcher"
    citation = Citation(f"{CONFIG}:1813-1826", MegatronStage.config)
    summary = "moe_shared_expert_overlap -> dispatcher in {alltoall, flex}"

    def applies(self, problem) -> bool:
        return super().applies(problem) and problem.model.moe.shared_width > 0

    def unmet(self, options: MegatronOptions, consts: dict[str, int], recompute: str) -> list[str]:
        if options.moe_shared_expert_overlap and options.moe_token_dispatcher_type not in ("alltoall", "flex"):
            return ["moe_shared_expert_overlap only works with alltoall or flex token dispatcher "
                    f"(dispatcher is {options.moe_token_dispatcher_type})."]
        return []


class EPA2AOverlap(Constraint):
    """Overlapping the EP all-to-all with compute (--overlap-moe-expert-parallel-comm) needs EP > 1, VPP when
    PP > 1, the alltoall or flex dispatcher, no full recompute and no recompute method/layers, no 'moe'
    recompute module, no shared-expert overlap and at most one MTP layer (torch >= 2.6 is not judged)."""
    reads_choices = True

    id = "ep-a2a-overlap"
    family = Family.moe
    citation = Citation(f"{CONFIG}:3002-3071", MegatronStage.config)
    unit = "settings"
    summary = "overlap_moe_expert_parallel_comm -> EP > 1, VPP if PP > 1, a2a/flex, no full recompute, ..."
    exact = True

    def applies(self, problem) -> bool:
        return problem.model.moe is not None

    def _constant_unmet(self, options: MegatronOptions, consts: dict[str, int]) -> list[str]:
        """The conditions on flags and the model alone."""
        out = []
        if options.moe_token_dispatcher_type not in ("alltoall", "flex"):
            out.append("the token dispatcher must be alltoall or flex")
        if options.recompute_method is not None or options.recompute_num_layers is not None:
            out.append("recompute_method and recompute_num_layers must be unset")
        if options.moe_shared_expert_overlap:
            out.append("moe_shared_expert_overlap must be off")
        if consts["mtp_layers"] > 1:
            out.append(f"at most 1 MTP layer (the model has {consts['mtp_layers']})")
        return out

    def _unmet(self, f: Facts) -> list[str]:
        m, consts = f.mapping, model_consts(f.problem)
        if not f.options.overlap_moe_expert_parallel_comm:
            return []
        out = self._constant_unmet(f.options, consts)
        if m.pp > 1 and m.vpp == 1:
            out.append("virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size > 1")
        if m.ep == 1:
            out.append("overlap_moe_expert_parallel_comm is only supported with expert model parallelism")
        if m.recompute.value == "full":
            out.append("full recompute is not supported")
        if m.recompute.value == "selective" and consts["recompute_moe"]:
            out.append("'moe' in recompute_modules is not supported")
        return out

    def in_force(self, f: Facts) -> bool:
        """Only --overlap-moe-expert-parallel-comm has these requirements."""
        return f.options.overlap_moe_expert_parallel_comm

    def slack(self, f: Facts) -> float:
        return -float(len(self._unmet(f)))

    def message(self, f: Facts) -> str:
        unmet = self._unmet(f)
        return ("If enabling EP A2A overlap: " + "; ".join(unmet)) if unmet else f"{self.summary}: holds"

    def post(self, model, v, enforce) -> None:
        if not v.options.overlap_moe_expert_parallel_comm:
            return
        if self._constant_unmet(v.options, v.consts):
            model.AddBoolOr([enforce.Not()])
            return
        model.Add(v.vpp >= 2).OnlyEnforceIf([enforce, v.at_least("pp", 2)])
        model.Add(v.ep >= 2).OnlyEnforceIf(enforce)
        if "full" in v.recompute:
            model.AddBoolOr([enforce.Not(), v.recompute["full"].Not()])
        if "selective" in v.recompute and v.consts["recompute_moe"]:
            model.AddBoolOr([enforce.Not(), v.recompute["selective"].Not()])
