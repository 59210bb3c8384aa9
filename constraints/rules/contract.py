"""Seed 003's contract rules: what every mapping of a 5T-class MoE must answer before it is a candidate.

A problem opts in with a `contract:` section (problems/contract_spec.py); each rule applies only when
the inputs it needs are given. Rules are bound to their problem (like the user's restrictions), so
their CP-SAT side can evaluate the same Python account per degree tuple.

Three kinds:
- constants given the training pool (N = hardware.gpus): the state needs N ≥ N_min devices, the
  rollout pool is not empty, publishing fits the staleness budget in seconds; posted as a constant;
- degree rules: the hot expert fits its capacity, the EP compute/communication ratio reaches the
  problem's threshold; posted as allowed-assignment tables over the degrees;
- step-time rules (STEP_TIME_RULES): rollout supply ≥ consumption, staleness in versions and in
  tokens, exposed CP share ≤ α. Each depends on the predicted step time, so it has
  `step_time_floor_s(problem, mapping)`, the smallest step time at which it holds with everything else
  fixed, and posts a table of the degree tuples whose Python verdict holds (as the memory rule does).

The step time here is the contract's: the model's predicted step plus the optimizer offload that
lands on the critical path (seed 003 §2).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

from parasol.constraints.core.base import Citation, Constraint, Facts, Family
from parasol.constraints.physics import long_context, publishing, rollout, routing, training_state
from parasol.constraints.physics.dtypes import BF16_BYTES
from parasol.constraints.physics.exchanges import links_for
from parasol.constraints.physics.routing_load import domain_capacity, expert_loads, routing_tokens
from parasol.constraints.physics.step_time import StepTime, step_time_or_none
from parasol.problems.derived import derive
from parasol.problems.mapping import DEGREES, Mapping, RankOrder, Recompute
from parasol.problems.memo import memo_table, memoised
from parasol.problems.model.params import model_params

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from parasol.constraints.core.decision_vars import DecisionVars
    from parasol.problems.loader import Problem
    from parasol.problems.options import MegatronOptions

STEP_TIME_RULES = ("contract-rollout-supply", "contract-staleness-versions", "contract-staleness-tokens",
                   "contract-exposed-cp-share")
"""Rules whose slack depends on the predicted step time; each has step_time_floor_s."""

DISPATCH_BYTES = BF16_BYTES
"""Bytes per element of the EP dispatch and combine: BF16 activations (seed 003 §4, §6: b)."""


def has_contract(problem: Problem) -> bool:
    """Whether the problem file has a `contract:` section."""
    return "contract" in problem.spec.model_fields_set


def total_params(problem: Problem) -> int:
    """The model's total parameters (embedding and head included, MTP excluded), counted once per Problem."""
    return memoised(problem, "total_params", lambda: model_params(problem.model).total)


def mapping_key(mapping: Mapping) -> str:
    """Hashable identity of a fully specified mapping (every field, rank order included)."""
    return mapping.model_dump_json()


def step_for(problem: Problem, mapping: Mapping, options: MegatronOptions | None = None) -> StepTime | None:
    """The predicted step time of `mapping` (None when it cannot be priced), cached per Problem: several
    contract rules and the contract table read it for the same mapping."""
    opts = options if options is not None else problem.spec.framework.options
    cache_key = (mapping_key(mapping), opts.model_dump_json())
    cache = memo_table(problem, "step_for")
    if cache_key not in cache:
        cache[cache_key] = step_time_or_none(problem, mapping, derive(problem.model, mapping), options=opts)
    return cache[cache_key]


def offload_s(problem: Problem, gpus: int) -> float:
    """Seconds of optimizer offload per step on the critical path (0 without offload)."""
    state = problem.spec.contract.state
    if state.offload_gb_s is None or state.offload.value == "none":
        return 0.0
    return training_state.offload_seconds_per_step(total_params(problem), gpus, state.offload_gb_s)


def contract_step_s(problem: Problem, step: StepTime, gpus: int) -> float:
    """The contract's step time: the predicted step plus offload traffic (seed 003 §2)."""
    return step.step_time_s + offload_s(problem, gpus)


def rollout_pool(problem: Problem, gpus: int) -> int | None:
    """Rollout devices when training uses `gpus` (None: no rollout pool in the problem)."""
    r = problem.spec.contract.rollout
    return None if r is None else rollout.rollout_devices(r.devices, r.cluster_devices, gpus)


