"""User-declared restrictions (`restrictions:` in a problem file): the safe expression language,
its slack, its errors, and agreement of Python and CP-SAT on random fixed mappings.

Source: the BRIEF ("keep every rule switchable"; users declare their own restrictions) and
constraints/rules/user.py's module docstring for the slack definitions; the bundled problem is seed 000's
problems/deepseek-v4-pro-8192.yaml (configuration B: TP1 PP8 CP1 EP64, D_a 1024).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from ortools.sat.python import cp_model

from parasol.constraints.core.base import Facts
from parasol.constraints.core.consts import model_consts
from parasol.constraints.core.decision_vars import DecisionVars
from parasol.constraints.rules.user import UserRestriction, user_constraints
from parasol.errors import InputError
from parasol.problems.derived import derive
from parasol.problems.loader import Problem, load_problem_text
from parasol.problems.mapping import DEGREES, Mapping

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
SEED_8192 = PROBLEMS / "deepseek-v4-pro-8192.yaml"
SOURCE = "restricted.yaml"
SOLVER = cp_model.CpSolver()  # one solver for every check: building one costs more than a solve
SOLVER.parameters.num_workers = 1


def with_restrictions(*items: str, packed: bool = True) -> Problem:
    """The bundled 8,192-GPU problem with a `restrictions:` list appended (each item one YAML line)."""
    text = SEED_8192.read_text(encoding="utf-8")
    if not packed:
        text = text.replace("packed_sequences: true", "packed_sequences: false")
    text += "\nrestrictions:\n" + "".join(f"  - {item}\n" for item in items)
    return load_problem_text(text, source=SOURCE, base_dir=PROBLEMS)


def facts(problem: Problem, mapping: Mapping) -> Facts:
    return Facts(problem, mapping, derive(problem.model, mapping), problem.spec.framework.options)


def seed_b(**changes: int | str) -> Mapping:
    """Seed 000's configuration B with changes."""
    values = {"gpus": 8192, "tp": 1, "pp": 8, "cp": 1, "ep": 64, "etp": 1, "mbs": 1, "gbs": 4096,
              "seq_len": 8192} | changes
    return Mapping(**values)


