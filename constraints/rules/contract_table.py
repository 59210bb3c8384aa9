"""Seed 003 §9's contract table for one mapping: ten domains, each with the quantities it records, the
verifiable criterion, a verdict and one sentence with the numbers.

Row format (shared with the report writers): {"domain", "recorded": [{"name", "value", "unit"}],
"check", "verdict": "holds" | "fails" | "not checked", "detail", "source"}. Verdicts of criteria that a
contract rule judges are that rule's verdict; "not checked" names the measurement parasol cannot make
or the input the problem does not give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parasol.constraints.physics import long_context, publishing, rollout, routing, training_state
from parasol.constraints.physics.exchanges import links_for
from parasol.constraints.physics.goodput import Goodput, goodput
from parasol.constraints.physics.memory import state_bytes_per_param
from parasol.constraints.physics.routing_load import domain_capacity, expert_loads, routing_tokens
from parasol.constraints.rules import contract as c
from parasol.problems.model.architecture import BlockKind
from parasol.problems.model.params import expert_params, model_params

if TYPE_CHECKING:
    from parasol.constraints.core.base import Facts, Verdict
    from parasol.constraints.physics.step_time import StepTime
    from parasol.problems.loader import Problem
    from parasol.problems.rank_groups import GroupPlacement

DOMAINS = ("model structure", "long context", "training state", "MoE routing", "EP communication",
           "compute efficiency", "precision", "weight publishing", "asynchronous coordination", "topology")
HOLDS, FAILS, NOT_CHECKED = "holds", "fails", "not checked"
PARAM_TOLERANCE = 0.01
"""Recomputed total parameters must land within 1% of the problem's published target."""


def rec(name: str, value: float | int | str | None, unit: str = "") -> dict:
    """One recorded quantity (floats rounded to 6 significant digits for stable output)."""
    if isinstance(value, float):
        value = float(f"{value:.6g}")
    return {"name": name, "value": "n/a" if value is None else value, "unit": unit}


def row(domain: str, recorded: list[dict], check: str, verdict: str, detail: str, source: str) -> dict:
    """One row of the table."""
    return {"domain": domain, "recorded": recorded, "check": check, "verdict": verdict, "detail": detail,
            "source": source}


@dataclass(frozen=True)
class TableInput:
    """What the rows read: the problem, the mapping's facts, its step time, group placement and verdicts."""

    problem: Problem
    facts: Facts
    step: StepTime | None
    groups: tuple[GroupPlacement, ...]
    verdicts: dict[str, Verdict]

    @property
    def mapping(self):  # noqa: ANN201 - Mapping
        return self.facts.mapping

    def rule(self, rule_id: str) -> Verdict | None:
        """The verdict of a contract rule when it judged this mapping."""
        return self.verdicts.get(rule_id)

    def step_s(self) -> float | None:
        """The contract step time (predicted step plus offload), None without a step time."""
        return None if self.step is None else c.contract_step_s(self.problem, self.step, self.mapping.gpus)


def combine(verdicts: list[Verdict | None]) -> str | None:
    """fails if any given verdict fails, holds if some hold, None when no rule judged."""
    given = [v for v in verdicts if v is not None]
    if not given:
        return None
    return HOLDS if all(v.holds for v in given) else FAILS


def model_row(t: TableInput) -> dict:
    """Total, active and per-layer work recomputed from the shape (seed 003 §1, §3)."""
    model = t.problem.model
    counts = model_params(model)
    moe = model.moe
    att = model.attention
    recorded = [rec("total parameters", counts.total), rec("active parameters per token", counts.active_with_embedding),
                rec("layers", model.num_layers), rec("hidden size", model.hidden_size),
                rec("attention heads", att.num_heads),
                rec("KV heads", getattr(att, "num_kv_heads", att.num_heads))]
    if moe is not None:
        recorded += [rec("routed experts", moe.num_experts), rec("top-k", moe.top_k),
                     rec("expert intermediate size", moe.expert_intermediate_size),
                     rec("shared experts", moe.num_shared_experts),
                     rec("assignments per token", moe.top_k, "assignments"),
                     rec("non-routed share", 1 - routed_params(t.problem) / counts.total)]
    target = model.published.total
    check = f"total parameters recomputed from the shape within {PARAM_TOLERANCE:.0%} of the target"
    if not target:
        return row(DOMAINS[0], recorded, check, NOT_CHECKED,
                   "the model states no published total to check the recomputed count against", "seed 003 §1, §3")
    off = counts.total / target - 1
    verdict = HOLDS if abs(off) <= PARAM_TOLERANCE else FAILS
    return row(DOMAINS[0], recorded + [rec("target total", int(target))], check, verdict,
               f"{counts.total:,} parameters recomputed vs a target of {int(target):,} ({off:+.2%}); "
               f"{counts.active_with_embedding:,} active per token", "seed 003 §1, §3")


