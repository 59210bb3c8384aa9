"""Nearest feasible repairs of an infeasible mapping, found with CP-SAT.

A repair changes the fewest of the fields tp, pp, cp, ep, etp, vpp, mbs, gbs and recompute (never
gpus, seq_len or the layout), then the least: the sum of |log2 new/old| over changed numbers (one
step per recompute level). The search runs in rounds of exactly s changed fields, s = 1, 2, until k
repairs are found; a round of three changes (GBS kept) runs only when none of one or two exists. A
repair never contains a nearer repair's changes. Each round compiles every active error rule, all
enforced, over neighbourhood domains of the degrees (the current value, 1, and the divisors of the
world size, or powers of two for VPP and MBS, within a factor 4, kept inside the problem's `search` space
where it names one) and one GBS per model (GBS is a constant of the CP-SAT model: the current one,
twice and four times it, and the multiples of MBS·D_a just around it), minimises the change, and
enumerates distinct repairs by excluding each solution found.

Every repair is re-checked with the Python evaluator and dropped if Python disagrees (a bug the
agreement property test, tests/test_agreement.py, exists to prevent).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from parasol.bounds import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_LAYERS, MAX_MICRO_BATCH
from parasol.constraints.core.base import Constraint, Facts, Severity
from parasol.constraints.evaluate import Evaluation, evaluate
from parasol.constraints.physics import rollout as rollout_formulas
from parasol.constraints.physics.memory import schedule_fits_layout
from parasol.constraints.physics.step_time import CalibratedStageTimes, step_time_or_none
from parasol.constraints.rules import contract
from parasol.constraints.rules.registry import active_constraints
from parasol.cp_sat import cp_model
from parasol.problems.derived import default_layout, derive, resolve_layout
from parasol.problems.empty_stages import most_stages
from parasol.problems.loader import Problem
from parasol.problems.mapping import DEGREES, Mapping, Recompute
from parasol.problems.megatron.layout_string import run_length
from parasol.problems.options import MegatronOptions
from parasol.solver.diagnose.compile import RECOMPUTE_CHOICES, CompiledRules, compile_rules
from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
from parasol.solver.search.cpsat import DIAGNOSIS_LIMIT_S, deterministic_solver
from parasol.solver.search.cuts import fastest_cut
from parasol.solver.search.program import CUT_RULES, judged_rules
from parasol.solver.search.space import Row, whole_folding

REPAIR_FIELDS = (*DEGREES, "gbs", "recompute")
FACTOR = 4
MAX_CHANGES = 3
WIDEN_UNTIL = 2  # rounds past this one run only when nothing nearer was found, and keep GBS
SEARCHED = f"within a factor {FACTOR} of the current degrees (or 1) and up to {MAX_CHANGES} changed fields"
"""Where the repair search looks (neighbourhood, degree_repairs), as explain says when it finds nothing there."""
SCALE = 1000
RECOMPUTE_LEVEL = {r.value: i for i, r in enumerate(Recompute)}
LABEL = {"tp": "TP", "pp": "PP", "cp": "CP", "ep": "EP", "etp": "ETP", "vpp": "VPP", "mbs": "MBS", "gbs": "GBS"}


@dataclass(frozen=True)
class Repair:
    """A feasible mapping near the user's, what it changes and how to say it in one line."""

    mapping: Mapping
    changes: dict[str, tuple[int | str | None, int | str | None]]
    text: str
    cost: int
    layout: tuple[int, ...]
    step_time_s: float | None = None
    """The repaired mapping's modelled step time (None when the step-time model cannot price it)."""
    peak_memory_gb: float | None = None
    """The repaired mapping's heaviest stage (memory ledger), GB."""
    options: dict[str, object] = field(default_factory=dict)
    """Megatron options the repair sets (e.g. recompute_method), beside the mapping."""

    def as_dict(self) -> dict:
        """JSON-ready: the mapping keys of --set (layout as the list of stage block counts), the options it
        sets, the changes, the text, and the modelled step time and peak memory."""
        mapping = self.mapping.as_dict()
        mapping["layout"] = list(self.layout)
        return {"mapping": mapping, "options": dict(self.options),
                "changes": {k: list(v) for k, v in self.changes.items()}, "text": self.text,
                "step_time_s": None if self.step_time_s is None else round(self.step_time_s, 6),
                "peak_memory_gb": None if self.peak_memory_gb is None else round(self.peak_memory_gb, 4)}


