"""The row search on two cores (solver/search/halves.py): the halves keep each group of rows together, the
two searches share the rows they cut as dominators, and the answer is the one search's, ties included,
whether the worker answers, fails or dies."""

from __future__ import annotations

import os

import pytest

import parasol.solver.search.halves as halves_module
from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.loader import load_problem_text
from parasol.solver.search.costs import block_kinds, interval_counts, memory_key, prefix_counts, usable_mb
from parasol.solver.search.halves import SHARED_GROUPS, SHARED_KEY, halves, search_on_cores, splits
from parasol.solver.search.row_search import RowSearch, rows_pass_rules
from parasol.solver.search.solve import solve
from parasol.solver.search.space import enumerate_rows

LLAMA = """
model: llama-2-7b
training: {seq_len: 4096, global_batch: 1024}
hardware: {preset: a100-hgx, gpus: 64}
"""
V4_PRO = """
model: deepseek-v4-pro
training: {seq_len: 8192, global_batch: 4096, optimizer: muon, packed_sequences: true}
hardware: {preset: h800-hgx, gpus: 8192}
framework: {rule_packs: [megatron-core, deepseek-v4], options: {cp_partition_mode: contiguous}}
"""
MIXTRAL = """
model: mixtral-8x7b
training: {seq_len: 4096, global_batch: 256}
hardware: {preset: h100-hgx, gpus: 64}
"""

pytestmark = pytest.mark.skipif(not splits(halves_module.SPLIT_ROWS), reason="needs two cores on Linux")


def _answer(problem, **kwargs) -> tuple:  # noqa: ANN001
    """What a solve prints of its answer: status, and each mapping's rank, values and settings, in order."""
    result = solve(problem, CalibratedStageTimes(problem), top=10, time_limit_s=600, **kwargs)
    return result.status, [(m.pareto_rank, m.front_values, m.settings) for m in result.mappings]


@pytest.fixture(scope="module")
def problems() -> list:
    return [load_problem_text(LLAMA), load_problem_text(V4_PRO)]


@pytest.fixture(scope="module")
def one_core(problems: list) -> list:
    """Each problem's answer from one search in this process."""
    return [_answer(p, two_cores=False) for p in problems]


def test_halves_keep_each_group_whole_and_alternate(problems: list) -> None:
    """Every row goes to one half, in its order; the rows of one group go to the same half, and the groups alternate
    in the order they first come. The groups share TP, ETP and EP (the parameter states' and compute floors'
    memos) where an MoE space has SHARED_GROUPS of them (DeepSeek-V4-Pro on 8,192 GPUs: 72, Mixtral 8x7B on 64:
    35), else their memory tables (costs.memory_key: Llama 2 7B has one group per TP value). Halves of alike
    rows (memory tables' groups) exchange every cut, with less lag, than halves of unlike grids."""
    for problem, key in zip([*problems, load_problem_text(MIXTRAL)], (memory_key, SHARED_KEY, SHARED_KEY), strict=True):
        rows = enumerate_rows(problem)
        assert (len({SHARED_KEY(r) for r in rows}) >= SHARED_GROUPS) == (key is SHARED_KEY)
        first, second, cadence = halves(rows)
        assert cadence == (halves_module.BY_SHARED_GROUPS if key is SHARED_KEY else halves_module.BY_TABLE_GROUPS)
        assert sorted(first + second) == sorted(rows) and len(first + second) == len(rows)
        position = {row: i for i, row in enumerate(rows)}
        for half in (first, second):
            assert list(half) == sorted(half, key=position.__getitem__)
        in_first, in_second = {key(r) for r in first}, {key(r) for r in second}
        assert not in_first & in_second
        order = list(dict.fromkeys(key(r) for r in rows))
        assert all((k in in_first) == (i % 2 == 0) for i, k in enumerate(order))


def test_two_halves_give_the_answer_of_one_search(problems: list, one_core: list) -> None:
    """A dense and a DeepSeek-V4 problem (interleaved cuts) give the same answer, mapping for mapping, searched in
    two halves on two cores as in one search: the halves cut different rows, but every row the answer holds."""
    for problem, alone in zip(problems, one_core, strict=True):
        assert len(enumerate_rows(problem)) >= halves_module.SPLIT_ROWS
        assert alone[0] == "optimal" and _answer(problem) == alone


