"""Issue 15: a row that comes up to be cut but breaks a rule the master posts is dropped before its step
floor, fit search and cut (RowSearch._refused). The master could never choose it, so the answer is the one
the search gives when it cuts those rows too, and each row it refuses is one explain finds infeasible."""

from __future__ import annotations

import pytest

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.loader import load_problem_text
from parasol.solver.diagnose.explain import explain
from parasol.solver.search import row_search
from parasol.solver.search import solve as solve_module
from parasol.solver.search.solve import solve

SMALL_BATCH = """
model: llama-2-7b
training: {seq_len: 4096, global_batch: 16}
hardware: {preset: h100-hgx, gpus: 32}
search: {tp: [1, 2], cp: 1}
"""
"""Few microbatches (GBS 16), so many interleaved rows break Megatron's microbatch-group rules (PP <= m)."""


def _answer(result) -> list[dict]:
    return [m.as_dict() for m in result.mappings]


@pytest.fixture(scope="module")
def problem():
    return load_problem_text(SMALL_BATCH)


@pytest.fixture(autouse=True)
def listing_every_row(monkeypatch):
    """The rows the degree rules would drop before pricing (tests/test_degree_rules.py) listed, so that they
    come up to be cut and are refused there."""
    monkeypatch.setattr(solve_module, "meeting_degree_rules", lambda problem, rows: rows)


def test_refused_rows_leave_the_answer_as_cutting_them_does(problem, monkeypatch):
    refusing = solve(problem, CalibratedStageTimes(problem), top=6, time_limit_s=120)
    assert refusing.status == "optimal"
    assert refusing.rows_refused > 0
    with monkeypatch.context() as patch:
        patch.setattr(row_search.RowSearch, "_refused", lambda self, row: False)
        cutting = solve(problem, CalibratedStageTimes(problem), top=6, time_limit_s=120)
    assert cutting.status == "optimal" and cutting.rows_refused == 0
    assert _answer(refusing) == _answer(cutting)
    assert refusing.rows_cut < cutting.rows_cut <= refusing.rows_cut + refusing.rows_refused


def test_every_refused_row_is_one_explain_finds_infeasible(problem, monkeypatch):
    refused_rows = []
    refused = row_search.RowSearch._refused

    def recorded(self, row):
        answer = refused(self, row)
        if answer:
            refused_rows.append(row)
        return answer

    monkeypatch.setattr(row_search.RowSearch, "_refused", recorded)
    result = solve(problem, CalibratedStageTimes(problem), top=6, time_limit_s=120, two_cores=False)
    assert len(refused_rows) == result.rows_refused > 0
    for row in refused_rows:
        mapping = row.mapping(problem, row.default_cut(problem))
        assert not explain(problem, mapping, repairs=0).feasible
    assert all(m.explanation.feasible for m in result.mappings)
