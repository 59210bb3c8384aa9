"""Issue 15: degree values no rule-abiding mapping takes are ruled out before any row is listed
(solver/search/domains.py), so a default-space DeepSeek-V4 problem lists thousands of rows instead of
tens of thousands, and the answer stays the one the master would give over every row."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from parasol.constraints.evaluate import evaluate
from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.loader import load_problem, load_problem_text
from parasol.solver.search.domains import rule_domains
from parasol.solver.search.program import program_rules
from parasol.solver.search.solve import solve, why_not_optimal
from parasol.solver.search.space import enumerate_rows, search_domains

ROOT = Path(__file__).resolve().parents[1]

V4_DEFAULT = """
model: deepseek-v4-pro
training: {seq_len: 8192, global_batch: 4096, precision: bf16, optimizer: muon, packed_sequences: true}
hardware: {preset: h800-hgx, gpus: 8192}
framework:
  rule_packs: [megatron-core, deepseek-v4]
  options: {cp_partition_mode: contiguous}
"""


def passes_program_rules(problem, row) -> bool:  # noqa: ANN001 - Problem, Row
    """The Python verdict of every rule the master posts, on the row with the default cut."""
    mapping = row.mapping(problem, row.default_cut(problem))
    return evaluate(problem, mapping, program_rules(problem)).feasible


def test_v4_default_space_rules_out_tensor_parallelism() -> None:
    """The V4 hybrid attention runs at TP 1 only (dsv4-tp1): every other TP value is ruled out, and so is
    every EP the 384 experts' grids cannot take with it."""
    problem = load_problem_text(V4_DEFAULT)
    domains = search_domains(problem)
    ruled = rule_domains(problem, domains, math.inf)
    assert ruled.degrees["tp"] == (1,)
    assert ("tp", "2") in ruled.dropped and ("tp", "8") in ruled.dropped
    assert set(ruled.degrees["pp"]) <= set(domains["pp"])


@pytest.mark.parametrize("source", ["v4-default", "deepseek-v4-pro-1024", "qwen3-30b-a3b-h100-64",
                                    "llama-3.1-70b-h100-256"])
def test_ruled_out_values_hold_no_rule_abiding_row(source: str) -> None:
    """Soundness against the Python verdicts: no row holding a ruled-out value meets every posted rule,
    and every row kept with values all allowed is listed (rows are only ever dropped for a ruled-out value);
    RuleDomains.kept, which judges each distinct degrees once, keeps the rows holds keeps."""
    problem = load_problem_text(V4_DEFAULT) if source == "v4-default" else \
        load_problem(ROOT / "problems" / f"{source}.yaml")
    ruled = rule_domains(problem, search_domains(problem), math.inf)
    rows = enumerate_rows(problem)
    dropped = [r for r in rows if not ruled.holds(r)]
    rng = random.Random(15)
    for row in rng.sample(dropped, min(150, len(dropped))):
        assert not passes_program_rules(problem, row), row
    kept = set(enumerate_rows(problem, ruled.degrees))
    assert {r for r in rows if ruled.holds(r)} <= kept
    assert ruled.kept(rows) == tuple(r for r in rows if ruled.holds(r))


def test_rules_refusing_every_row_say_so() -> None:
    """When the rules leave no row, the answer is infeasible (proved) and the reason is the rules, not the
    folding identity."""
    problem = load_problem_text(V4_DEFAULT.replace("gpus: 8192}", "gpus: 8192}\nsearch: {tp: [2, 4]}"))
    result = solve(problem, CalibratedStageTimes(problem), time_limit_s=30)
    assert result.status == "infeasible" and result.rows > 0 and result.rules_refuse_all
    reason = why_not_optimal(result, problem, 30)
    assert f"none of the {result.rows:,} degree rows meets every rule" in reason and "explain" in reason


def test_values_ruled_out_are_named_in_the_answer() -> None:
    """Values ruled out by the rules are named in the answer's search statistics; the front is the one
    the pinned search (TP 1) gives."""
    source = (ROOT / "problems" / "deepseek-v4-pro-1024.yaml").read_text(encoding="utf-8")
    widened = load_problem_text(source.replace("  tp: 1                         #", "  tp: [1, 2, 4]                 #"))
    pinned = load_problem(ROOT / "problems" / "deepseek-v4-pro-1024.yaml")
    result = solve(widened, CalibratedStageTimes(widened), top=3, time_limit_s=60)
    assert {"tp=2", "tp=4"} <= set(result.as_dict()["search"]["ruled_out"])
    reference = solve(pinned, CalibratedStageTimes(pinned), top=3, time_limit_s=60)
    assert result.status == reference.status == "optimal"
    assert [m.front_values for m in result.mappings] == [m.front_values for m in reference.mappings]