def publish_for(problem: Problem, gpus: int) -> publishing.PublishTimes | None:
    """Publishing times of one version between the pools (None without a rollout pool)."""
    pool = rollout_pool(problem, gpus)
    if pool is None:
        return None
    p = problem.spec.contract.publishing
    return publishing.publish_times(total_params(problem), gpus, max(pool, 0), p.block, p.scale_bytes,
                                    p.quantize_gb_s, p.reshard_gb_s, p.transfer_gb_s, p.verify_gb_s, p.switch_s)


def state_min_devices(problem: Problem) -> int:
    """Fewest training devices the state needs at the problem's usable HBM, reserve and offload."""
    c = problem.spec.contract.state
    per_param = training_state.on_device_bytes_per_param(problem.training.grad_dtype, c.offload.value != "none")
    budget = training_state.device_budget_bytes(problem.hardware.gpu.usable_hbm_bytes, c.reserve_fraction)
    return training_state.min_devices_for_state(total_params(problem), per_param, budget)


def fixed_all_to_all(problem: Problem, mapping: Mapping) -> routing.FixedSizeAllToAll | None:
    """The fixed-size all-to-all of one EP rank (None without a capacity factor, EP not dividing E, or a
    dropless run on flexible all-to-all)."""
    moe = problem.model.moe
    cf = problem.training.capacity_factor
    if moe is None or moe.num_experts % mapping.ep:
        return None
    if cf is None:
        if not problem.hardware.topology.fixed_size_all_to_all:
            return None
        cf = problem.training.dispatch_headroom
    rounding = problem.spec.contract.routing.per_peer_rounding or 1
    return routing.fixed_size_all_to_all(routing_tokens(mapping)[0], moe.top_k, moe.num_experts, mapping.ep, cf,
                                         problem.model.hidden_size, DISPATCH_BYTES, rounding)


def ep_ratio(problem: Problem, mapping: Mapping) -> tuple[float, float]:
    """(screening ratio 3·f·B/(b·F) at the effective fractions, the same over the fixed-size padding
    amplification): B the EP group's per-device link, F the GEMM precision's dense peak."""
    r = problem.spec.contract.routing
    link = links_for(problem.hardware.topology, mapping).ep
    bandwidth = link.bandwidth_gb_s * 1e9 * (r.effective_bandwidth_fraction or 1.0)
    flops = problem.hardware.gpu.peak_flops(problem.training.precision.value) * (r.effective_flops_fraction or 1.0)
    ratio = routing.ep_compute_comm_ratio(problem.model.moe.expert_intermediate_size, bandwidth, DISPATCH_BYTES,
                                          flops)
    a2a = fixed_all_to_all(problem, mapping) if problem.hardware.topology.fixed_size_all_to_all else None
    return ratio, ratio / a2a.amplification if a2a is not None else ratio


def grids_divide(problem: Problem, mapping: Mapping) -> bool:
    """Whether EP divides the experts and both rank grids (TP·PP·CP, ETP·EP·PP) divide the devices, so the
    groups can be placed."""
    m = mapping
    return (problem.model.moe.num_experts % m.ep == 0 and m.gpus % (m.tp * m.pp * m.cp) == 0
            and m.gpus % (m.expert_tp * m.ep * m.pp) == 0)


class ContractRule(Constraint):
    """A seed-003 rule bound to its problem; `measure` is the slack both sides read (None: the mapping
    cannot be judged by this rule, e.g. it has no step time; other rules report why)."""

    family = Family.contract
    pack = None
    solver_judges = "row"

    def __init__(self, problem: Problem) -> None:
        self.problem = problem

    def applies(self, problem: Problem) -> bool:
        return has_contract(problem) and self.given(problem)

    def given(self, problem: Problem) -> bool:
        """Whether the problem gives the inputs this rule needs."""
        return True

    @abstractmethod
    def measure(self, mapping: Mapping, options: MegatronOptions | None) -> float | None:
        """Signed slack of `mapping` in `unit`; None when the rule cannot judge it."""

    def slack(self, f: Facts) -> float:
        value = self.measure(f.mapping, f.options)
        return 0.0 if value is None else value

    def in_force(self, f: Facts) -> bool:
        """A mapping this rule cannot judge (measure None) is reported with slack 0, not binding."""
        return self.measure(f.mapping, f.options) is not None

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        """Allow the degree tuples whose Python verdict holds, per recompute choice."""
        post_table(model, v, enforce, lambda m: (self.measure(m, v.options) or 0.0) >= 0)