def routed_params(problem: Problem) -> int:
    """Parameters of the routed experts: E · P_expert per MoE block."""
    moe = problem.model.moe
    if moe is None:
        return 0
    blocks = sum(1 for b in problem.model.blocks if b.mlp == BlockKind.moe)
    return blocks * moe.num_experts * expert_params(problem.model)


SEQUENCE_TERMS = ("activations", "recompute working set", "MoE dispatch buffer")
"""Ledger terms that scale with the tokens a rank holds, so with 1/CP."""


def cp_needed(t: TableInput) -> int | str:
    """Smallest CP at which the heaviest rank's sequence-proportional memory fits beside the rest within
    the budget, scaling those terms by CP/CP' (seed 003 §5: CP is required where activations do not fit)."""
    p, m = t.problem, t.mapping
    peak = t.facts.ledger.peak
    seq = sum(term.bytes for term in peak.terms if term.name in SEQUENCE_TERMS)
    budget = training_state.device_budget_bytes(p.hardware.gpu.usable_hbm_bytes, p.spec.contract.state.reserve_fraction)
    room = budget - (peak.total_bytes - seq)
    if room <= 0:
        return "none: the rest of the state alone exceeds the budget"
    return max(1, math.ceil(seq * m.cp / room))


def long_context_row(t: TableInput) -> dict:
    """A real long sequence, its per-rank share under CP, KV bytes and exposed CP (seed 003 §5)."""
    p, m = t.problem, t.mapping
    att = p.model.attention
    kv_heads = getattr(att, "num_kv_heads", att.num_heads)
    head_dim = getattr(att, "head_dim", 0)
    real = long_context.is_real_long_sequence(m.seq_len, p.model.max_context, p.training.packed_sequences)
    recorded = [rec("sequence length", m.seq_len, "tokens"), rec("target context", p.model.max_context, "tokens"),
                rec("packed short sequences", str(p.training.packed_sequences).lower()),
                rec("tokens per step", m.gbs * m.seq_len, "tokens"), rec("CP", m.cp),
                rec("local sequence S/CP", long_context.local_sequence(m.seq_len, m.cp), "tokens"),
                rec("causal attention pairs per sequence", long_context.causal_attention_pairs(m.seq_len))]
    if head_dim:
        recorded.append(rec("KV per rank per layer", long_context.kv_bytes_per_rank_layer(
            m.seq_len, m.cp, m.tp, kv_heads, head_dim) / 1e9, "GB"))
    ledger = t.facts.ledger
    if ledger is not None:
        acts = sum(term.gb for term in ledger.peak.terms if term.name in SEQUENCE_TERMS)
        recorded.append(rec("sequence-proportional memory on the heaviest rank", acts, "GB"))
        recorded.append(rec("smallest CP whose activations fit (estimate)", cp_needed(t), "CP"))
    alpha = p.spec.contract.long_context.max_exposed_cp_share
    step_s = t.step_s()
    if t.step is not None:
        recorded += [rec("exposed CP communication", t.step.breakdown["cp"], "s"),
                     rec("exposed CP share", long_context.exposed_share(t.step.breakdown["cp"], step_s))]
    check = ("trains on a real target-length sequence (not packed short ones); CP large enough for the activations "
             "to fit; exposed CP ≤ α · step time")
    if alpha is not None:
        check += f" (α = {alpha:g})"
    cp_rule = t.rule("contract-exposed-cp-share")
    if not real:
        reason = ("no target context in the model" if p.model.max_context is None else
                  f"S = {m.seq_len:,} with packed={p.training.packed_sequences} is not one real "
                  f"{p.model.max_context:,}-token sequence")
        return row(DOMAINS[1], recorded, check, FAILS if p.model.max_context else NOT_CHECKED, reason,
                   "seed 003 §5")
    need = cp_needed(t) if t.facts.ledger is not None else None
    if isinstance(need, int) and m.cp < need:
        return row(DOMAINS[1], recorded, check, FAILS,
                   f"CP {m.cp} leaves the heaviest rank's activations over the budget: CP ≥ {need} is needed "
                   f"(an estimate scaling the sequence-proportional memory by 1/CP)", "seed 003 §5")
    if cp_rule is not None:
        return row(DOMAINS[1], recorded, check, combine([cp_rule]), cp_rule.message, "seed 003 §5")
    exposure = "" if t.step is None else f"; exposed CP {t.step.breakdown['cp']:.3f} s of {step_s:.2f} s"
    return row(DOMAINS[1], recorded, check, HOLDS,
               f"one real {m.seq_len:,}-token sequence at CP {m.cp} ({m.seq_len // m.cp:,} tokens per rank){exposure}; "
               "no α in the problem, so the exposure is reported, not bounded", "seed 003 §5")


