"""Every built-in rule, in a stable order, and the selection that applies to one problem."""

from __future__ import annotations

from parasol.constraints.core.base import Constraint
from parasol.constraints.rules.batch import EvalGbsDivisible, GbsDivisibleByMbsDp, NumMicrobatches
from parasol.constraints.rules.capacity import MemoryFitsHBM
from parasol.constraints.rules.context import (
    CPA2AHeadsDivisible,
    CPA2AP2PHeadsDivisible,
    CPA2AP2PRequiresHierarchical,
    CPA2AP2PTwoLevels,
    CPSeqDivisibleBy2CP,
    HierarchicalCPProduct,
)
from parasol.constraints.rules.contract import contract_constraints
from parasol.constraints.rules.deepseek_v4 import DSV4_RULES
from parasol.constraints.rules.divisibility import (
    HeadsDivisibleByTP,
    HiddenDivisibleByHeads,
    QueryGroupsDivideHeads,
    QueryGroupsVsTP,
    TPShardedLinearDims,
    WorldDivisibleByExpertGrid,
    WorldDivisibleByModelSize,
)
from parasol.constraints.rules.dsa import DsaCpAllgather, DsaNoLinearBias, DsaScoresNotPriced
from parasol.constraints.rules.dualpipe import DUALPIPE_RULES
from parasol.constraints.rules.feature import (
    CpuOffloading,
    DelayWgradRequiresEPOverlap,
    DeprecatedMoeLayerRecompute,
    DeprecatedRampupBatchSize,
    DeterministicMode,
    DistOptInstancesDivideDpCp,
    DistOptInstancesDivideEdp,
    FineGrainedOffload,
    Fp8InputStoreSwiGLU,
    Fp8ParamGatherCpuOffloadDelayed,
    Fp8ParamGatherSharded,
    Fp8ParamNeedsFp8,
    Fp8RecipeOnGpu,
    Fsdp2Fp8ParamGatherOff,
    MhcRecomputeModule,
    NonPPLastOrderRequiresEqualDP,
    OptimizerCpuOffloadPrecisionAware,
    OverlapParamGather,
    PPGroupsIdentical,
    RecomputeActivationsAlias,
    RecomputeFullNeedsMethod,
    RecomputeFullNeedsNumLayers,
    RecomputeModulePrereqs,
    RecomputeSelectiveNoMethod,
    RecomputeSelectiveNoNumLayers,
    SPActivationSeqDivisibleByTP,
    SPAutoDisabledWhenTP1,
    SPRequiresTP,
    TECrossEntropyFusionOff,
    TPCommOverlapRequiresSP,
)
from parasol.constraints.rules.fsdp import (
    FsdpOptimizer,
    TorchFsdp2NoExpertParallel,
    TorchFsdp2NoPipeline,
    TorchFsdp2UntiedEmbeddings,
)
from parasol.constraints.rules.moe import (
    DeepEPFlagRequiresFlex,
    DeepEPGroupSize,
    DeepEPNCCLEPNeedEtpEpGt1,
    DeepEPNoPadToCapacity,
    EPA2AOverlap,
    EPRequiresExperts,
    ExpertsDivisibleByEP,
    GroupLimitedRouting,
    HybridEPDomainCount,
    HybridEPEvenDomains,
    HybridEPExpertsPerDomain,
    MoEBiasRequiresETP1,
    MoETPRequiresSP,
    NCCLEPNoDropPad,
    NCCLEPRequiresFlex,
    PadRequiresCapacityFactor,
    SharedExpertOverlapDispatcher,
    TopK1NeedsPreSoftmax,
)
from parasol.constraints.rules.pipeline import (
    AccountForDivisible,
    AccountForEnoughLayers,
    HybridMtpPatternsIdentical,
    HybridNoAttentionPlusMLA,
    LayersDivisibleByPP,
    LayoutCoversBlocks,
    LayoutDecoderCount,
    LayoutEmbeddingLossOnce,
    LayoutExcludesOtherPPArgs,
    LayoutMtpPlacement,
    LayoutStagesDivisibleByPP,
    LayoutValidChars,
    LayoutVppConsistent,
    NonInterleavedDisablesP2POverlap,
    UnevenExcludesAccountFor,
    UnevenFirstDivisibleByVpp,
    UnevenLastDivisibleByVpp,
    UnevenMiddleConsistency,
    UnevenMiddleDivisible,
    UnevenMiddleDivisibleByVpp,
    VirtualStagesWithinBlocks,
    VppArgsMutuallyExclusive,
    VppFromLayersPerVStage,
    VppFromVirtualStagesPerRank,
    VppLayersPerRankDivisible,
    VppLayersPerVStageExcludesUneven,
    VppNoOverlapRequiresPPGt2,
    VppRequiresPPGt1,
)
from parasol.constraints.rules.placement import placement_constraints
from parasol.constraints.rules.schedule import VppFinalGroupRemainder, VppMicrobatchGroupRange
from parasol.constraints.rules.seed_claims import SEED_CLAIM_RULES
from parasol.constraints.rules.user import user_constraints
from parasol.problems.memo import memoised