def post_table(model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar,
               holds: Callable[[Mapping], bool]) -> None:
    """Post `holds` as allowed assignments of the seven degrees per recompute flag. Mappings carry the
    model's run sizes and the fixed layout of the compiled problem (v.memory_fits when it has one); a
    tuple its screen rejects is forbidden by other rules of the same model anyway. The rank order is the
    compiled mapping's (consts rank_order_dp_last), Megatron's default otherwise."""
    oracle = v.memory_fits
    layout = getattr(oracle, "layout", None)
    screen = getattr(oracle, "screen", None)
    order = RankOrder.dp_last if v.consts.get("rank_order_dp_last") else RankOrder.pp_last
    for option, flag in v.recompute.items():
        allowed = []
        for values in v.table_tuples(option):
            degrees = dict(zip(DEGREES, values, strict=True))
            if screen is not None and not screen(degrees, option):
                continue
            mapping = Mapping(gpus=v.gpus, gbs=v.gbs, seq_len=v.seq_len, recompute=Recompute(option), layout=layout,
                              rank_order=order, **degrees)
            if holds(mapping):
                allowed.append(values)
        if allowed:
            model.AddAllowedAssignments([v.degree[n] for n in DEGREES], allowed).OnlyEnforceIf([enforce, flag])
        else:
            model.AddBoolOr([enforce.Not(), flag.Not()])


class ConstantRule(ContractRule):
    """A rule that depends on the training pool size only: posted as a constant."""

    @abstractmethod
    def measure_gpus(self, gpus: int) -> float:
        """Slack for a training pool of `gpus` devices."""

    def measure(self, mapping: Mapping, options: MegatronOptions | None) -> float | None:
        return self.measure_gpus(mapping.gpus)

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        if self.measure_gpus(v.gpus) < 0:
            model.AddBoolOr([enforce.Not()])


class StateMinDevices(ConstantRule):
    """The training pool holds the training state: N ≥ ⌈P·bytes/param / ((1 − r)·usable HBM)⌉."""

    id = "contract-state-min-devices"
    citation = Citation("seed 003 §2 (模型状态总账: 16 B/param, 80 TB for 5T; 64 devices cannot hold it)")
    unit = "devices"
    summary = "training devices >= state bytes / ((1 - reserve) · usable HBM)"

    def measure_gpus(self, gpus: int) -> float:
        return float(gpus - state_min_devices(self.problem))

    def message(self, f: Facts) -> str:
        p = self.problem
        c = p.spec.contract.state
        per_param = training_state.on_device_bytes_per_param(p.training.grad_dtype, c.offload.value != "none")
        total = total_params(p) * per_param
        budget = training_state.device_budget_bytes(p.hardware.gpu.usable_hbm_bytes, c.reserve_fraction)
        need = state_min_devices(p)
        verdict = "holds" if f.mapping.gpus >= need else "cannot hold it"
        return (f"training state {total / 1e12:.2f} TB ({per_param} B/param × {total_params(p):,} parameters) over "
                f"{f.mapping.gpus:,} devices is {total / f.mapping.gpus / 1e9:,.1f} GB each against a budget of "
                f"{budget / 1e9:.1f} GB (usable HBM × (1 − reserve {c.reserve_fraction or 0:g})): needs at least "
                f"{need:,} devices before activations; {f.mapping.gpus:,} {verdict}")


class RolloutPoolExists(ConstantRule):
    """Splitting a cluster total leaves the rollout pool at least one device."""

    id = "contract-rollout-pool-exists"
    citation = Citation("seed 003 §8 (异步、非共卡 rollout: two separate pools)")
    unit = "devices"
    summary = "rollout devices = cluster_devices − training devices >= 1"

    def given(self, problem: Problem) -> bool:
        r = problem.spec.contract.rollout
        return r is not None and r.cluster_devices is not None

    def measure_gpus(self, gpus: int) -> float:
        return float(rollout_pool(self.problem, gpus) - 1)

    def message(self, f: Facts) -> str:
        total = self.problem.spec.contract.rollout.cluster_devices
        return (f"cluster of {total:,} devices: training uses {f.mapping.gpus:,}, leaving "
                f"{total - f.mapping.gpus:,} for the rollout pool")


