"""`parasol explain`: the full account of one mapping as a value (JSON-ready) for the writers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from parasol.constraints.evaluate import Evaluation, evaluate, facts_for
from parasol.constraints.physics.goodput import Goodput
from parasol.constraints.physics.step_time import StepTime, step_time_or_none
from parasol.constraints.physics.weight_format import fp8_param_gather_on
from parasol.constraints.rules.contract_table import contract_rows, goodput_of
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.problems.options import MegatronOptions
from parasol.problems.rank_groups import GroupPlacement, placements
from parasol.problems.schema import Precision
from parasol.solver.diagnose.conflicts import conflict_note

if TYPE_CHECKING:
    from parasol.solver.diagnose.repairs import Repair


@dataclass(frozen=True)
class Explanation:
    """Everything `explain` prints: the evaluation, group placement and, for an infeasible mapping, a
    minimal conflicting set of rules and the nearest feasible repairs."""

    problem: Problem
    mapping: Mapping
    evaluation: Evaluation
    groups: tuple[GroupPlacement, ...]
    conflict: tuple[str, ...] = ()
    repairs: tuple[Repair, ...] = ()
    step: StepTime | None = None
    contract: tuple[dict, ...] = ()
    """Seed 003 §9's contract table, one row per domain (constraints/rules/contract_table.py)."""
    goodput: Goodput | None = None
    """Effective throughput after failures and checkpoints, when the problem gives contract.goodput."""

    @property
    def feasible(self) -> bool:
        return self.evaluation.feasible

    def as_dict(self) -> dict:
        """The BRIEF's `explain --json` contract."""
        ev = self.evaluation
        facts = ev.facts
        ledger = facts.ledger
        mapping = self.mapping.as_dict()
        mapping["layout"] = list(facts.derived.layout)
        stages = []
        if ledger is not None:
            for s in ledger.stages:
                stages.append({
                    "stage": s.stage,
                    "layers": len(s.blocks),
                    "blocks": [s.blocks[0], s.blocks[-1]] if s.blocks else [],
                    "moe_layers": s.moe_blocks,
                    "memory_gb": round(s.total_gb, 4),
                    "slack_gb": round(s.slack_gb, 4),
                    "inflight_microbatches": s.inflight_microbatches,
                    "memory_terms_gb": {t.name: round(t.gb, 4) for t in s.terms},
                })
        if self.step is not None:
            for entry, ms in zip(stages, self.step.stage_time_s, strict=False):
                entry["time_ms"] = round(ms * 1e3, 4)
        metrics = self.metrics()
        return {
            "feasible": self.feasible,
            "mapping": mapping,
            "derived": facts.derived.as_dict(),
            "violations": [
                {"rule": v.rule, "message": v.message, "slack": v.slack, "unit": v.unit,
                 "source": v.citation.source, "stage": v.citation.stage.value, "family": v.family.value}
                for v in ev.violations
            ],
            "constraints": [
                {"rule": v.rule, "slack": v.slack, "unit": v.unit, "binding": v.binding, "in_force": v.in_force,
                 "exact": v.exact}
                for v in ev.verdicts
            ],
            "warnings": [
                {"rule": v.rule, "message": v.message, "source": v.citation.source, "stage": v.citation.stage.value}
                for v in ev.warnings
            ],
            "not_evaluated": [{"rule": rule, "reason": why} for rule, why in ev.skipped],
            "metrics": metrics,
            "stages": stages,
            "groups": [
                {"group": g.kind, "size": g.size, "count": g.count, "max_nodes": g.max_nodes,
                 "max_nvlink_domains": g.max_domains, "inside_node": g.inside_node,
                 "inside_nvlink_domain": g.inside_domain}
                for g in self.groups
            ],
            "assumptions": list(ledger.assumptions) if ledger is not None else [],
            "minimal_conflict": list(self.conflict),
            "minimal_conflict_note": conflict_note(self.conflict, [v.rule for v in ev.violations]),
            "repairs": [r.as_dict() for r in self.repairs],
            "step_time": self.step.as_dict() if self.step is not None else None,
            "contract": list(self.contract),
        }

    def metrics(self) -> dict:
        """as_dict's `metrics`: peak memory, where the ranks sit, step time and throughput, goodput (solve
        reads them for every mapping it returns without building the whole contract)."""
        ledger = self.evaluation.facts.ledger
        metrics: dict = {}
        if ledger is not None:
            metrics["peak_memory_gb"] = round(ledger.peak.total_gb, 4)
            metrics["peak_memory_stage"] = ledger.peak.stage
            metrics["usable_hbm_gb"] = round(ledger.peak.usable_bytes / 1e9, 4)
        metrics.update(node_metrics(self.problem))
        if self.step is not None:
            metrics.update(step_metrics(self.step))
        if self.goodput is not None:
            metrics["effective_tokens_per_s"] = round(self.goodput.effective_tokens_per_s, 3)
            metrics["goodput_fraction"] = round(self.goodput.fraction, 6)
        return metrics