# Megatron-LM runs its checks in stages (megatron-groups.md, 'Enforcement stages') and stops at the
# first failure; within a stage the rules follow the source order of their checks.
STAGE_A_ARGUMENTS = (
    WorldDivisibleByModelSize, HierarchicalCPProduct, CPA2AP2PRequiresHierarchical, RecomputeActivationsAlias,
    EvalGbsDivisible, LayoutValidChars, LayoutStagesDivisibleByPP, LayersDivisibleByPP, VppArgsMutuallyExclusive,
    VppFromLayersPerVStage, VppLayersPerVStageExcludesUneven, VppFromVirtualStagesPerRank, VppRequiresPPGt1,
    VppNoOverlapRequiresPPGt2, NonInterleavedDisablesP2POverlap, OverlapParamGather, TorchFsdp2NoPipeline,
    TorchFsdp2NoExpertParallel, TorchFsdp2UntiedEmbeddings, Fsdp2Fp8ParamGatherOff, Fp8ParamGatherSharded,
    FsdpOptimizer, HiddenDivisibleByHeads, CPSeqDivisibleBy2CP,
    RecomputeSelectiveNoMethod, SPAutoDisabledWhenTP1, TPCommOverlapRequiresSP, EPRequiresExperts,
    ExpertsDivisibleByEP, TECrossEntropyFusionOff, DeterministicMode, OptimizerCpuOffloadPrecisionAware,
    Fp8ParamGatherCpuOffloadDelayed,
)
STAGE_G_GLOBAL_VARS = (DeprecatedRampupBatchSize, GbsDivisibleByMbsDp, NumMicrobatches)
STAGE_I_PROCESS_GROUPS = (
    WorldDivisibleByExpertGrid, NonPPLastOrderRequiresEqualDP, PPGroupsIdentical, DistOptInstancesDivideDpCp,
    DistOptInstancesDivideEdp,
)
STAGE_C_CONFIG = (
    SPRequiresTP, HeadsDivisibleByTP, QueryGroupsVsTP, Fp8ParamNeedsFp8, DeepEPFlagRequiresFlex, DeepEPNoPadToCapacity,
    NCCLEPRequiresFlex, SharedExpertOverlapDispatcher, PadRequiresCapacityFactor, TopK1NeedsPreSoftmax,
    GroupLimitedRouting, DsaNoLinearBias, CpuOffloading, RecomputeFullNeedsMethod, RecomputeFullNeedsNumLayers,
    RecomputeSelectiveNoNumLayers, RecomputeModulePrereqs, DeprecatedMoeLayerRecompute, MhcRecomputeModule,
    FineGrainedOffload, UnevenExcludesAccountFor, LayoutExcludesOtherPPArgs, LayoutVppConsistent,
    LayoutEmbeddingLossOnce, LayoutDecoderCount, LayoutMtpPlacement, UnevenMiddleConsistency,
    UnevenFirstDivisibleByVpp, UnevenLastDivisibleByVpp, UnevenMiddleDivisible, UnevenMiddleDivisibleByVpp,
    AccountForDivisible, Fp8InputStoreSwiGLU, MoEBiasRequiresETP1, EPA2AOverlap, DelayWgradRequiresEPOverlap,
    DsaCpAllgather,
)
STAGE_B_MODEL_BUILD = (
    VppLayersPerRankDivisible, AccountForEnoughLayers, HybridNoAttentionPlusMLA, HybridMtpPatternsIdentical,
    QueryGroupsDivideHeads, TPShardedLinearDims, DeepEPNCCLEPNeedEtpEpGt1, NCCLEPNoDropPad,
)
STAGE_R_RUNTIME = (SPActivationSeqDivisibleByTP, MoETPRequiresSP, VppMicrobatchGroupRange, VppFinalGroupRemainder,
                   CPA2AHeadsDivisible, CPA2AP2PTwoLevels, CPA2AP2PHeadsDivisible, DeepEPGroupSize,
                   HybridEPEvenDomains, HybridEPExpertsPerDomain, HybridEPDomainCount, Fp8RecipeOnGpu,
                   DsaScoresNotPriced)
PARASOL_RULES = (LayoutCoversBlocks, VirtualStagesWithinBlocks, MemoryFitsHBM)


def builtin_constraints() -> tuple[Constraint, ...]:
    """All built-in rules, one instance each, in reporting order (Megatron's stage order first)."""
    stages = (STAGE_A_ARGUMENTS, STAGE_G_GLOBAL_VARS, STAGE_I_PROCESS_GROUPS, STAGE_C_CONFIG, STAGE_B_MODEL_BUILD,
              STAGE_R_RUNTIME, DSV4_RULES, SEED_CLAIM_RULES, DUALPIPE_RULES, PARASOL_RULES)
    return tuple(rule() for stage in stages for rule in stage)


def active_constraints(problem) -> tuple[Constraint, ...]:  # noqa: ANN001 - Problem
    """The rules that apply to `problem` (its model kind and rule packs), then its own restrictions, then
    seed 003's contract rules when it has a `contract:` section; the TP/ETP placement rules sit after the
    built-in ones (at the problem's severity); built once per problem."""
    return memoised(problem, "rules", lambda: tuple(c for c in builtin_constraints() if c.active(problem))
                    + placement_constraints(problem) + user_constraints(problem) + contract_constraints(problem))