def state_row(t: TableInput) -> dict:
    """The state ledger against the devices and the heaviest rank against the budget (seed 003 §2)."""
    p, m = t.problem, t.mapping
    params = c.total_params(p)
    s = p.spec.contract.state
    budget = training_state.device_budget_bytes(p.hardware.gpu.usable_hbm_bytes, s.reserve_fraction)
    per_param = state_bytes_per_param(p.training.grad_dtype)
    need = c.state_min_devices(p)
    recorded = [rec("state bytes per parameter", per_param, "B"),
                rec("training state (BF16 grads, 16 B/param)", params * state_bytes_per_param("bf16") / 1e12, "TB"),
                rec("training state (FP32 grads, 18 B/param)", params * state_bytes_per_param("fp32") / 1e12, "TB"),
                rec("state per device if spread evenly", params * per_param / m.gpus / 1e9, "GB"),
                rec("usable HBM", p.hardware.gpu.usable_hbm_gb, "GB"),
                rec("reserve fraction", s.reserve_fraction if s.reserve_fraction is not None else "none"),
                rec("device budget", budget / 1e9, "GB"), rec("minimum devices for the state", need, "devices"),
                rec("training devices", m.gpus, "devices"), rec("offload", s.offload.value)]
    if s.offload.value != "none":
        recorded.append(rec("offload traffic on the critical path", c.offload_s(p, m.gpus), "s/step"))
    ledger = t.facts.ledger
    check = "training devices ≥ minimum for the state, and the heaviest rank ≤ (1 − r) · usable HBM"
    if ledger is None:
        return row(DOMAINS[2], recorded, check, NOT_CHECKED,
                   "no memory ledger: the layout does not cover the blocks with PP·VPP stages", "seed 003 §2")
    peak = ledger.peak
    recorded.append(rec("peak memory of the heaviest rank", peak.total_gb, "GB"))
    fits = peak.total_bytes <= budget and m.gpus >= need
    detail = (f"{m.gpus:,} devices vs at least {need:,} for the state; heaviest rank (stage {peak.stage}) "
              f"{peak.total_gb:,.1f} GB vs a budget of {budget / 1e9:,.1f} GB")
    if m.gpus < need:
        detail += (f": {params * per_param / 1e12:,.1f} TB of state is {params * per_param / m.gpus / 1e12:,.2f} TB per "
                   "device, so this scale validates semantics, communication patterns and the performance model, "
                   "not the full training state")
    return row(DOMAINS[2], recorded, check, HOLDS if fits else FAILS, detail, "seed 003 §2")