class PublishedWithinSeconds(ConstantRule):
    """One version is published within the staleness budget in seconds."""

    id = "contract-staleness-seconds"
    citation = Citation("seed 003 §7-§8 (publish latency = quantize + reshard + transfer + verify + switch; "
                        "time staleness within budget)")
    unit = "s"
    summary = "publish latency <= rollout.max_seconds"

    def given(self, problem: Problem) -> bool:
        r = problem.spec.contract.rollout
        return r is not None and r.max_seconds is not None and _publish_timed(problem)

    def measure_gpus(self, gpus: int) -> float:
        return self.problem.spec.contract.rollout.max_seconds - publish_for(self.problem, gpus).total_s

    def message(self, f: Facts) -> str:
        times = publish_for(self.problem, f.mapping.gpus)
        parts = ", ".join(f"{k} {s:.1f} s" for k, s in times.stages.items())
        return (f"publishing one version takes {times.total_s:.1f} s ({parts}) against a budget of "
                f"{self.problem.spec.contract.rollout.max_seconds:g} s")


def _publish_timed(problem: Problem) -> bool:
    """Whether every publishing stage has a rate (so the latency is known)."""
    p = problem.spec.contract.publishing
    return problem.spec.contract.rollout is not None and None not in (
        p.quantize_gb_s, p.reshard_gb_s, p.transfer_gb_s, p.verify_gb_s, p.switch_s)


class ExpertCapacity(ContractRule):
    """With a capacity factor, the hot expert's expected load under the skew model fits its slots."""

    id = "contract-expert-capacity"
    citation = Citation("seed 003 §4 (C = ⌈CF·k·T/E⌉; overflow must be located to expert and rank); "
                        "Megatron-LM megatron/core/transformer/moe/moe_utils.py:248-266")
    unit = "assignments"
    summary = "hot expert load <= EP·⌈CF·k·T_rank/E⌉ slots per routing domain"

    def given(self, problem: Problem) -> bool:
        return problem.model.moe is not None and problem.training.capacity_factor is not None

    def measure(self, mapping: Mapping, options: MegatronOptions | None) -> float | None:
        if self.problem.model.moe.num_experts % mapping.ep:
            return None
        return domain_capacity(self.problem, mapping) - max(expert_loads(self.problem, mapping))

    def message(self, f: Facts) -> str:
        m = f.mapping
        if self.problem.model.moe.num_experts % m.ep:
            return "EP does not divide the experts (expert-divisible-by-ep reports it)"
        loads = expert_loads(self.problem, m)
        stats = routing.load_stats(loads)
        cap = domain_capacity(self.problem, m)
        hot = routing.hot_rank(loads, m.ep)
        out = routing.capacity_outcome(loads, cap)
        return (f"{routing_tokens(m)[1]:,} tokens per routing domain: expert load min {stats.min:,.1f} / mean "
                f"{stats.mean:,.1f} / p95 {stats.p95:,.1f} / max {stats.max:,.1f} (expert {stats.hot_expert}, "
                f"on EP rank {hot.rank}) against {cap:,} slots; {out.dropped:,.1f} assignments dropped "
                f"({out.drop_rate:.2%})")


class EPComputeCommRatio(ContractRule):
    """The EP compute/communication ratio reaches the problem's threshold."""

    id = "contract-ep-compute-comm-ratio"
    citation = Citation("seed 003 §6 (MegaScale-MoE: 3·f·B/(b·F) with effective bandwidth and throughput)")
    unit = "ratio"
    summary = "3·f·B_eff/(b·F_eff) / fixed-size amplification >= routing.min_ep_compute_comm_ratio"

    def given(self, problem: Problem) -> bool:
        return problem.model.moe is not None and problem.spec.contract.routing.min_ep_compute_comm_ratio is not None

    def measure(self, mapping: Mapping, options: MegatronOptions | None) -> float | None:
        if mapping.ep == 1 or not grids_divide(self.problem, mapping):
            return None
        return ep_ratio(self.problem, mapping)[1] - self.problem.spec.contract.routing.min_ep_compute_comm_ratio

    def message(self, f: Facts) -> str:
        r = self.problem.spec.contract.routing
        if self.measure(f.mapping, f.options) is None:
            return ("no EP communication (EP 1), or EP does not divide the experts or the grids the devices "
                    "(other rules report it)")
        ratio, padded = ep_ratio(self.problem, f.mapping)
        return (f"EP compute/communication ratio 3·f·B/(b·F) = {ratio:.3f} at effective shares "
                f"(FLOPs {r.effective_flops_fraction or 1:g}, link {r.effective_bandwidth_fraction or 1:g}), "
                f"{padded:.3f} after fixed-size padding, against a required {r.min_ep_compute_comm_ratio:g}")


