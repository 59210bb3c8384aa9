"""Placement rules: tensor-parallel groups (dense TP and expert ETP) inside one NVLink domain, and TP's
communication overlap only there. TP and ETP collectives run in every layer, on the critical path, and
Megatron places them on consecutive ranks (innermost in every rank order), so a group stays inside an NVLink
domain exactly when its size divides the domain. A warning by default; `framework.tp_across_nvlink: error`
makes it an error. The overlap rule is always an error: the launch fails without NVLink peers."""

from __future__ import annotations

from parasol.constraints.core.base import Citation, Constraint, Facts, Family, Severity, remainder_slack
from parasol.constraints.physics.workload import USERBUFFERS
from parasol.problems.loader import Problem
from parasol.problems.megatron.stages import MegatronStage

CITATION = ("seed 000 §EP 要连同物理拓扑一起调 (TP benefits from the fast intra-node interconnect); Megatron-LM "
            "megatron/core/parallel_state.py (TP ranks are consecutive)")


class _GroupInsideDomain(Constraint):
    """A tensor-parallel group of `degree` ranks fits whole NVLink domains: degree | GPUs per domain."""

    family = Family.placement
    pack = None
    citation = Citation(CITATION, MegatronStage.not_megatron)
    unit = "GPUs"
    exact = True
    degree = "tp"
    label = "TP"

    def __init__(self, severity: Severity = Severity.warning) -> None:
        self.severity = severity

    def size(self, f: Facts) -> int:
        return f.mapping.tp

    def slack(self, f: Facts) -> float:
        return remainder_slack(f.problem.hardware.topology.gpus_per_nvlink_domain, self.size(f))

    def message(self, f: Facts) -> str:
        domain = f.problem.hardware.topology.gpus_per_nvlink_domain
        return (f"{self.label} {self.size(f)} does not divide the NVLink domain of {domain} GPUs: its groups cross "
                f"the scale-out network in every layer; use {self.label} ≤ {domain} dividing it")

    def post(self, model, v, enforce) -> None:
        if self.severity is Severity.warning:  # a warning never rejects a mapping, in CP-SAT either
            return
        v.divides(getattr(v, self.degree), v.consts["gpus_per_nvlink_domain"], f"{self.degree}_domain", enforce)


class TPGroupInsideNVLinkDomain(_GroupInsideDomain):
    id = "tp-group-inside-nvlink-domain"
    summary = "gpus_per_nvlink_domain % TP == 0"


class ETPGroupInsideNVLinkDomain(_GroupInsideDomain):
    id = "etp-group-inside-nvlink-domain"
    summary = "gpus_per_nvlink_domain % ETP == 0"
    degree = "etp"
    label = "ETP"

    def applies(self, problem: Problem) -> bool:
        return problem.model.moe is not None

    def size(self, f: Facts) -> int:
        return f.mapping.expert_tp


class TPCommOverlapInsideNVLinkDomain(_GroupInsideDomain):
    """--tp-comm-overlap, when the options set it, needs the TP group inside one NVLink domain: Transformer
    Engine's userbuffers map every TP peer's buffer into each rank (IPC handles in a node, fabric handles in
    a multi-node NVLink domain), which a group over the network cannot. Left to parasol (unset), the overlap
    is taken only where it applies (workload.tp_overlap_applies), and the launch line has the flag only then.
    Always an error: the TP group placement rule, in force only under the option."""

    id = "tp-comm-overlap-inside-nvlink-domain"
    citation = Citation(USERBUFFERS, MegatronStage.not_megatron)
    summary = "tp_comm_overlap -> gpus_per_nvlink_domain % TP == 0"

    def __init__(self) -> None:
        super().__init__(Severity.error)

    def in_force(self, f: Facts) -> bool:
        """Only a --tp-comm-overlap the options set maps TP buffers."""
        return bool(f.options.tp_comm_overlap)

    def slack(self, f: Facts) -> float:
        return super().slack(f) if self.in_force(f) else 0.0

    def message(self, f: Facts) -> str:
        domain = f.problem.hardware.topology.gpus_per_nvlink_domain
        return (f"--tp-comm-overlap maps TP peers' buffers over NVLink, but TP {f.mapping.tp} does not divide the "
                f"NVLink domain of {domain} GPUs; use TP ≤ {domain} dividing it, or leave tp_comm_overlap unset")

    def post(self, model, v, enforce) -> None:
        if v.options.tp_comm_overlap:
            super().post(model, v, enforce)


def placement_constraints(problem: Problem) -> tuple[Constraint, ...]:
    """The TP and ETP placement rules at the problem's severity (framework.tp_across_nvlink), and the TP
    overlap's domain rule."""
    severity = Severity(problem.spec.framework.tp_across_nvlink)
    rules = (TPGroupInsideNVLinkDomain(severity), ETPGroupInsideNVLinkDomain(severity),
             TPCommOverlapInsideNVLinkDomain())
    return tuple(r for r in rules if r.active(problem))
