"""Binding rules: a rule is marked binding only when it is an inequality in force that holds exactly at its
limit (Constraint.judge). Divisibility, equality and on/off rules hold at slack 0 by nature (`exact`), and
a conditional rule whose condition does not concern the mapping reports slack 0 without binding
(`in_force`).

Sources: the BRIEF ("each mapping carries its per-constraint slack with the binding constraints marked");
reference/megatron-rules.yaml for the rule ids and conditions; seed 000 §PP 和 microbatch
(m = GBS/(MBS·D_a), the interleaved schedule needs PP <= m); seed 000's configuration A and seed 003's 5T
problem for the two bundled mappings.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import pytest
from inline_problems import SMALL_MOE
from test_agreement import _problems, random_mapping, random_setting
from test_megatron_rules import ROWS

from parasol.constraints.core.base import BINDING_TOLERANCE, Verdict, remainder_slack
from parasol.constraints.evaluate import evaluate, facts_for
from parasol.constraints.rules.contract import CONTRACT_RULES
from parasol.constraints.rules.registry import active_constraints, builtin_constraints
from parasol.problems.loader import Problem, load_problem, load_problem_text
from parasol.problems.mapping_input import build_mapping
from parasol.solver.diagnose.explain import explain

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
RANDOM_MAPPINGS_PER_PROBLEM = 40

# The built-in inequalities (megatron-rules.yaml ids where one exists): every other built-in rule is exact.
INEQUALITIES = {
    "num-microbatches",                     # m >= 1
    "sp-requires-tp",                       # Megatron Core SP: TP >= 2
    "tp-comm-overlap-requires-sp",          # TP >= 2
    "deepep-ncclep-need-etp-ep-gt-1",       # ETP·EP >= 2
    "vpp-requires-pp-gt-1",                 # PP >= 2
    "vpp-no-overlap-requires-pp-gt-2",      # PP >= 3
    "account-for-enough-layers",            # L' >= PP·VPP
    "virtual-stages-within-blocks",         # no explicit layout: PP·VPP <= blocks
    "vpp-microbatch-group-range",           # PP <= N <= m
    "dualpipe-microbatches",                # even m >= 2·PP
    "dualpipev-microbatches",               # m >= 2·PP
    "dsv4-cp-local-rows-ge-window",         # local rows >= D_window
    "hybridep-domain-count",                # NVLink domains of an ETP×EP group <= 33
    "memory-fits-hbm",                      # peak <= usable HBM
}


def by_rule(verdicts: tuple[Verdict, ...]) -> dict[str, Verdict]:
    """Verdicts keyed by rule id."""
    return {v.rule: v for v in verdicts}


def binding_ids(verdicts: tuple[Verdict, ...]) -> list[str]:
    """Ids of the binding rules, in judged order."""
    return [v.rule for v in verdicts if v.binding]


def in_force_inequalities(verdicts: tuple[Verdict, ...]) -> list[str]:
    """Ids of the rules that are in force and not exact on this mapping."""
    return [v.rule for v in verdicts if v.in_force and not v.exact]


@pytest.fixture(scope="module")
def v4() -> Problem:
    return load_problem(PROBLEMS / "deepseek-v4-pro-1024.yaml")


def test_every_builtin_rule_declares_exact_deliberately() -> None:
    """megatron-rules.yaml: the divisibility, equality and settings rules are exact; the inequalities
    listed above and seed 003's contract rules (all inequalities) are not."""
    assert {c.id for c in builtin_constraints() if not c.exact} == INEQUALITIES
    assert not any(cls.exact for cls in CONTRACT_RULES)