def routing_row(t: TableInput) -> dict:
    """Expert and rank loads under the skew model, capacity use and drops (seed 003 §4)."""
    p, m = t.problem, t.mapping
    moe = p.model.moe
    check = "hot-expert load ≤ expert capacity under the skew model; overflow located to expert and EP rank"
    if moe is None:
        return row(DOMAINS[3], [], check, NOT_CHECKED, "dense model: no routing", "seed 003 §4")
    if moe.num_experts % m.ep:
        return row(DOMAINS[3], [], check, NOT_CHECKED, f"EP {m.ep} does not divide {moe.num_experts} experts",
                   "seed 003 §4")
    per_rank, domain = routing_tokens(m)
    loads = expert_loads(p, m)
    stats = routing.load_stats(loads)
    hot = routing.hot_rank(loads, m.ep)
    skew = p.spec.contract.routing
    recorded = [rec("skew model", skew.skew.value + (f" s={skew.zipf_exponent:g}" if skew.zipf_exponent else "")),
                rec("tokens per routing domain", domain, "tokens"),
                rec("assignments", routing.assignments(domain, moe.top_k), "assignments"),
                rec("expert load min", stats.min, "assignments"), rec("expert load mean", stats.mean, "assignments"),
                rec("expert load p95", stats.p95, "assignments"), rec("expert load max", stats.max, "assignments"),
                rec("hot expert", stats.hot_expert), rec("expert imbalance max/mean", stats.imbalance),
                rec("hot EP rank", hot.rank), rec("hot rank load", hot.load, "assignments"),
                rec("rank imbalance max/mean", hot.imbalance)]
    cf = p.training.capacity_factor
    if cf is None:
        return row(DOMAINS[3], recorded, check, HOLDS,
                   f"dropless routing (no capacity factor): nothing is dropped; hot expert {stats.hot_expert} gets "
                   f"{stats.max:,.1f} assignments ({stats.imbalance:.2f}× the mean {stats.mean:,.1f}), hot rank "
                   f"{hot.rank} {hot.imbalance:.2f}× the mean rank", "seed 003 §4")
    cap = domain_capacity(p, m)
    out = routing.capacity_outcome(loads, cap)
    recorded += [rec("capacity factor", cf),
                 rec("capacity per expert per source rank",
                     routing.expert_capacity(per_rank, moe.top_k, moe.num_experts, cf), "slots"),
                 rec("capacity per expert per routing domain", cap, "slots"),
                 rec("used share of slots", out.used_share), rec("padded slots", out.padded_slots, "slots"),
                 rec("dropped assignments", out.dropped, "assignments"), rec("drop rate", out.drop_rate)]
    rule = t.rule("contract-expert-capacity")
    verdict = combine([rule]) or (HOLDS if out.dropped == 0 else FAILS)
    detail = (f"mean {stats.mean:,.1f} assignments per expert over {cap:,} slots ({out.used_share:.1%} used, "
              f"{1 - out.used_share:.1%} padding); hot expert {stats.hot_expert} {stats.max:,.1f} on EP rank {hot.rank}; "
              f"{out.dropped:,.1f} dropped ({out.drop_rate:.2%})")
    return row(DOMAINS[3], recorded, check, verdict, detail, "seed 003 §4")