def current_values(mapping: Mapping) -> dict[str, int | str]:
    """The repairable fields of `mapping` (ETP as its effective value)."""
    values: dict[str, int | str] = {name: getattr(mapping, name) for name in DEGREES}
    values["etp"] = mapping.expert_tp
    values["gbs"] = mapping.gbs
    values["recompute"] = mapping.recompute.value
    return values


def _divisors(n: int) -> list[int]:
    """Divisors of n, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _near(value: int, universe: Sequence[int]) -> list[int]:
    """`value`, 1 (the degree dropped: EP 16 on a dense model has no other repair) and the members of `universe`
    within a factor FACTOR of it."""
    return sorted({value, 1, *(x for x in universe if value <= x * FACTOR and x <= value * FACTOR)})


def neighbourhood(problem: Problem, mapping: Mapping) -> dict[str, list[int]]:
    """Candidate values per degree: 1 and the divisors of the world size (TP, PP, CP, EP, ETP) or powers of two
    (VPP, MBS) within a factor 4, inside the problem's search space where it names one."""
    cur = current_values(mapping)
    powers = [2 ** i for i in range(0, 12)]
    divisors = _divisors(mapping.gpus)
    search = problem.spec.search
    out: dict[str, list[int]] = {}
    for name in DEGREES:
        ceiling = {"vpp": MAX_LAYERS, "mbs": MAX_MICRO_BATCH}.get(name, MAX_GPUS)
        values = [x for x in _near(int(cur[name]), powers if name in ("vpp", "mbs") else divisors) if x <= ceiling]
        allowed = getattr(search, name)
        if allowed is not None:
            allowed_set = {allowed} if isinstance(allowed, int) else set(allowed)
            values = [x for x in values if x in allowed_set or x == cur[name]]
        out[name] = values
    return out