def cpsat_holds(problem: Problem, rule: UserRestriction, mapping: Mapping) -> bool:
    """Whether the rule's CP-SAT posting admits the mapping (single-value domains, literal forced)."""
    model = cp_model.CpModel()
    domains = {name: [getattr(mapping, name) if name != "etp" else mapping.expert_tp] for name in DEGREES}
    v = DecisionVars.create(model, mapping.gpus, mapping.gbs, mapping.seq_len, domains,
                            [mapping.recompute.value], model_consts(problem))
    enforce = model.NewBoolVar("enforce")
    model.Add(enforce == 1)
    rule.post(model, v, enforce)
    return SOLVER.Solve(model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def random_mapping(rng: random.Random) -> Mapping:
    """A fully specified mapping from small sets of degrees, valid and invalid alike."""
    pick = {"gpus": [64, 96, 1024, 8192], "tp": [1, 2, 3, 4, 8], "pp": [1, 2, 4, 8, 16], "cp": [1, 2, 3, 4],
            "ep": [1, 8, 32, 64, 128], "etp": [1, 2, 4], "vpp": [1, 2], "mbs": [1, 2, 3], "gbs": [1024, 4096],
            "seq_len": [4096, 8192], "recompute": ["none", "selective", "full"]}
    return Mapping(**{name: rng.choice(values) for name, values in pick.items()})


@pytest.mark.parametrize("expr", ["ep * etp <= 64", "cp == 1 or packed", "pp in (4, 8)",
                                  "gpus // (tp*pp*cp) >= 64"])
def test_python_and_cpsat_agree_on_random_mappings(expr: str) -> None:
    """200 random fully specified mappings per expression: slack >= 0 exactly when CP-SAT is feasible
    (the BRIEF: Python and CP-SAT must agree on every mapping)."""
    problems = (with_restrictions(f'"{expr}"'), with_restrictions(f'"{expr}"', packed=False))
    rng = random.Random(expr)
    outcomes = set()
    for _ in range(200):
        problem = rng.choice(problems)
        (rule,) = user_constraints(problem)
        mapping = random_mapping(rng)
        holds = rule.slack(facts(problem, mapping)) >= 0
        assert cpsat_holds(problem, rule, mapping) == holds, (expr, mapping)
        outcomes.add(holds)
    assert outcomes == {True, False}


def test_slack_is_in_the_expression_units() -> None:
    """a <= b gives b − a; on seed B, EP·ETP = 64 is exactly at the bound and D_a = 1024 is 960 over 64."""
    problem = with_restrictions('"ep * etp <= 64"', '"gpus // (tp*pp*cp) >= 64"', '"pp in (4, 8)"',
                                "\"not (recompute == 'full') and tp < 2\"")
    rules = {r.id: r for r in user_constraints(problem)}
    b = facts(problem, seed_b())
    assert [rules[f"user-{i}"].slack(b) for i in (1, 2, 3, 4)] == [0.0, 960.0, 0.0, 0.0]
    ep128 = facts(problem, seed_b(ep=128))
    assert rules["user-1"].slack(ep128) == -64.0
    assert rules["user-1"].message(ep128) == "`ep * etp <= 64` does not hold with ep=128, etp=1"
    assert rules["user-3"].slack(facts(problem, seed_b(pp=16))) == -8.0
    assert rules["user-4"].slack(facts(problem, seed_b(recompute="full"))) == -1.0


def test_cp_needs_packing_reads_the_problem_flag() -> None:
    """`packed` is training.packed_sequences: false makes the `or` depend on CP alone."""
    unpacked = with_restrictions('"cp == 1 or packed"', packed=False)
    (rule,) = user_constraints(unpacked)
    assert rule.slack(facts(unpacked, seed_b())) == 0.0
    assert rule.slack(facts(unpacked, seed_b(cp=4))) == -1.0
    assert not cpsat_holds(unpacked, rule, seed_b(cp=4))


def test_named_restriction_with_message_is_cited_to_its_line() -> None:
    """A {expr, id, message} restriction keeps its id and message; its citation is file:line."""
    problem = with_restrictions('{expr: "ep <= 64", id: ep-within-8-nodes, message: "EP64 spans 8 nodes at most"}')
    (rule,) = user_constraints(problem)
    line = problem.line_of("restrictions", 0)
    assert rule.id == "ep-within-8-nodes"
    assert rule.citation.source == f"{SOURCE}:{line}"
    verdict = rule.judge(facts(problem, seed_b(ep=128)))
    assert not verdict.holds
    assert verdict.message == "EP64 spans 8 nodes at most (`ep <= 64` does not hold with ep=128)"


def test_undefined_derived_sizes_do_not_hold() -> None:
    """dp_attn is read only when whole (TP·PP·CP divides N); otherwise the restriction fails on both sides."""
    problem = with_restrictions('"dp_attn >= 1"')
    (rule,) = user_constraints(problem)
    odd = seed_b(gpus=96, cp=8)
    assert rule.slack(facts(problem, odd)) == -1.0
    assert "not a whole number" in rule.message(facts(problem, odd))
    assert not cpsat_holds(problem, rule, odd)


@pytest.mark.parametrize(("expr", "token"), [
    ("__import__('os')", "`__import__('os')` calls a function"),
    ("tp.real", "`tp.real` reads an attribute"),
    ("[1][0]", "`[1][0]` indexes a value"),
    ("lambda: 1", "`lambda: 1` defines a function"),
    ("open('x')", "`open('x')` calls a function"),
    ("foo", "`foo` is not a known name"),
    ("tp / 2 > 1", "`tp / 2` uses `/`"),
    ("tp", "`tp` is not a condition"),
])
def test_rejected_expressions_name_file_line_and_token(expr: str, token: str) -> None:
    """Nothing is executed: anything outside the language is an InputError with file, line and token."""
    problem = with_restrictions('"pp in (4, 8)"', f'"{expr}"')
    with pytest.raises(InputError) as caught:
        user_constraints(problem)
    error = caught.value
    assert error.file == SOURCE
    assert error.line == problem.line_of("restrictions", 1)
    assert token in str(error)
    assert error.fix


def test_duplicate_ids_are_rejected() -> None:
    """Two restrictions may not share a rule id."""
    problem = with_restrictions('{expr: "tp == 1", id: same}', '{expr: "pp == 8", id: same}')
    with pytest.raises(InputError, match="reuses the id `same`"):
        user_constraints(problem)