def ep_row(t: TableInput) -> dict:
    """Dispatch/combine bytes, fixed-size padding and the compute/communication ratio (seed 003 §4, §6)."""
    p, m = t.problem, t.mapping
    check = "fixed-size all-to-all waste quantified (padding bytes, amplification); 3·f·B/(b·F) ≥ threshold"
    if p.model.moe is None or m.ep == 1:
        return row(DOMAINS[4], [rec("EP", m.ep)], check, NOT_CHECKED, "no expert parallelism in this mapping",
                   "seed 003 §4, §6")
    if p.model.moe.num_experts % m.ep or not t.groups:
        return row(DOMAINS[4], [rec("EP", m.ep)], check, NOT_CHECKED,
                   "EP does not divide the experts or the grids do not divide the devices", "seed 003 §4, §6")
    link = links_for(p.hardware.topology, m).ep
    ratio, padded_ratio = c.ep_ratio(p, m)
    r = p.spec.contract.routing
    recorded = [rec("EP", m.ep), rec("EP link level", link.level.value), rec("EP link bandwidth", link.bandwidth_gb_s,
                                                                             "GB/s per device"),
                rec("effective FLOPs share", r.effective_flops_fraction or "peak"),
                rec("effective bandwidth share", r.effective_bandwidth_fraction or "link figure"),
                rec("compute/communication ratio 3·f·B/(b·F)", ratio),
                rec("ratio after fixed-size padding", padded_ratio)]
    a2a = c.fixed_all_to_all(p, m)
    fixed = p.hardware.topology.fixed_size_all_to_all
    if a2a is not None:
        recorded += [rec("ideal dispatch bytes per rank", a2a.ideal_bytes / 1e6, "MB"),
                     rec("padded dispatch bytes per rank" if fixed else "capacity-padded dispatch bytes per rank",
                         a2a.padded_bytes / 1e6, "MB"),
                     rec("padding bytes per rank", a2a.padding_bytes / 1e6, "MB"),
                     rec("per-peer buffer", a2a.per_peer_bytes / 1e6, "MB"),
                     rec("amplification over ideal", a2a.amplification)]
    if t.step is not None:
        recorded.append(rec("exposed EP communication", t.step.breakdown["ep"], "s"))
    rule = t.rule("contract-ep-compute-comm-ratio")
    waste = (f"fixed-size all-to-all sends {a2a.padded_bytes / 1e6:,.1f} MB per rank per dispatch for "
             f"{a2a.ideal_bytes / 1e6:,.1f} MB of assignments ({a2a.amplification:.3f}×)"
             if a2a is not None and fixed else "variable-size all-to-all: bytes follow the routing")
    if rule is not None:
        return row(DOMAINS[4], recorded, check, combine([rule]), f"{waste}; {rule.message}", "seed 003 §4, §6")
    return row(DOMAINS[4], recorded, check, HOLDS,
               f"{waste}; ratio {padded_ratio:.3f} reported (no threshold in the problem)", "seed 003 §4, §6")


def goodput_of(problem: Problem, step: StepTime | None, gpus: int) -> Goodput | None:
    """The goodput account when the problem gives the failure model and the mapping has a step time
    (throughput at the contract step time, offload included)."""
    g = problem.spec.contract.goodput
    if step is None or None in (g.device_mtbf_hours, g.storage_gb_s, g.restart_s):
        return None
    tokens_per_s = step.tokens_per_s * step.step_time_s / c.contract_step_s(problem, step, gpus)
    return goodput(tokens_per_s, gpus, g.device_mtbf_hours, training_state.checkpoint_bytes(c.total_params(problem)),
                   g.storage_gb_s, g.restart_s)


def compute_row(t: TableInput) -> dict:
    """Throughput, MFU/HFU, grouped-GEMM shape, compute vs waiting, goodput (seed 003 §9; seed 000)."""
    p, m = t.problem, t.mapping
    check = "compute inefficiency separated from communication waiting; effective tokens/s after failures"
    if t.step is None:
        return row(DOMAINS[5], [], check, NOT_CHECKED, "no step time for this mapping (the rules say why)",
                   "seed 003 §9; seed 000 §最后看长时间的有效吞吐")
    s = t.step
    waiting = sum(v for k, v in s.breakdown.items() if k not in ("compute", "bubble"))
    recorded = [rec("step time", s.step_time_s, "s"), rec("tokens/s", s.tokens_per_s, "tokens/s"),
                rec("tokens/s per device", s.tokens_per_s_per_gpu, "tokens/s"), rec("MFU", s.mfu), rec("HFU", s.hfu),
                rec("compute", s.breakdown["compute"], "s"), rec("exposed communication", waiting, "s"),
                rec("pipeline bubble", s.breakdown["bubble"], "s"),
                rec("grouped-GEMM loss", s.grouped_gemm_loss_s, "s")]
    if p.model.moe is not None and t.facts.derived.assignments_per_expert is not None:
        recorded.append(rec("grouped-GEMM rows per expert per microbatch",
                            float(t.facts.derived.assignments_per_expert), "assignments"))
    g = goodput_of(p, s, m.gpus)
    detail = (f"{s.breakdown['compute']:,.2f} s compute, {waiting:,.2f} s exposed communication, "
              f"{s.breakdown['bubble']:,.2f} s bubble of a {s.step_time_s:,.2f} s step; MFU {s.mfu:.1%}")
    if g is None:
        return row(DOMAINS[5], recorded, check, HOLDS,
                   detail + "; effective tokens/s not computed (no goodput section with MTBF, storage and restart)",
                   "seed 003 §9; seed 000 §最后看长时间的有效吞吐")
    recorded += [rec("job MTBF", g.job_mtbf_s / 3600, "h"), rec("checkpoint save", g.save_s, "s"),
                 rec("Young–Daly interval", g.interval_s, "s"), rec("lost per failure", g.lost_per_failure_s, "s"),
                 rec("goodput fraction", g.fraction), rec("effective tokens/s", g.effective_tokens_per_s, "tokens/s")]
    detail += (f"; {g.effective_tokens_per_s:,.0f} effective tokens/s at {g.fraction:.1%} useful time "
               f"(job MTBF {g.job_mtbf_s / 3600:,.1f} h, checkpoint {g.save_s:,.0f} s every {g.interval_s:,.0f} s)")
    return row(DOMAINS[5], recorded, check, HOLDS, detail, "seed 003 §9; seed 000 §最后看长时间的有效吞吐")


