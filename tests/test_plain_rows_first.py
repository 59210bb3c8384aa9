"""Issue 15: once an interleaved row's fit or cut search is left open (a hybrid model's rows, whose cuts take
seconds), the rows without interleaving come up first until `top` rows have steps (RowSearch._next), so a
search the time limit stops still returns mappings; a complete search gives the same answer either way."""

from __future__ import annotations

import dataclasses

import pytest

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.loader import load_problem_text
from parasol.solver.search import row_search
from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, usable_mb
from parasol.solver.search.row_search import RowSearch, search_rows
from parasol.solver.search.solve import solve
from parasol.solver.search.space import enumerate_rows

LLAMA = """
model: llama-2-7b
training: {seq_len: 4096, global_batch: 64}
hardware: {preset: a100-hgx, gpus: 64}
search: {tp: [1, 2], cp: 1, mbs: 1, pp: [4, 8], vpp: [1, 2, 4]}
"""
"""Few microbatches per pipeline (GBS 64 over DP 8-16), so interleaving's smaller bubble puts interleaved rows
first."""
TOP = 3


def _cut_order(problem, monkeypatch: pytest.MonkeyPatch, open_interleaved: bool) -> tuple[list, list]:  # noqa: ANN001
    """The rows one search cuts, in order, with whether each has steps; `open_interleaved`: every interleaved
    row's staircase is reported unproved (as when its search runs out of budget), its steps unchanged."""
    if open_interleaved:
        judged = RowSearch._judged

        def unproved(self, chosen, c, whole, admitted):  # noqa: ANN001, ANN202
            stairs = judged(self, chosen, c, whole, admitted)
            return dataclasses.replace(stairs, proved=False) if chosen.vpp > 1 else stairs

        monkeypatch.setattr(RowSearch, "_judged", unproved)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    search = RowSearch(problem, CalibratedStageTimes(problem), counts, usable_mb(problem), TOP, True)
    search_rows(search, enumerate_rows(problem), float("inf"))
    monkeypatch.undo()
    return search.rows, [bool(s.points) for s in search.staircases]


def test_plain_rows_come_first_once_an_interleaved_search_is_left_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """Best first, the search cuts interleaved rows among its first `top` rows with steps; with those left
    open, every row cut after the first until `top` rows have steps is a plain one."""
    problem = load_problem_text(LLAMA)
    rows, stepped = _cut_order(problem, monkeypatch, open_interleaved=False)
    first = next(i for i, row in enumerate(rows) if row.vpp > 1)
    assert sum(stepped[:first]) < TOP, "the best-first order must reach an interleaved row early"
    rows, stepped = _cut_order(problem, monkeypatch, open_interleaved=True)
    first = next(i for i, row in enumerate(rows) if row.vpp > 1)
    enough = next(i for i in range(len(rows)) if sum(stepped[:i + 1]) >= TOP)
    assert first < enough
    assert all(row.vpp == 1 for row in rows[first + 1:enough + 1])


def test_open_interleaved_searches_leave_a_complete_answer_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The order rows are cut in never changes a complete search's answer."""
    problem = load_problem_text(LLAMA)

    def answer() -> list:
        result = solve(problem, CalibratedStageTimes(problem), top=TOP, time_limit_s=600, two_cores=False)
        return [m.as_dict() for m in result.mappings]

    plain = answer()
    original = RowSearch._next

    def plain_first(self: RowSearch) -> tuple:
        self._cut_short = True
        return original(self)

    monkeypatch.setattr(row_search.RowSearch, "_next", plain_first)
    assert answer() == plain