def test_configuration_a_with_full_recompute_binds_nothing(v4: Problem) -> None:
    """Seed 000 configuration A (TP1 PP8 CP1 EP64, m = 32) with full recompute: m - 1 = 31, ETP·EP - 2 =
    62, 61 blocks - PP·VPP = 53 and the memory margin are the only inequalities in force, none at zero
    slack; before the change 79 of 84 rules were marked binding."""
    ev = evaluate(v4, build_mapping(v4, {"recompute": "full"}))
    assert len(ev.verdicts) == 109  # 84, + the TP and ETP placement rules (constraints/rules/placement.py), + 4 of issue 17, + 3 virtual-stage flag rules, + 2 of issue 16c, + 8 of issue 15 (cp-a2a-p2p-two-levels, deepep-group-size, hybridep-even-domains, hybridep-experts-per-domain, hybridep-domain-count, tp-comm-overlap-inside-nvlink-domain, delay-wgrad-requires-ep-overlap, overlap-param-gather; the FSDP rules judge FSDP problems only), + 4 FP8-parameter rules (fp8-param-gather-sharded, fp8-param-needs-fp8, fp8-param-gather-cpu-offload-delayed, fsdp2-fp8-param-gather-off), + fp8-recipe-on-gpu (TE), + te-cross-entropy-fusion-off
    assert binding_ids(ev.verdicts) == []
    assert in_force_inequalities(ev.verdicts) == ["num-microbatches", "deepep-ncclep-need-etp-ep-gt-1",
                                                  "virtual-stages-within-blocks", "memory-fits-hbm"]
    slack = {v.rule: v.slack for v in ev.verdicts}
    assert (slack["num-microbatches"], slack["deepep-ncclep-need-etp-ep-gt-1"]) == (31.0, 62.0)


def test_5t_mapping_binds_nothing() -> None:
    """Seed 003's 5T problem (TP8 PP16 CP8 EP64 on 4,096 devices): every inequality in force, including
    the contract rules, has room; before the change 69 of 81 rules were marked binding."""
    problem = load_problem(PROBLEMS / "5t-moe-asic-4096.yaml")
    ev = evaluate(problem, build_mapping(problem, {}))
    assert binding_ids(ev.verdicts) == []
    assert in_force_inequalities(ev.verdicts) == [
        "num-microbatches", "virtual-stages-within-blocks", "memory-fits-hbm", "contract-state-min-devices", "contract-rollout-pool-exists",
        "contract-expert-capacity", "contract-ep-compute-comm-ratio", "contract-staleness-seconds",
        "contract-rollout-supply", "contract-staleness-versions", "contract-staleness-tokens",
        "contract-exposed-cp-share"]
    assert all(v.slack > 0 for v in ev.verdicts if v.in_force and not v.exact)


def test_interleaved_with_pp_microbatches_binds_the_group_range(v4: Problem) -> None:
    """Seed 000 §PP 和 microbatch: VPP 2 on PP 8 with GBS 1,024 gives m = 1024/(1·128) = 8 = PP, so the
    interleaved schedule's PP <= N = PP <= m is exactly at its limit (vpp-microbatch-group-range)."""
    ev = evaluate(v4, build_mapping(v4, {"vpp": "2", "gbs": "1024", "recompute": "full"}))
    verdicts = by_rule(ev.verdicts)
    assert verdicts["vpp-microbatch-group-range"].binding
    assert verdicts["vpp-microbatch-group-range"].slack == 0.0
    assert not verdicts["num-microbatches"].binding and verdicts["num-microbatches"].slack == 7.0
    assert verdicts["vpp-final-group-remainder"].in_force and not verdicts["vpp-final-group-remainder"].binding


def test_default_group_size_with_room_is_not_binding(v4: Problem) -> None:
    """megatron-rules.yaml vpp-microbatch-group-range: with the default N = PP the half N >= PP is 0 by
    definition; with m = 32 > PP = 8 the rule has room, so slack 0 is not binding."""
    ev = evaluate(v4, build_mapping(v4, {"vpp": "2", "recompute": "full"}))
    verdict = by_rule(ev.verdicts)["vpp-microbatch-group-range"]
    assert verdict.slack == 0.0 and verdict.exact and not verdict.binding


def test_one_microbatch_binds_num_microbatches(v4: Problem) -> None:
    """megatron-rules.yaml num-microbatches: GBS 128 on D_a = 128 with MBS 1 gives m = 1, the rule's
    limit."""
    ev = evaluate(v4, build_mapping(v4, {"gbs": "128", "recompute": "full"}))
    assert "num-microbatches" in binding_ids(ev.verdicts)
    assert by_rule(ev.verdicts)["num-microbatches"].slack == 0.0