def precision_row(t: TableInput) -> dict:
    """BF16 baseline, FP8 rollout format and its scale metadata (seed 003 §7)."""
    p = t.problem
    params = c.total_params(p)
    pub = p.spec.contract.publishing
    scales = publishing.scale_count(params, pub.block)
    recorded = [rec("training precision", p.training.precision.value), rec("rollout weights", "fp8"),
                rec("scaling recipe", f"{pub.block}×{pub.block} blocks"), rec("scale bytes", pub.scale_bytes, "B"),
                rec("scales", scales), rec("scale metadata", scales * pub.scale_bytes / 1e9, "GB")]
    return row(DOMAINS[6], recorded, "loss, logprob, router decisions and outputs of the FP8 rollout pass acceptance "
               "against the BF16 baseline", NOT_CHECKED,
               "numeric acceptance needs measured error statistics (loss, logprob, router agreement), which parasol "
               "cannot make", "seed 003 §7, §9")


def publishing_row(t: TableInput) -> dict:
    """Quantize, reshard, transfer, verify and switch times of one version (seed 003 §7)."""
    p, m = t.problem, t.mapping
    params = c.total_params(p)
    pub = p.spec.contract.publishing
    recorded = [rec("BF16 weights", publishing.bf16_weight_bytes(params) / 1e12, "TB"),
                rec("FP8 weights", publishing.fp8_weight_bytes(params) / 1e12, "TB"),
                rec("block scales", publishing.scale_bytes(params, pub.block, pub.scale_bytes) / 1e9, "GB")]
    check = "quantize + reshard + transfer + verify + switch within the staleness budget (seconds, versions, tokens)"
    times = c.publish_for(p, m.gpus)
    if times is None:
        return row(DOMAINS[7], recorded, check, NOT_CHECKED, "no rollout pool in this problem", "seed 003 §7")
    recorded += [rec(f"{name} time", s if s is not None else "no rate given", "s" if s is not None else "")
                 for name, s in times.stages.items()]
    if times.total_s is None:
        return row(DOMAINS[7], recorded, check, NOT_CHECKED,
                   f"no rate for {', '.join(times.missing)} in contract.publishing", "seed 003 §7")
    recorded.append(rec("publish latency", times.total_s, "s"))
    rules = [t.rule(r) for r in ("contract-staleness-seconds", "contract-staleness-versions",
                                 "contract-staleness-tokens")]
    verdict = combine(rules)
    detail = f"one version takes {times.total_s:,.1f} s to publish"
    if verdict is None:
        return row(DOMAINS[7], recorded, check, NOT_CHECKED, detail + "; the problem sets no staleness budget",
                   "seed 003 §7")
    return row(DOMAINS[7], recorded, check, verdict,
               detail + "; " + "; ".join(v.message for v in rules if v is not None), "seed 003 §7")