class StepTimeRule(ContractRule):
    """A rule on the contract step time; `floor` gives the smallest step time at which it holds."""

    solver_judges = "cut"

    def needs_ledger(self) -> bool:
        """Judged only where the step time is: a layout covering the blocks (as the ledger needs)."""
        return True

    @abstractmethod
    def floor_at(self, mapping: Mapping, step: StepTime) -> float:
        """Smallest contract step time at which the rule holds, everything else fixed."""

    def step_time_floor_s(self, problem: Problem, mapping: Mapping) -> float:
        """Smallest predicted step time (offload excluded) at which the rule holds for `mapping`."""
        step = step_for(problem, mapping)
        if step is None:
            return 0.0
        return self.floor_at(mapping, step) - offload_s(problem, mapping.gpus)

    def measure(self, mapping: Mapping, options: MegatronOptions | None) -> float | None:
        step = step_for(self.problem, mapping, options)
        if step is None:
            return None
        return self.measure_step(mapping, step, contract_step_s(self.problem, step, mapping.gpus))

    @abstractmethod
    def measure_step(self, mapping: Mapping, step: StepTime, step_s: float) -> float:
        """Slack at contract step time `step_s`."""

    def message(self, f: Facts) -> str:
        step = step_for(self.problem, f.mapping, f.options)
        if step is None:
            return "no step time for this mapping (other rules say why)"
        return self.message_step(f.mapping, step, contract_step_s(self.problem, step, f.mapping.gpus))

    @abstractmethod
    def message_step(self, mapping: Mapping, step: StepTime, step_s: float) -> str:
        """What the rule says at contract step time `step_s`, with its numbers."""


class RolloutSupply(StepTimeRule):
    """Rollout supply of accepted tokens keeps up with training consumption."""

    id = "contract-rollout-supply"
    citation = Citation("seed 003 §8 (供给约束: R_supply ≥ R_consume = GBS·S / T_step)")
    unit = "tokens/s"
    summary = "rollout devices · accepted tokens/s/device >= GBS·S / step time"

    def given(self, problem: Problem) -> bool:
        r = problem.spec.contract.rollout
        return r is not None and r.accepted_tokens_per_s_per_device is not None and (
            r.devices is not None or r.cluster_devices is not None)

    def supply(self, gpus: int) -> float:
        """Accepted tokens/s of the rollout pool when training uses `gpus`."""
        rate = self.problem.spec.contract.rollout.accepted_tokens_per_s_per_device
        return rollout.supply_tokens_per_s(rollout_pool(self.problem, gpus), rate)

    def measure_step(self, mapping: Mapping, step: StepTime, step_s: float) -> float:
        tokens = mapping.gbs * mapping.seq_len
        return self.supply(mapping.gpus) - rollout.consumption_tokens_per_s(tokens, step_s)

    def floor_at(self, mapping: Mapping, step: StepTime) -> float:
        return rollout.step_floor_for_supply(mapping.gbs * mapping.seq_len, self.supply(mapping.gpus))

    def message_step(self, m: Mapping, step: StepTime, step_s: float) -> str:
        supply = self.supply(m.gpus)
        consume = rollout.consumption_tokens_per_s(m.gbs * m.seq_len, step_s)
        pool = rollout_pool(self.problem, m.gpus)
        rate = self.problem.spec.contract.rollout.accepted_tokens_per_s_per_device
        need = rollout.devices_needed(m.gbs * m.seq_len, step_s, rate)
        relation = ">=" if supply >= consume else "<"
        tail = "" if supply >= consume else (f"; training would wait for samples (real step "
                                             f"{rollout.starved_step_s(m.gbs * m.seq_len, step_s, supply):,.1f} s) "
                                             f"unless the rollout pool grows to {need:,} devices (+{need - pool:,})")
        return (f"rollout supply {supply:,.0f} tokens/s ({pool:,} devices × {rate:g}) {relation} training consumption "
                f"{consume:,.0f} tokens/s ({m.gbs}·{m.seq_len:,} tokens per {step_s:,.2f} s step){tail}")


