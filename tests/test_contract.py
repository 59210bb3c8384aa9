"""Seed 003's contract: the BRIEF's seed-003 numbers, the rules (Python and CP-SAT agree), their
step-time floors, the §9 table in explain's JSON, and the two bundled 5T problems.

Sources: seed 003 §2 (16 B/param, 80 TB, 90 TB with FP32 grads, 1.25 TB on 64 devices), §4 (k·T/E =
T/24, 5,461.3 per expert for one 131,072-token sequence, C = ⌈CF·k·T/E⌉, 80% used at CF 1.25,
fixed-size all-to-all amplified by at least CF), §6 (3·f·B/(b·F), set by f, F and the link, not by E,
k or the batch), §9 (the table's ten domains); BRIEF "Seed 003" table; problems/5t-moe-asic-*.yaml.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import pytest
from contract_problems import FULL_CONTRACT
from ortools.sat.python import cp_model

from parasol.constraints.evaluate import facts_for
from parasol.constraints.physics import routing
from parasol.constraints.physics.memory import (
    state_bytes_per_param,
    state_per_device_bytes,
    training_state_bytes,
)
from parasol.constraints.physics.training_state import min_devices_for_state
from parasol.constraints.rules import contract
from parasol.constraints.rules.contract_table import DOMAINS
from parasol.errors import InputError
from parasol.problems.loader import load_problem, load_problem_text
from parasol.problems.mapping import Mapping
from parasol.solver.diagnose.compile import compile_rules, fixed_domains
from parasol.solver.diagnose.explain import explain
from parasol.solver.search.cpsat import deterministic_solver

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
MAPPING_4096 = Mapping(gpus=4096, gbs=256, seq_len=131072, tp=8, pp=16, cp=8, ep=64, etp=1, mbs=1, recompute="full")


@pytest.fixture(scope="module")
def p4096():
    return load_problem(PROBLEMS / "5t-moe-asic-4096.yaml")


@pytest.fixture(scope="module")
def explained_4096(p4096):
    return explain(p4096, MAPPING_4096, repairs=0).as_dict()


def test_state_ledger_numbers() -> None:
    """Seed 003 §2: 16 B/param = 80 TB for 5T, 18 B = 90 TB with FP32 grads, 1.25 TB each on 64 devices."""
    assert state_bytes_per_param("bf16") == 16
    assert state_bytes_per_param("fp32") == 18
    assert training_state_bytes(5e12, "bf16") == 80e12
    assert training_state_bytes(5e12, "fp32") == 90e12
    assert state_per_device_bytes(5e12, 64, "bf16") == 1.25e12
    assert min_devices_for_state(5e12, 16, 89.2e9) == 897 > 64


def test_routing_numbers() -> None:
    """Seed 003 §4: 16 assignments per token, T/24 per expert, 5,461.3 for one 128k sequence, C at CF
    1.25 leaves 80% of the slots used and 20% padding."""
    assert routing.assignments(1, 16) == 16
    assert routing.mean_assignments_per_expert(24_000, 16, 384) == Fraction(24_000, 24)
    mean = routing.mean_assignments_per_expert(131072, 16, 384)
    assert float(mean) == pytest.approx(5461.333, abs=1e-3)
    cap = routing.expert_capacity(131072, 16, 384, 1.25)
    assert cap == 6827
    out = routing.capacity_outcome(routing.expert_loads(131072, 16, 384, routing.SkewModel()), cap)
    assert out.used_share == pytest.approx(0.80, abs=1e-3)
    assert out.dropped == 0


def test_bundled_4096_contract_table(explained_4096) -> None:
    """The 4,096-device problem: feasible, the ten §9 rows in order, each in the shared format; the
    routing row shows the seed's 5,461.3 per expert, the EP row an amplification of at least CF."""
    d = explained_4096
    assert d["feasible"]
    rows = d["contract"]
    assert [r["domain"] for r in rows] == list(DOMAINS)
    for r in rows:
        assert set(r) == {"domain", "recorded", "check", "verdict", "detail", "source"}
        assert r["verdict"] in ("holds", "fails", "not checked")
        assert all(set(q) == {"name", "value", "unit"} for q in r["recorded"])
    verdicts = {r["domain"]: r["verdict"] for r in rows}
    assert verdicts["precision"] == "not checked"
    assert all(v == "holds" for k, v in verdicts.items() if k != "precision")
    values = {r["domain"]: {q["name"]: q["value"] for q in r["recorded"]} for r in rows}
    assert values["MoE routing"]["expert load mean"] == pytest.approx(5461.33, abs=0.01)
    assert values["MoE routing"]["used share of slots"] == pytest.approx(0.7975, abs=1e-3)
    assert values["EP communication"]["amplification over ideal"] >= 1.25
    assert values["weight publishing"]["BF16 weights"] == pytest.approx(9.99, abs=0.01)
    assert values["weight publishing"]["FP8 weights"] == pytest.approx(5.0, abs=0.01)
    assert values["precision"]["scale metadata"] == pytest.approx(0.61, abs=0.01)
    assert d["metrics"]["effective_tokens_per_s"] == pytest.approx(
        d["metrics"]["tokens_per_s"] * d["metrics"]["goodput_fraction"], rel=1e-5)


def test_ep_ratio_ignores_experts_topk_and_batch(p4096) -> None:
    """Seed 003 §6: 3·f·B/(b·F) depends on f, the link and F only."""
    ratio, padded = contract.ep_ratio(p4096, MAPPING_4096)
    r = p4096.spec.contract.routing
    link = 25e9 * r.effective_bandwidth_fraction
    assert ratio == pytest.approx(3 * 4096 * link / (2 * 1000e12 * r.effective_flops_fraction))
    bigger = MAPPING_4096.model_copy(update={"gbs": 512})
    assert contract.ep_ratio(p4096, bigger)[0] == ratio
    assert routing.ep_compute_comm_ratio(4096, link, 2, 500e12) == ratio
    assert padded < ratio