def async_row(t: TableInput) -> dict:
    """Rollout supply vs training consumption, staleness, one version per request (seed 003 §8)."""
    p, m = t.problem, t.mapping
    check = ("rollout supply ≥ training consumption (no persistent starvation); staleness within budget; "
             "one request pinned to one weight version")
    pool = c.rollout_pool(p, m.gpus)
    r = p.spec.contract.rollout
    if pool is None:
        return row(DOMAINS[8], [], check, NOT_CHECKED, "no rollout pool in this problem", "seed 003 §8")
    recorded = [rec("training devices", m.gpus, "devices"), rec("rollout devices", pool, "devices")]
    step_s = t.step_s()
    if step_s is not None:
        recorded.append(rec("training consumption", rollout.consumption_tokens_per_s(m.gbs * m.seq_len, step_s),
                            "tokens/s"))
    if r.accepted_tokens_per_s_per_device is not None:
        supply = rollout.supply_tokens_per_s(pool, r.accepted_tokens_per_s_per_device)
        recorded.append(rec("rollout supply", supply, "tokens/s"))
        if step_s is not None:
            recorded.append(rec("step time with starvation", rollout.starved_step_s(m.gbs * m.seq_len, step_s, supply),
                                "s"))
    times = c.publish_for(p, m.gpus)
    if step_s is not None and times is not None and times.total_s is not None:
        recorded += [rec("staleness", rollout.staleness_versions(times.total_s, step_s), "versions"),
                     rec("staleness", times.total_s, "s"),
                     rec("staleness", rollout.staleness_tokens(times.total_s, m.gbs * m.seq_len, step_s), "tokens")]
    recorded.append(rec("version per request", "one (atomic switch after verify)"))
    pool_rules = [t.rule(x) for x in ("contract-rollout-pool-exists", "contract-rollout-supply")]
    stale_rules = [t.rule(x) for x in ("contract-staleness-versions", "contract-staleness-seconds",
                                       "contract-staleness-tokens")]
    verdict = combine(pool_rules + stale_rules)
    stale = combine(stale_rules)
    staleness = [] if stale is None else [f"staleness budgets {stale} (see weight publishing)"]
    failure = ("a rollout failure does not stop training (separate pool and failure domain; training drains the "
               "queue meanwhile)")
    if verdict is None:
        return row(DOMAINS[8], recorded, check, NOT_CHECKED,
                   "the problem gives no accepted-token rate or staleness budget to check; " + failure, "seed 003 §8")
    return row(DOMAINS[8], recorded, check, verdict,
               "; ".join([v.message for v in pool_rules if v is not None] + staleness) + "; " + failure,
               "seed 003 §8")


def topology_row(t: TableInput) -> dict:
    """Where each parallel group lies (seed 003 §9: high-traffic groups not on unvalidated slow links)."""
    recorded = [rec(f"{g.kind} group", f"size {g.size}, {g.max_nodes} node(s), {g.max_domains} scale-up domain(s)")
                for g in t.groups]
    check = "TP inside one scale-up domain; CP and EP groups that cross the network are named for measurement"
    if not t.groups:
        return row(DOMAINS[9], recorded, check, NOT_CHECKED, "the grids do not divide the devices: no placement",
                   "seed 003 §9")
    tp = next((g for g in t.groups if g.kind == "tp"), None)
    crossing = [f"{g.kind} (size {g.size}, {g.max_domains} domains)" for g in t.groups
                if g.kind in ("cp", "ep") and not g.inside_domain and g.size > 1]
    verdict = HOLDS if tp is None or tp.inside_domain else FAILS
    detail = ("TP inside one scale-up domain" if verdict == HOLDS else
              f"TP group of {tp.size} spans {tp.max_domains} scale-up domains")
    detail += ("; over the network, to validate with measured bandwidth: " + ", ".join(crossing) if crossing
               else "; CP and EP stay inside scale-up domains")
    return row(DOMAINS[9], recorded, check, verdict, detail, "seed 003 §9")


def contract_rows(problem: Problem, facts: Facts, step: StepTime | None, groups: tuple[GroupPlacement, ...],
                  verdicts: tuple[Verdict, ...]) -> list[dict]:
    """The ten rows of seed 003 §9 for one mapping, in the seed's order."""
    t = TableInput(problem, facts, step, groups, {v.rule: v for v in verdicts})
    return [model_row(t), long_context_row(t), state_row(t), routing_row(t), ep_row(t), compute_row(t),
            precision_row(t), publishing_row(t), async_row(t), topology_row(t)]