@pytest.mark.parametrize("cuts", [halves_module.BY_TABLE_GROUPS.cuts, halves_module.BY_SHARED_GROUPS.cuts])
def test_rows_the_peer_cut_beat_rows_here(problems: list, cuts: int) -> None:
    """A search takes the rows its peer cut in as dominators at an exchange (RowSearch.exchange, every `cuts`
    rows cut, as the peer's cadence says, later steps of rows cut before riding along): `top` rule-feasible rows'
    steps there beat a point here, as the search's own would; before the exchange they do not."""
    class Peer:
        def __init__(self, cut: list) -> None:
            self.cut, self.sent, self.cuts = cut, [], cuts

        def exchange(self, cut: list) -> list:
            self.sent.append(cut)
            taken, self.cut = self.cut, []
            return taken

    problem = problems[0]
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    passing = [r for r in enumerate_rows(problem)[:200] if rows_pass_rules(problem, r)][:3]
    assert len(passing) == 3
    search = RowSearch(problem, CalibratedStageTimes(problem), counts, usable_mb(problem), 3, True)
    search.peer = peer = Peer([(i, row, [(10, 10), (20, 5)]) for i, row in enumerate(passing)])
    search.exchange()
    assert not peer.sent and not search._beaten((50, 50))
    search.unshared = [(i, passing[0], [(30, 30)]) for i in range(cuts - 1)]
    search.cut_since = cuts - 1
    search.exchange()
    assert not peer.sent and not search._beaten((50, 50))
    search.unshared.append((cuts - 1, passing[0], [(30, 30)]))
    search.exchange()
    assert not peer.sent
    search.cut_since += 1
    search.exchange()
    assert peer.sent == [[(i, passing[0], [(30, 30)]) for i in range(cuts)]] and not search.unshared
    assert search.cut_since == 0
    assert search._beaten((50, 50)) and search._beaten((21, 5)) and not search._beaten((15, 5))
    assert not search.rows and search._dominators == 3


def test_two_halves_cut_the_same_rows_on_every_run(problems: list) -> None:
    """The exchanges go in lock step, so the rows each half cuts, and the counts solve prints of them, are the
    same whatever the two processes' pace."""
    problem = problems[1]
    runs = [solve(problem, CalibratedStageTimes(problem), top=10, time_limit_s=600) for _ in range(2)]
    counts = [(r.rows_fitting, r.rows_cut, r.rows_refused, r.master_solves) for r in runs]
    assert counts[0] == counts[1]


def test_a_worker_error_is_raised_here(problems: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error in the worker's half reaches the caller as itself, not as a lost half."""
    parent, search_rows = os.getpid(), halves_module.search_rows

    def failing(search, rows, deadline, on_screened=None):  # noqa: ANN001, ANN202
        if os.getpid() != parent:
            raise ArithmeticError("the worker's half failed")
        return search_rows(search, rows, deadline, on_screened)

    monkeypatch.setattr(halves_module, "search_rows", failing)
    with pytest.raises(ArithmeticError, match="worker's half"):
        solve(problems[0], CalibratedStageTimes(problems[0]), top=10, time_limit_s=600)


def test_a_worker_that_dies_has_its_half_searched_here(problems: list, one_core: list,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that ends without answering (killed, out of memory) leaves its half to this process, which
    searches it in the time left: the same answer."""
    parent, search_rows = os.getpid(), halves_module.search_rows

    def dying(search, rows, deadline, on_screened=None):  # noqa: ANN001, ANN202
        if os.getpid() != parent:
            os._exit(1)
        return search_rows(search, rows, deadline, on_screened)

    monkeypatch.setattr(halves_module, "search_rows", dying)
    assert _answer(problems[0]) == one_core[0]


def test_search_on_cores_without_a_second_search_is_one_search(problems: list) -> None:
    """No `fresh` search (solve(two_cores=False), a sweep's sizes): one search over every row, in order."""
    problem = problems[0]
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    rows = enumerate_rows(problem)
    search = RowSearch(problem, CalibratedStageTimes(problem), counts, usable_mb(problem), 10, True)
    seen = []
    assert search_on_cores(search, None, rows, float("inf"), lambda n, listed: seen.append((n, listed))) == ()
    assert seen[-1] == (len(rows), len(rows)) and search.rows and search.peer is None


def test_a_cut_off_search_in_halves_bounds_the_space(problems: list, one_core: list,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut off (forced here: each half screens only its first 300 rows, as a time limit would leave it), the
    two halves' answer is `feasible`, every bound at most its mapping's value and the first at most the complete
    search's optimum: the rows either half never screened are bounded by their compute floors and the rows
    either left waiting by theirs (search_on_cores' unscreened rows, RowSearch.absorb's waiting floors)."""
    problem, (_, complete) = problems[1], one_core[1]
    best, search_rows = complete[0][1]["step_time"], halves_module.search_rows
    monkeypatch.setattr(halves_module, "search_rows",
                        lambda search, rows, deadline, on_screened=None: search_rows(search, rows[:300], deadline,
                                                                                     on_screened))
    result = solve(problem, CalibratedStageTimes(problem), top=10, time_limit_s=600)
    assert result.status == "feasible" and result.rows_screened == 600 < result.rows and result.mappings
    bounds = [m.bound["step_time"] for m in result.mappings]
    assert all(b is not None and b <= m.step_time_objective_s for b, m in zip(bounds, result.mappings, strict=True))
    assert bounds[0] <= best <= result.mappings[0].step_time_objective_s