def gbs_candidates(problem: Problem, mapping: Mapping) -> list[int]:
    """The current GBS, doubled and quadrupled, and the multiples of MBS·D_a just below and above it
    (none above MAX_GLOBAL_BATCH)."""
    gbs = mapping.gbs
    values = {gbs, 2 * gbs, FACTOR * gbs}
    dp = derive(problem.model, mapping).dp_attn
    if dp.denominator == 1:
        step = mapping.mbs * int(dp)
        values |= {x for x in ((gbs // step) * step, -(-gbs // step) * step) if x > 0 and gbs <= x * FACTOR}
    return sorted(v for v in values if v <= MAX_GLOBAL_BATCH)


def _log_cost(old: int, new: int) -> int:
    """SCALE·|log2(new/old)|, rounded."""
    return round(SCALE * abs(math.log2(new / old)))


def change_cost(field: str, old: int | str, new: int | str) -> int:
    """The size of one change: |log2 ratio| for numbers, levels for recompute (scaled)."""
    if field == "recompute":
        return SCALE * abs(RECOMPUTE_LEVEL[str(new)] - RECOMPUTE_LEVEL[str(old)])
    return _log_cost(int(old), int(new))


def describe(field: str, old: object, new: object) -> str:
    """One change in words: 'raise GBS to 8192', 'drop VPP (vpp 2 → 1)', 'set CP=4'."""
    if field == "recompute":
        action = "turn recompute off" if new == Recompute.none.value else f"use {new} recompute"
        return f"{action} (recompute {old} → {new})"
    if field == "vpp" and new == 1:
        return f"drop VPP (vpp {old} → 1)"
    if field == "gbs":
        return f"{'raise' if int(new) > int(old) else 'lower'} GBS to {new}"
    if field in OPTION_FLAGS:
        flag = OPTION_FLAGS[field]
        if new is None:
            return f"remove {flag}"
        if old is None or old == MegatronOptions.model_fields[field].default:
            return f"add {flag} {new}"
        return f"change {flag} {old} → {new}"
    return f"set {LABEL[field]}={new}"


class _Round:
    """One CP-SAT model of a round: exactly `budget` degree/recompute changes at one GBS. The memory
    table asks only the tuples of that many changes (`reach`) and builds ledgers only for those whose other
    rules hold (`screen`), so few ledgers are computed."""

    def __init__(self, problem: Problem, mapping: Mapping, rules: Sequence[Constraint],
                 options: MegatronOptions, gbs: int, budget: int, levels: tuple[str, ...] = RECOMPUTE_CHOICES) -> None:
        self.cur = current_values(mapping)
        self.budget = budget
        self.gbs = gbs
        self.problem = problem
        self.options = options
        self.mapping = mapping
        pinned = budget == 0
        domains = {n: [int(self.cur[n])] for n in DEGREES} if pinned else neighbourhood(problem, mapping)
        choices = (str(self.cur["recompute"]),) if pinned else levels
        self.plain_rules = tuple(r for r in rules if not r.needs_ledger())
        self.compiled: CompiledRules = compile_rules(problem, rules, domains, options, fixed=mapping, gbs=gbs,
                                                     recompute=choices, screen=self.screen, reach=self.reach)
        self.compiled.enforce_all()
        self._changes_and_cost()

    def reach(self, domains: list[list[int]], recompute: str) -> list[tuple[int, ...]]:
        """The degree tuples of `domains` with exactly the round's budget of changes under `recompute`, in the
        order of their product: the model allows no other, and with 1 in every degree's neighbourhood the
        product is a few hundred thousand tuples (a dense model given EP: 20 s of a 21 s explain)."""
        moves = self.budget - (recompute != self.cur["recompute"])
        if moves < 0:
            return []
        current = [int(self.cur[n]) for n in DEGREES]
        out: list[tuple[int, ...]] = []
        for moved in itertools.combinations(range(len(DEGREES)), moves):
            choices = [[x for x in values if x != now] if i in moved else [now] if now in values else []
                       for i, (values, now) in enumerate(zip(domains, current, strict=True))]
            out.extend(itertools.product(*choices))
        return sorted(out)

    def screen(self, degrees: dict[str, int], recompute: str) -> bool:
        """Tuples the round can reach: exactly `budget` changes and every non-ledger rule holding (the
        model enforces both, so rejecting the rest early leaves its solutions unchanged)."""
        changes = sum(degrees[n] != self.cur[n] for n in DEGREES) + (recompute != self.cur["recompute"])
        if changes != self.budget:
            return False
        m = self.mapping.model_copy(update={**degrees, "gbs": self.gbs, "recompute": Recompute(recompute)})
        facts = Facts(problem=self.problem, mapping=m, derived=derive(self.problem.model, m), options=self.options)
        return all(rule.slack(facts) >= 0 for rule in self.plain_rules)

    def _changes_and_cost(self) -> None:
        """Changed-field booleans (their sum is the budget) and the objective: the size of the change."""
        model, v = self.compiled.model, self.compiled.vars
        changed, costs = [], []
        for name in DEGREES:
            var, old = v.degree[name], int(self.cur[name])
            flag = model.NewBoolVar(f"changed[{name}]")
            model.Add(var == old).OnlyEnforceIf(flag.Not())
            model.Add(var != old).OnlyEnforceIf(flag)
            changed.append(flag)
            values = v.domain_values(name)
            cost = model.NewIntVar(0, max(_log_cost(old, x) for x in values), f"cost[{name}]")
            model.AddAllowedAssignments([var, cost], [(x, _log_cost(old, x)) for x in values])
            costs.append(cost)
        old_recompute = str(self.cur["recompute"])
        for option, flag in v.recompute.items():
            if option != old_recompute:
                changed.append(flag)
                costs.append(change_cost("recompute", old_recompute, option) * flag)
        model.Add(sum(changed) == self.budget)
        model.Minimize(sum(costs))

    def exclude_supersets(self, earlier: Sequence[Repair]) -> bool:
        """Forbid every superset of an earlier repair's changes; False when the whole round is one."""
        for repair in earlier:
            if "gbs" in repair.changes and repair.changes["gbs"][1] != self.gbs:
                continue
            rest = {f: new for f, (_, new) in repair.changes.items() if f != "gbs"}
            if not rest:
                return False
            self._forbid(rest)
        return True

    def _forbid(self, values: dict[str, int | str]) -> None:
        """No-good: not every field of `values` at its given value."""
        v = self.compiled.vars
        literals = [v.recompute[str(new)].Not() if f == "recompute" else self._equal(f, int(new)).Not()
                    for f, new in values.items() if f == "recompute" or int(new) in v.domain_values(f)]
        if len(literals) == len(values):
            self.compiled.model.AddBoolOr(literals)

    def _equal(self, name: str, value: int) -> cp_model.IntVar:
        """A literal that is false whenever degree `name` differs from `value` (for no-goods)."""
        flag = self.compiled.model.NewBoolVar(f"eq[{name}={value}]")
        self.compiled.model.Add(self.compiled.vars.degree[name] != value).OnlyEnforceIf(flag.Not())
        return flag

    def repairs(self, k: int) -> list[Repair]:
        """Up to k distinct cheapest repairs, each excluded once found and kept when the Python
        evaluator confirms it."""
        v = self.compiled.vars
        found: list[Repair] = []
        for _ in range(k):
            cp = deterministic_solver(DIAGNOSIS_LIMIT_S)
            if cp.Solve(self.compiled.model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                break
            values: dict[str, int | str] = {n: cp.Value(v.degree[n]) for n in DEGREES}
            values["recompute"] = next(o for o, flag in v.recompute.items() if cp.BooleanValue(flag))
            values["gbs"] = self.gbs
            self._forbid({f: values[f] for f in (*DEGREES, "recompute")})
            repair = build_repair(self.problem, self.mapping, values)
            if evaluate(self.problem, repair.mapping, options=self.options).feasible:
                found.append(repair)
        return found


def build_repair(problem: Problem, mapping: Mapping, values: dict[str, int | str]) -> Repair:
    """The repaired mapping (ETP kept implicit when it still equals TP), its changes and text."""
    cur = current_values(mapping)
    changes = {f: (cur[f], values[f]) for f in REPAIR_FIELDS if values[f] != cur[f]}
    update = {n: values[n] for n in DEGREES if n != "etp"}
    if problem.model.moe is None:  # a dense model has no expert grid: ETP follows TP, never a change
        values = {**values, "etp": values["tp"]}
        changes.pop("etp", None)
    etp = int(values["etp"])
    implicit = mapping.etp is None and etp == int(values["tp"])
    update["etp"] = None if implicit else etp
    if mapping.etp is None and not implicit and "etp" not in changes:
        changes["etp"] = (cur["etp"], etp)  # ETP followed TP; keeping it when TP moves is a change to say
    repaired = mapping.model_copy(update={**update, "gbs": values["gbs"], "recompute": Recompute(str(values["recompute"]))})
    text = ", ".join(describe(f, old, new) for f, (old, new) in changes.items())
    cost = sum(change_cost(f, old, new) for f, (old, new) in changes.items())
    return Repair(mapping=repaired, changes=changes, text=text, cost=cost,
                  layout=resolve_layout(problem.model, repaired))


def _order_key(repair: Repair) -> tuple:
    """Fewest changes, then the smallest change, then the values (stable)."""
    return (len(repair.changes), repair.cost, tuple(str(current_values(repair.mapping)[f]) for f in REPAIR_FIELDS))


def _rank_key(repair: Repair) -> tuple:
    """Fewest changed fields first; among as many changes, those keeping GBS (a batch change alters the
    training, not only its mapping) before the smallest GBS change; then the fastest modelled step."""
    gbs = repair.changes.get("gbs")
    batch = change_cost("gbs", *gbs) if gbs is not None else 0
    step = repair.step_time_s if repair.step_time_s is not None else math.inf
    return (len(repair.changes), gbs is not None, batch, step, *_order_key(repair))


def sized_problem(problem: Problem, mapping: Mapping, options: MegatronOptions) -> Problem:
    """`problem` at the mapping's GPUs, global batch and sequence length, under `options`, so the search's
    cost tables price this mapping."""
    spec = problem.spec
    training = spec.training.model_copy(update={"global_batch": mapping.gbs, "seq_len": mapping.seq_len})
    framework = spec.framework.model_copy(update={"options": options})
    spec = spec.model_copy(update={"hardware": spec.hardware.model_copy(update={"gpus": mapping.gpus}),
                                   "training": training, "framework": framework})
    return dataclasses.replace(problem, spec=spec)


REPAIR_PROOF_WORK = 0.5
"""CP-SAT's deterministic work per cut question of a repair's cut (cut_program.cut_within; solve gives each
CUT_PROOF_WORK): explain answers in seconds, and an unproved cut still fits and is said to be unproved.
Nemotron-3 Ultra at TP8 PP8 EP64 VPP3 on 256 GB200 asked three repair cuts whose questions stayed open at
the solver's work too: 39 s, now 14 s with the same cuts."""


class BestCut(NamedTuple):
    """best_cut's answer: the cut (None: none fits, or no cut can make the degrees feasible) and whether it is
    proved the fastest (an interleaved search can run out of its budget: the cut then fits, no more)."""

    layout: tuple[int, ...] | None
    proved: bool = True


def best_cut(problem: Problem, mapping: Mapping, options: MegatronOptions) -> BestCut:
    """The fastest cut of the blocks over the mapping's (virtual) stages that keeps every stage within
    usable memory (the solver's cut searches, solver/search/cuts.py fastest_cut), or none when no cut fits,
    no cut can mend the rules the degrees break (cut_may_mend) or the pipeline schedule cannot pair the PP·VPP
    stages (DualPipe: even PP, VPP 1; DualPipeV: VPP 2)."""
    stages = mapping.pp * mapping.vpp
    if not schedule_fits_layout((1,) * stages, mapping.pp, problem.training.pipeline_schedule):
        return BestCut(None)
    if stages > most_stages(problem.model.num_layers, mapping.vpp) or not whole_folding(
            mapping.gpus, mapping.gbs, mapping.tp, mapping.pp, mapping.cp, mapping.ep, mapping.expert_tp, mapping.mbs):
        return BestCut(None)
    if not cut_may_mend(problem, mapping, options):
        return BestCut(None)
    sized = sized_problem(problem, mapping, options)
    row = Row(pp=mapping.pp, vpp=mapping.vpp, tp=mapping.tp, cp=mapping.cp, ep=mapping.ep, etp=mapping.expert_tp,
              mbs=mapping.mbs, recompute=mapping.recompute.value, rank_order=mapping.rank_order.value)
    counts = interval_counts(prefix_counts(sized, block_kinds(sized)))
    return BestCut(*fastest_cut(row_costs(sized, row, CalibratedStageTimes(sized)), counts, usable_mb(sized),
                                REPAIR_PROOF_WORK))


def cut_may_mend(problem: Problem, mapping: Mapping, options: MegatronOptions) -> bool:
    """Whether some cut of the blocks may make the mapping's degrees feasible: every rule they break under their
    even cut, given explicitly as `solve`'s rows are judged, is one a cut decides (program.CUT_RULES: each stage's
    memory, every block placed; and the rules the solver judges per cut). No other rule reads the cut, so no
    cut mends it, and best_cut skips the cut search (a hybrid model's interleaved search can take half a minute:
    Nemotron-H 8B at PP16 VPP3 with EP 4, which a dense model refuses)."""
    even = mapping.model_copy(update={"layout": default_layout(problem.model.num_layers, mapping.pp, mapping.vpp)})
    decided = {*CUT_RULES, *(c.id for c in judged_rules(problem, "cut"))}
    return all(v.holds or v.rule in decided for v in evaluate(problem, even, options=options).verdicts)


def recut(problem: Problem, original: Mapping, repair: Repair, options: MegatronOptions) -> Repair | None:
    """`repair` with the best cut for its degrees when that is feasible and faster (or the repair alone is
    not feasible); the layout becomes one more change. Priced (with_price) from the evaluation that judged it."""
    layout, proved = best_cut(problem, repair.mapping, options)
    if layout is None or layout == repair.mapping.layout:
        return None
    alone = evaluate(problem, repair.mapping, options=options)
    if layout == repair.layout and alone.feasible:
        return None  # the same blocks per stage as Megatron's own split, which already runs
    cut = repair.mapping.model_copy(update={"layout": layout})
    judged = evaluate(problem, cut, options=options)
    if not judged.feasible:
        return None
    if alone.feasible:  # the cut search ranks cuts by its tables: keep the cut only if it prints faster
        cut_s, own_s = modelled_step_s(problem, cut, judged), modelled_step_s(problem, repair.mapping, alone)
        if cut_s is None or (own_s is not None and cut_s >= own_s):
            return None
    changes = {**repair.changes, "layout": (run_length(resolve_layout(problem.model, original)), run_length(layout))}
    which = "fastest cut that fits" if proved else "a cut that fits; its search stopped before proving it fastest"
    text = ", ".join(filter(None, [repair.text, f"cut the blocks {run_length(layout)} ({which})"]))
    return with_price(problem, Repair(mapping=cut, changes=changes, text=text, cost=repair.cost + SCALE,
                                      layout=layout, options=repair.options), judged)


def modelled_step_s(problem: Problem, mapping: Mapping, judged: Evaluation) -> float | None:
    """The mapping's modelled step time as explain prints it, from its evaluation's facts (None where the model
    cannot price it)."""
    facts = judged.facts
    step = step_time_or_none(problem, mapping, facts.derived, options=facts.options)
    return None if step is None else step.step_time_s


def priced(problem: Problem, repair: Repair, options: MegatronOptions) -> Repair:
    """`repair` with its modelled step time and peak memory."""
    return with_price(problem, repair, evaluate(problem, repair.mapping, options=options))


def with_price(problem: Problem, repair: Repair, judged: Evaluation) -> Repair:
    """`repair` with the modelled step time and peak memory of its mapping's evaluation `judged`."""
    peak = judged.ledger.peak.total_gb if judged.ledger is not None else None
    return replace(repair, step_time_s=modelled_step_s(problem, repair.mapping, judged), peak_memory_gb=peak)


OPTION_FLAGS = {"recompute_method": "--recompute-method", "recompute_num_layers": "--recompute-num-layers",
                "moe_token_dispatcher_type": "--moe-token-dispatcher-type",
                "cross_entropy_fusion_impl": "--cross-entropy-fusion-impl", "cp_comm_type": "--cp-comm-type"}
"""Megatron options a repair may set, with their flags."""
OPTION_TRIALS: tuple[dict[str, object], ...] = (
    {"recompute_method": "uniform", "recompute_num_layers": 1},
    {"recompute_method": "uniform"},
    {"recompute_num_layers": 1},
    {"recompute_method": None},
    {"recompute_num_layers": None},
    {"moe_token_dispatcher_type": "alltoall"},
    {"moe_token_dispatcher_type": "flex"},
    {"moe_token_dispatcher_type": "allgather"},
    {"cross_entropy_fusion_impl": "native"},
    {"cp_comm_type": "allgather"},
)
"""Settings tried, in order, against broken settings rules (full recompute needs a method and a layer
count; selective takes neither; some MoE features need a given dispatcher; the fused
loss runs on the native kernels; DSA's context parallelism gathers)."""


def _broken(problem: Problem, mapping: Mapping, options: MegatronOptions) -> set[str]:
    return {v.rule for v in evaluate(problem, mapping, options=options).violations}


def settings_fixes(problem: Problem, mapping: Mapping,
                   options: MegatronOptions) -> tuple[MegatronOptions, dict[str, tuple[object, object]]]:
    """Options that mend broken settings rules without breaking others, applied one trial at a time while
    the set of broken rules shrinks; returns the mended options and the option changes."""
    broken = _broken(problem, mapping, options)
    changes: dict[str, tuple[object, object]] = {}
    for trial in OPTION_TRIALS:
        if all(getattr(options, k) == v for k, v in trial.items()) or not broken:
            continue
        candidate = options.model_copy(update=trial)
        after = _broken(problem, mapping, candidate)
        if after < broken:
            changes.update({k: (getattr(options, k), v) for k, v in trial.items() if getattr(options, k) != v})
            options, broken = candidate, after
    return options, changes


def with_settings(repair: Repair, changes: dict[str, tuple[object, object]]) -> Repair:
    """`repair` that also sets the mended options (counted as one change per option)."""
    if not changes:
        return repair
    said = ", ".join(describe(f, old, new) for f, (old, new) in changes.items())
    return replace(repair, changes={**changes, **repair.changes}, text=", ".join(filter(None, [said, repair.text])),
                   options={**repair.options, **{k: new for k, (_, new) in changes.items()}})


def degree_repairs(problem: Problem, mapping: Mapping, opts: MegatronOptions, k: int,
                   levels: tuple[str, ...] = RECOMPUTE_CHOICES) -> list[Repair]:
    """Up to about k feasible mappings that change the fewest degrees, GBS and recompute (CP-SAT rounds), the
    recompute among `levels` (a round that changes only GBS keeps the current one)."""
    rules = tuple(r for r in active_constraints(problem) if r.severity is Severity.error)
    repairs: list[Repair] = []
    for changes in range(1, MAX_CHANGES + 1):
        found: list[Repair] = []
        for gbs in gbs_candidates(problem, mapping) if changes <= WIDEN_UNTIL else [mapping.gbs]:
            budget = changes - (gbs != mapping.gbs)
            if budget < 0:
                continue
            search = _Round(problem, mapping, rules, opts, gbs, budget, levels)
            if search.exclude_supersets(repairs):
                found.extend(search.repairs(k))
        repairs.extend(sorted(found, key=_order_key))
        if len(repairs) >= k or (repairs and changes >= WIDEN_UNTIL):
            break
    return repairs


def recompute_recuts(problem: Problem, mapping: Mapping, opts: MegatronOptions,
                     settings: dict[str, tuple[object, object]], worth: Callable[[Repair], bool]) -> list[Repair]:
    """The mapping's own degrees under each recompute level with the fastest cut that fits memory, priced;
    full recompute adds --recompute-method uniform --recompute-num-layers 1 when the options lack them. A
    level whose cut could not be shown (`worth` false of it without its cut: _may_rank) is not searched."""
    out = []
    cur = current_values(mapping)
    for level in Recompute:
        missing = {f: v for f, v in FULL_RECOMPUTE_FLAGS.items() if getattr(opts, f) is None}
        if level is not Recompute.full or mapping.recompute is Recompute.full:
            missing = {}
        level_opts = opts.model_copy(update=missing) if missing else opts
        base = build_repair(problem, mapping, {**cur, "recompute": level.value})
        flags = {**settings, **{f: (getattr(opts, f), v) for f, v in missing.items()}}
        if not worth(with_settings(base, flags)):
            continue
        cut = recut(problem, mapping, base, level_opts)
        if cut is not None:
            out.append(with_settings(cut, flags))
    return out


POOL = 6
"""Candidate repairs gathered before ranking by modelled step time."""

FULL_RECOMPUTE_FLAGS: dict[str, object] = {"recompute_method": "uniform", "recompute_num_layers": 1}
"""The flags full recompute needs (--recompute-method uniform --recompute-num-layers 1: every layer)."""


Base = tuple[Repair, MegatronOptions, dict[str, tuple[object, object]]]
"""A degree repair as found, the options it is judged under and the option changes it carries (with_settings)."""


def full_recompute_repairs(problem: Problem, mapping: Mapping, opts: MegatronOptions,
                           settings: dict[str, tuple[object, object]], k: int) -> list[Base]:
    """When the launch line gives full recompute no method or layer count, the degree repairs that use
    full recompute with those flags added (the other repairs cannot set them: selective recompute takes
    neither), as Bases: nearest_repairs prices them and searches their cuts with the others'."""
    missing = {f: v for f, v in FULL_RECOMPUTE_FLAGS.items() if getattr(opts, f) is None}
    if not missing or mapping.recompute is Recompute.full:
        return []
    ready = opts.model_copy(update=missing)
    flags = {**settings, **{f: (getattr(opts, f), v) for f, v in missing.items()}}
    return [(r, ready, flags) for r in degree_repairs(problem, mapping, ready, k, (Recompute.full.value,))
            if r.mapping.recompute is Recompute.full]


def _may_rank(base: Repair, candidates: Sequence[Repair], places: int) -> bool:
    """Whether `base` with one more change (its cut) could rank among the first `places` of `candidates` and
    what joins them: fewer than `places` rank before every repair of its changed fields plus one and its GBS
    change (_rank_key's first fields). The candidates only grow, so a cut search skipped otherwise finds a
    repair never shown (a hybrid model's interleaved cut search takes seconds: Nemotron-3 Super at TP8 PP8
    VPP3 on 512 GB200 searched twelve cuts, 22 s, to show none)."""
    head = (len(base.changes) + 1, *_rank_key(base)[1:3])
    return sum(_rank_key(c)[:3] < head for c in candidates) < places


def nearest_repairs(problem: Problem, mapping: Mapping, options: MegatronOptions | None = None,
                    k: int = 3) -> list[Repair]:
    """Up to k feasible repairs of `mapping`: mended settings (recompute flags, dispatcher), the fewest
    changed degrees, GBS and recompute (never a superset of a nearer repair's changes), and the fastest
    cut that fits for the mapping's degrees and for each degree repair, searched where it could be shown
    (_may_rank); ranked by the fewest changed fields, then the modelled time per token (TP 32 before TP 64
    when it is faster). Each is confirmed by the Python evaluator; empty when the mapping is feasible or
    nothing within the neighbourhood is."""
    opts = options if options is not None else problem.spec.framework.options
    if evaluate(problem, mapping, options=opts).feasible:
        return []
    mended, settings = settings_fixes(problem, mapping, opts)
    pool = rollout_pool_repair(problem, mapping, opts)
    places = k - (pool is not None)
    settled = bool(settings) and evaluate(problem, mapping, options=mended).feasible
    bases: list[Base] = [] if settled else [(r, mended, settings)
                                            for r in degree_repairs(problem, mapping, mended, max(k, POOL))]
    bases += full_recompute_repairs(problem, mapping, mended, settings, max(k, POOL))
    priced_bases = [priced(problem, with_settings(r, flags), o) for r, o, flags in bases]
    candidates = list(priced_bases)
    if settled:
        candidates.append(priced(problem, with_settings(build_repair(problem, mapping, current_values(mapping)),
                                                        settings), mended))
    else:
        candidates += recompute_recuts(problem, mapping, mended, settings,
                                       lambda base: _may_rank(base, candidates, places))
    for (r, o, flags), base in sorted(zip(bases, priced_bases, strict=True), key=lambda pair: _rank_key(pair[1])):
        if _may_rank(base, candidates, places) and (cut := recut(problem, mapping, r, o)) is not None:
            candidates.append(with_settings(cut, flags))
    candidates = sorted(candidates, key=_rank_key)
    return ([pool] if pool is not None else []) + candidates[:places]


POOL_CANDIDATES = 64
"""Training-pool sizes tried (largest first) when devices move from training to rollout."""


def rollout_pool_repair(problem: Problem, mapping: Mapping, options: MegatronOptions) -> Repair | None:
    """When rollout supply < training consumption (seed 003 §8): the rollout pool that meets consumption.
    A pinned pool (contract.rollout.devices) grows by the missing devices; a split cluster
    (contract.rollout.cluster_devices) moves devices from training: the largest training pool of at
    most N − Δ devices (whole nodes, the grids dividing it) on which the same degrees are feasible,
    judged again in Python (training slows down there, so its consumption falls too)."""
    evaluation = evaluate(problem, mapping, options=options)
    verdict = next((v for v in evaluation.verdicts if v.rule == "contract-rollout-supply"), None)
    step = contract.step_for(problem, mapping, options)
    if verdict is None or verdict.holds or step is None:
        return None
    spec = problem.spec.contract.rollout
    tokens = mapping.gbs * mapping.seq_len
    step_s = contract.contract_step_s(problem, step, mapping.gpus)
    pool = contract.rollout_pool(problem, mapping.gpus)
    supply = rollout_formulas.supply_tokens_per_s(pool, spec.accepted_tokens_per_s_per_device)
    consumption = rollout_formulas.consumption_tokens_per_s(tokens, step_s)
    need = rollout_formulas.devices_needed(tokens, step_s, spec.accepted_tokens_per_s_per_device)
    why = f"rollout supply {supply:,.0f} < consumption {consumption:,.0f} tokens/s"
    layout = resolve_layout(problem.model, mapping)
    if spec.devices is not None:
        return Repair(mapping=mapping, changes={"rollout_devices": (pool, need)}, cost=0, layout=layout,
                      text=f"{why}: raise contract.rollout.devices from {pool:,} to {need:,} (+{need - pool:,} devices)")
    unit = math.lcm(problem.hardware.topology.gpus_per_node, mapping.tp * mapping.pp * mapping.cp,
                    mapping.expert_tp * mapping.ep * mapping.pp)
    top = (mapping.gpus - (need - pool)) // unit * unit
    for gpus in range(top, max(top - POOL_CANDIDATES * unit, 0), -unit):
        moved = mapping.model_copy(update={"gpus": gpus})
        if evaluate(problem, moved, options=options).feasible:
            rollout_after = spec.cluster_devices - gpus
            return Repair(mapping=moved, changes={"gpus": (mapping.gpus, gpus)}, cost=0,
                          layout=resolve_layout(problem.model, moved),
                          text=(f"{why}: move {mapping.gpus - gpus:,} devices from training to rollout (rollout pool "
                                f"{pool:,} → {rollout_after:,}, at least {need:,} needed); training keeps its degrees "
                                f"on {gpus:,} devices"))
    return None