class StalenessVersions(StepTimeRule):
    """Training advances at most max_versions versions while one version is published."""

    id = "contract-staleness-versions"
    citation = Citation("seed 003 §8 (版本陈旧度 within budget; 发布约束)")
    unit = "versions"
    summary = "publish latency / step time <= rollout.max_versions"

    def given(self, problem: Problem) -> bool:
        r = problem.spec.contract.rollout
        return r is not None and r.max_versions is not None and _publish_timed(problem)

    def measure_step(self, mapping: Mapping, step: StepTime, step_s: float) -> float:
        publish = publish_for(self.problem, mapping.gpus).total_s
        return self.problem.spec.contract.rollout.max_versions - rollout.staleness_versions(publish, step_s)

    def floor_at(self, mapping: Mapping, step: StepTime) -> float:
        budget = self.problem.spec.contract.rollout.max_versions
        publish = publish_for(self.problem, mapping.gpus).total_s
        return publish / budget if budget > 0 else math.inf

    def message_step(self, mapping: Mapping, step: StepTime, step_s: float) -> str:
        publish = publish_for(self.problem, mapping.gpus).total_s
        return (f"publishing takes {publish:,.1f} s = {rollout.staleness_versions(publish, step_s):.2f} steps of "
                f"{step_s:,.2f} s against a budget of {self.problem.spec.contract.rollout.max_versions:g} versions")


class StalenessTokens(StepTimeRule):
    """Training consumes at most max_tokens tokens while one version is published."""

    id = "contract-staleness-tokens"
    citation = Citation("seed 003 §8 (token 陈旧度 within budget)")
    unit = "tokens"
    summary = "publish latency · GBS·S / step time <= rollout.max_tokens"

    def given(self, problem: Problem) -> bool:
        r = problem.spec.contract.rollout
        return r is not None and r.max_tokens is not None and _publish_timed(problem)

    def measure_step(self, mapping: Mapping, step: StepTime, step_s: float) -> float:
        publish = publish_for(self.problem, mapping.gpus).total_s
        tokens = rollout.staleness_tokens(publish, mapping.gbs * mapping.seq_len, step_s)
        return self.problem.spec.contract.rollout.max_tokens - tokens

    def floor_at(self, mapping: Mapping, step: StepTime) -> float:
        publish = publish_for(self.problem, mapping.gpus).total_s
        return publish * mapping.gbs * mapping.seq_len / self.problem.spec.contract.rollout.max_tokens

    def message_step(self, mapping: Mapping, step: StepTime, step_s: float) -> str:
        publish = publish_for(self.problem, mapping.gpus).total_s
        tokens = rollout.staleness_tokens(publish, mapping.gbs * mapping.seq_len, step_s)
        return (f"{tokens:,.0f} tokens are trained while one version is published ({publish:,.1f} s at "
                f"{mapping.gbs * mapping.seq_len / step_s:,.0f} tokens/s) against a budget of "
                f"{self.problem.spec.contract.rollout.max_tokens:,.0f}")


class ExposedCPShare(StepTimeRule):
    """Exposed CP communication is at most α of the step."""

    id = "contract-exposed-cp-share"
    citation = Citation("seed 003 §5 (exposed CP communication ≤ α · step time, α the team's own budget)")
    unit = "share of step"
    summary = "exposed CP seconds / step time <= long_context.max_exposed_cp_share"

    def given(self, problem: Problem) -> bool:
        return problem.spec.contract.long_context.max_exposed_cp_share is not None

    def measure_step(self, mapping: Mapping, step: StepTime, step_s: float) -> float:
        alpha = self.problem.spec.contract.long_context.max_exposed_cp_share
        return alpha - long_context.exposed_share(step.breakdown["cp"], step_s)

    def floor_at(self, mapping: Mapping, step: StepTime) -> float:
        alpha = self.problem.spec.contract.long_context.max_exposed_cp_share
        return long_context.step_floor_for_share(step.breakdown["cp"], alpha)

    def message_step(self, mapping: Mapping, step: StepTime, step_s: float) -> str:
        alpha = self.problem.spec.contract.long_context.max_exposed_cp_share
        return (f"exposed CP communication {step.breakdown['cp']:,.3f} s is "
                f"{long_context.exposed_share(step.breakdown['cp'], step_s):.2%} of the {step_s:,.2f} s step "
                f"(CP {mapping.cp}) against α = {alpha:.2%}")


CONTRACT_RULES: tuple[type[ContractRule], ...] = (
    StateMinDevices, RolloutPoolExists, ExpertCapacity, EPComputeCommRatio, PublishedWithinSeconds,
    RolloutSupply, StalenessVersions, StalenessTokens, ExposedCPShare,
)


def contract_constraints(problem: Problem) -> tuple[ContractRule, ...]:
    """The contract rules that apply to `problem`, bound to it (empty without a `contract:` section)."""
    if not has_contract(problem):
        return ()
    return tuple(rule for rule in (cls(problem) for cls in CONTRACT_RULES) if rule.active(problem))