def test_bundled_64_is_a_test_bed() -> None:
    """The 64-device problem cannot hold the state: the state rule fails by N_min − 64 devices and the
    table says what the scale validates."""
    problem = load_problem(PROBLEMS / "5t-moe-asic-64.yaml")
    mapping = Mapping(gpus=64, gbs=8, seq_len=131072, tp=4, pp=4, cp=4, ep=16, etp=1, mbs=1, recompute="full")
    facts = facts_for(problem, mapping)
    rule = next(r for r in contract.contract_constraints(problem) if r.id == "contract-state-min-devices")
    assert rule.slack(facts) == 64 - contract.state_min_devices(problem)
    assert contract.state_min_devices(problem) > 1000
    rows = {r["domain"]: r for r in explain(problem, mapping, repairs=0).as_dict()["contract"]}
    assert rows["training state"]["verdict"] == "fails"
    assert "validates semantics" in rows["training state"]["detail"]
    assert rows["asynchronous coordination"]["verdict"] == "not checked"


def test_step_time_rules_have_floors() -> None:
    """Every STEP_TIME_RULES rule holds exactly when the step time reaches its floor."""
    problem = load_problem_text(FULL_CONTRACT, source="full-contract.yaml")
    rules = {r.id: r for r in contract.contract_constraints(problem)}
    assert set(contract.STEP_TIME_RULES) <= set(rules)
    for tp, cp, ep in ((1, 1, 4), (2, 2, 16), (4, 4, 4)):
        m = Mapping(gpus=32, gbs=64, seq_len=4096, tp=tp, pp=1, cp=cp, ep=ep, etp=1, mbs=1, recompute="none")
        step = contract.step_for(problem, m).step_time_s
        for rule_id in contract.STEP_TIME_RULES:
            floor = rules[rule_id].step_time_floor_s(problem, m)
            assert (rules[rule_id].measure(m, None) >= 0) == (step >= floor - 1e-9), rule_id


def _random_mapping(rng: random.Random) -> Mapping:
    """A mapping of the 32-device problem, sometimes with grids that do not divide."""
    return Mapping(gpus=32, gbs=64, seq_len=4096, tp=rng.choice((1, 2, 4)), pp=rng.choice((1, 2, 4)),
                   cp=rng.choice((1, 2, 4)), ep=rng.choice((1, 2, 4, 16, 3)), etp=1, mbs=rng.choice((1, 2)),
                   recompute=rng.choice(("none", "full")))


def test_python_and_cp_sat_agree_on_contract_rules() -> None:
    """BRIEF: each rule's Python verdict equals its CP-SAT verdict on fully specified mappings."""
    problem = load_problem_text(FULL_CONTRACT, source="full-contract.yaml")
    rng = random.Random(3)
    seen = set()
    for _ in range(25):
        m = _random_mapping(rng)
        facts = facts_for(problem, m)
        rules = [r for r in contract.contract_constraints(problem) if facts.ledger is not None or not r.needs_ledger()]
        for rule in rules:
            compiled = compile_rules(problem, [rule], fixed_domains(m), fixed=m)
            compiled.enforce_all()
            status = deterministic_solver(2.0).Solve(compiled.model)
            holds = rule.slack(facts) >= 0
            seen.add((rule.id, holds))
            assert (status in (cp_model.OPTIMAL, cp_model.FEASIBLE)) == holds, (rule.id, m)
    assert {holds for _, holds in seen} == {True, False}


@pytest.mark.parametrize(("section", "fix"), [
    ("routing: {skew: zipf}", "zipf_exponent"),
    ("rollout: {devices: 8, cluster_devices: 40}", "not both"),
    ("state: {offload: cpu}", "offload_gb_s"),
    ("long_context: {max_exposed_cp_share: 1.5}", "max_exposed_cp_share"),
])
def test_bad_contract_sections_are_input_errors(section: str, fix: str) -> None:
    """A malformed contract section is one InputError naming the field, never a traceback."""
    text = FULL_CONTRACT.split("contract:")[0] + "contract:\n  " + section + "\n"
    with pytest.raises(InputError) as err:
        load_problem_text(text, source="bad.yaml")
    assert fix in str(err.value)


def test_no_contract_section_no_contract_rules() -> None:
    """Problems without `contract:` get no contract rules, but still the ten-row table."""
    text = FULL_CONTRACT.split("contract:")[0]
    problem = load_problem_text(text, source="plain.yaml")
    assert contract.contract_constraints(problem) == ()
    m = Mapping(gpus=32, gbs=64, seq_len=4096, tp=2, pp=1, cp=1, ep=4, etp=1, mbs=1, recompute="none")
    rows = explain(problem, m, repairs=0).as_dict()["contract"]
    assert [r["domain"] for r in rows] == list(DOMAINS)
    assert {r["domain"]: r["verdict"] for r in rows}["asynchronous coordination"] == "not checked"


@pytest.mark.slow
def test_solve_4096_fills_the_contract(p4096) -> None:
    """`solve` on the 4,096-device problem returns feasible mappings, each with its §9 table."""
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.solver.search.solve import solve

    result = solve(p4096, CalibratedStageTimes(p4096), top=2, time_limit_s=60).as_dict()
    assert result["mappings"]
    for m in result["mappings"]:
        assert m["feasible"]
        assert [r["domain"] for r in m["contract"]] == list(DOMAINS)