def test_holding_divisibility_rules_are_never_binding(v4: Problem) -> None:
    """megatron-rules.yaml world-divisible-by-model-size, experts-divisible-by-ep, heads-divisible-by-tp,
    gbs-divisible-by-mbs-dp: they hold with remainder 0 on configuration A, which is not a limit."""
    verdicts = by_rule(evaluate(v4, build_mapping(v4, {"recompute": "full"})).verdicts)
    for rule in ("world-divisible-by-model-size", "experts-divisible-by-ep", "heads-divisible-by-tp",
                 "gbs-divisible-by-mbs-dp", "tp-sharded-linear-dims", "layout-covers-blocks"):
        v = verdicts[rule]
        assert v.holds and v.slack == 0.0 and v.exact and not v.binding, rule


def test_conditional_rules_out_of_force_are_never_binding(v4: Problem) -> None:
    """megatron-rules.yaml vpp-requires-pp-gt-1 (VPP 1), non-pp-last-order-requires-equal-dp (pp-last
    order) and cp-seq-divisible-by-2cp (CP 1) do not concern configuration A: slack 0, not in force."""
    verdicts = by_rule(evaluate(v4, build_mapping(v4, {"recompute": "full"})).verdicts)
    for rule in ("vpp-requires-pp-gt-1", "vpp-no-overlap-requires-pp-gt-2", "non-pp-last-order-requires-equal-dp",
                 "cp-seq-divisible-by-2cp", "vpp-microbatch-group-range"):
        v = verdicts[rule]
        assert v.slack == 0.0 and not v.in_force and not v.binding, rule


def test_pp_two_with_vpp_binds_vpp_requires_pp_gt_1(v4: Problem) -> None:
    """megatron-rules.yaml vpp-requires-pp-gt-1: VPP 2 on PP 2 holds at PP - 2 = 0, its limit."""
    ev = evaluate(v4, build_mapping(v4, {"pp": "2", "vpp": "2", "ep": "8"}))
    verdict = by_rule(ev.verdicts)["vpp-requires-pp-gt-1"]
    assert verdict.in_force and verdict.slack == 0.0 and verdict.binding


def test_user_restrictions_bind_only_as_inequalities() -> None:
    """The BRIEF's restriction examples: `ep * etp <= 16` at EP 16 is tight (binding); a membership, an
    equality-or-flag and an `and` with an equality hold at 0 by nature (exact)."""
    text = SMALL_MOE + ("restrictions:\n  - ep * etp <= 16\n  - tp in (1, 2)\n  - cp == 1 or packed\n"
                        "  - ep * etp <= 32 and cp == 1\n")
    problem = load_problem_text(text, source="restrictions-inline.yaml")
    ev = evaluate(problem, build_mapping(problem, {"ep": "16"}))
    users = {v.rule: v for v in ev.verdicts if v.family.value == "user-declared"}
    assert [(r, v.slack, v.exact, v.binding) for r, v in users.items()] == [
        ("user-1", 0.0, False, True), ("user-2", 0.0, True, False), ("user-3", 0.0, True, False),
        ("user-4", 0.0, True, False)]


def test_explain_json_carries_binding_and_in_force(v4: Problem) -> None:
    """The BRIEF's explain --json contract: each constraint keeps rule, slack, unit, binding, and adds
    in_force and exact."""
    data = explain(v4, build_mapping(v4, {"gbs": "128", "recompute": "full"}), repairs=0).as_dict()
    rows = {c["rule"]: c for c in data["constraints"]}
    assert all({"rule", "slack", "unit", "binding", "in_force", "exact"} <= set(c) for c in data["constraints"])
    assert rows["num-microbatches"]["binding"] and not rows["world-divisible-by-model-size"]["binding"]
    assert rows["vpp-requires-pp-gt-1"]["in_force"] is False


def given_group_size_verdicts() -> list[Verdict]:
    """Configuration A interleaved (VPP 2, m = 32) with --microbatch-group-size-per-virtual-pipeline-stage
    16: PP 8 <= N 16 <= m 32 has room on both sides (schedules.py:1157-1168)."""
    problem = load_problem(PROBLEMS / "deepseek-v4-pro-1024.yaml")
    options = problem.spec.framework.options.model_copy(update={"microbatch_group_size_per_vp_stage": 16})
    return list(evaluate(problem, build_mapping(problem, {"vpp": "2"}), options=options).verdicts)