def node_metrics(problem: Problem) -> dict:
    """Where the job's ranks sit: nodes used, ranks per node and the GPUs those nodes leave idle (a
    partial-node job, hardware/topology.py for_job)."""
    topo = problem.hardware.topology
    nodes = -(-problem.gpus // topo.gpus_per_node)
    return {"nodes": nodes, "ranks_per_node": topo.gpus_per_node, "idle_gpus": nodes * topo.idle_gpus_per_node}


def step_metrics(step: StepTime) -> dict:
    """The BRIEF's step-time metrics: step time, throughput, model TFLOP/s, MFU and HFU, and the
    bytes crossing the scale-out network per step (TB, all GPUs)."""
    return {
        "step_time_s": round(step.step_time_s, 6),
        "tokens_per_s": round(step.tokens_per_s, 3),
        "tokens_per_s_per_gpu": round(step.tokens_per_s_per_gpu, 3),
        "model_tflops_per_gpu": round(step.model_tflops_per_gpu, 3),
        "mfu": round(step.mfu, 6),
        "hfu": round(step.hfu, 6),
        "network_tb_per_step": round(step.network_bytes / 1e12, 6),
    }


def explain(problem: Problem, mapping: Mapping, options: MegatronOptions | None = None,
            repairs: int = 3) -> Explanation:
    """Evaluate `mapping`, place its groups (when the grids divide the world) and, when it is
    infeasible, find a minimal conflicting set and up to `repairs` nearest feasible mappings;
    `options` default to the problem's framework options."""
    evaluation = evaluate(problem, mapping, options=options)
    mapping = evaluation.facts.mapping
    d = evaluation.facts.derived
    grids_whole = d.dp_attn.denominator == 1 and d.dp_expert.denominator == 1
    topo = problem.hardware.topology
    groups = placements(mapping, topo.gpus_per_node, topo.gpus_per_nvlink_domain) if grids_whole else ()
    conflict: tuple[str, ...] = ()
    fixes: tuple[Repair, ...] = ()
    if not evaluation.feasible:
        from parasol.solver.diagnose.conflicts import minimal_conflict
        from parasol.solver.diagnose.repairs import nearest_repairs

        conflict = minimal_conflict(problem, mapping, options)
        fixes = tuple(nearest_repairs(problem, mapping, options, k=repairs))
    step = step_time_or_none(problem, mapping, d, options=evaluation.facts.options)
    return Explanation(problem=problem, mapping=mapping, evaluation=evaluation, groups=groups,
                       conflict=conflict, repairs=fixes, step=step,
                       contract=tuple(contract_rows(problem, evaluation.facts, step, groups, evaluation.verdicts)),
                       goodput=goodput_of(problem, step, mapping.gpus))


def fp8_parameters_note(problem: Problem, mapping: Mapping) -> str | None:
    """What --fp8-param-gather would save where an FP8 run keeps its GEMM weights in BF16 beside their cached FP8
    copies and Megatron accepts the flag (where parasol's own choice takes it, weight_format.fp8_param_gather_on):
    the heaviest stage with and without it."""
    options, training = problem.spec.framework.options, problem.training
    if training.precision is not Precision.fp8 or fp8_param_gather_on(training, options):
        return None
    if not fp8_param_gather_on(training, options.model_copy(update={"fp8_param_gather": None})):
        return None
    with_flag = options.model_copy(update={"fp8_param_gather": True})
    now, then = facts_for(problem, mapping).ledger, facts_for(problem, mapping, with_flag).ledger
    if now is None or then is None:
        return None
    return (f"--fp8-param-gather is not set: Transformer Engine keeps every GEMM weight in BF16 beside the FP8 copy "
            f"it caches across microbatches; with the flag (Megatron accepts it here) the heaviest stage would hold "
            f"{then.peak.total_gb:.2f} GB instead of {now.peak.total_gb:.2f} GB, and the parameter all-gather would "
            f"move FP8")