def given_core_api_sp_verdicts() -> list[Verdict]:
    """A Megatron Core user asking for sequence parallelism at TP 2 (at the bound) and TP 4 (room), so
    sp-requires-tp meets both verdicts without depending on the random draws."""
    text = SMALL_MOE.replace("precision: bf16,", "precision: bf16, sequence_parallel: true,").replace(
        "framework: {rule_packs: [megatron-core]}", "framework: {rule_packs: [megatron-core], options: {megatron_core_api: true}}")
    problem = load_problem_text(text, source="small-moe-core-api.yaml")
    return [v for tp in ("2", "4") for v in evaluate(problem, build_mapping(problem, {"tp": tp, "ep": "8", "etp": "1"})).verdicts]


def sampled_verdicts() -> list[Verdict]:
    """Verdicts of every megatron-rules row of tests/test_megatron_rules.py, of configuration A with a
    given microbatch group size, of a Megatron Core user's sequence parallelism, and of every active rule
    on seeded random mappings and settings of tests/test_agreement.py's four problems."""
    verdicts = ([row.rule().judge(row.build()) for row in ROWS] + given_group_size_verdicts()
                + given_core_api_sp_verdicts())
    rng = random.Random(20240611)
    for problem in _problems().values():
        for _ in range(RANDOM_MAPPINGS_PER_PROBLEM):
            varied, options = random_setting(rng, problem)
            facts = facts_for(varied, random_mapping(rng, varied), options)
            verdicts += [r.judge(facts) for r in active_constraints(varied)
                         if facts.ledger is not None or not r.needs_ledger()]
    return verdicts


def test_zero_only_rules_are_exact_or_out_of_force() -> None:
    """Registry-wide (megatron-rules.yaml ids): an exact rule never holds with positive slack, and a rule
    marked binding somewhere is seen with positive slack in force elsewhere, so a rule whose slack is only
    ever 0 or negative is exact or out of force wherever it sits at 0."""
    verdicts = sampled_verdicts()
    assert [v.rule for v in verdicts if v.exact and v.holds and v.slack > BINDING_TOLERANCE] == []
    roomy = {v.rule for v in verdicts if v.in_force and v.slack > BINDING_TOLERANCE}
    assert sorted({v.rule for v in verdicts if v.binding} - roomy) == []
    assert all(v.in_force for v in verdicts if v.binding)


def test_report_slack_table_orders_statuses(v4: Problem) -> None:
    """The report's slack table (solver/outputs/report.py): violated, then binding (marked), then inequalities with
    room, exact rules and rules not in force (unmarked); seed 000's configuration A with GBS 128 binds
    num-microbatches (m = 1) and breaks memory-fits-hbm."""
    from parasol.solver.outputs.report import STATUS_ORDER, slack_table

    data = explain(v4, build_mapping(v4, {"gbs": "128", "recompute": "full"}), repairs=0).as_dict()
    table = slack_table(data)
    statuses = [row[3] for row in table.rows]
    assert statuses == sorted(statuses, key=STATUS_ORDER.index)
    assert [row[0] for row in table.rows if row[3] == "binding"] == ["num-microbatches"]
    assert {"violated", "holds", "exact", "not in force"} <= set(statuses)
    assert table.marked == tuple(s in ("violated", "warning", "binding") for s in statuses)


@pytest.mark.parametrize("numerator", [-7, -6, -1, 0, 1, 5, 6, 7, 61, 384])
@pytest.mark.parametrize("denominator", [-4, -3, -1, 1, 2, 3, 4, 8, 64])
def test_remainder_slack_of_whole_numbers_is_the_fraction_answer(numerator: int, denominator: int) -> None:
    """Whole numbers take the % shortcut; it gives what the Fraction arithmetic (the general case) gives."""
    as_fractions = remainder_slack(Fraction(numerator), Fraction(denominator))
    assert remainder_slack(numerator, denominator) == as_fractions
    assert (remainder_slack(numerator, denominator) == 0) == (numerator % denominator == 0)
