"""`parasol solve` on the bundled problems (issue 5): feasible, uneven, memory checked stage by stage,
the BRIEF's JSON contract, deterministic, and on GB200 NVL72 EP groups kept inside NVLink domains
unless the mapping pays for crossing them."""

from __future__ import annotations

import csv
import functools
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.loader import Problem, load_problem, load_problem_text
from parasol.problems.mapping import Mapping
from parasol.solver.cli import main
from parasol.solver.diagnose.explain import explain
from parasol.solver.search.costs import TIME_UNIT_S, block_kinds, interval_counts, prefix_counts
from parasol.solver.search.pareto import Point
from parasol.solver.search.solve import (
    RowDegrees,
    SolveResult,
    bound_as_printed,
    exchange_step_s,
    front_caps,
    held_weights_gb,
    open_bound,
    priced_first,
    solve,
    why_not_optimal,
)
from parasol.solver.search.space import Row, default_domains, enumerate_rows

V4_1024 = "problems/deepseek-v4-pro-1024.yaml"
GB200 = "problems/deepseek-v4-pro-gb200-nvl72.yaml"


@pytest.fixture(scope="module")
def v4_result():
    problem = load_problem(V4_1024)
    return problem, solve(problem, CalibratedStageTimes(problem), top=6)


@pytest.mark.slow
def test_v4_1024_returns_feasible_uneven_mappings(v4_result) -> None:
    """DeepSeek-V4-Pro, V4 rules, 1,024 GPUs: feasible mappings whose cuts are uneven, with the last
    stage (head, loss, MTP) and the first (embedding) lighter, and memory checked stage by stage."""
    problem, result = v4_result
    assert result.status == "optimal" and result.mappings
    for sm in result.mappings:
        data = sm.as_dict()
        layout = data["mapping"]["layout"]
        assert sum(layout) == problem.model.num_layers == 61
        assert len(set(layout)) > 1
        assert layout[-1] < max(layout)
        assert data["feasible"] and not data["violations"]
        usable = data["metrics"]["usable_hbm_gb"]
        assert len(data["stages"]) == data["mapping"]["pp"]
        assert all(stage["memory_gb"] <= usable for stage in data["stages"])
        assert data["pareto_rank"] >= 1
        ledger = data["metrics"]["peak_memory_gb"]
        assert 0 <= sm.peak_memory_objective_gb - ledger <= 0.001 * ledger + 0.01  # tables round up per MB


@pytest.mark.slow
def test_front_is_non_dominated_and_ranked(v4_result) -> None:
    """Rank-1 points trade step time against memory: sorted by time, memory strictly falls."""
    _, result = v4_result
    first = [sm for sm in result.mappings if sm.pareto_rank == 1]
    times = [sm.step_time_objective_s for sm in first]
    memory = [sm.peak_memory_objective_gb for sm in first]
    assert times == sorted(times)
    assert all(a > b for a, b in zip(memory, memory[1:], strict=False))
    assert [sm.pareto_rank for sm in result.mappings] == sorted(sm.pareto_rank for sm in result.mappings)


@pytest.mark.slow
def test_solve_is_deterministic(v4_result) -> None:
    """Same input, same answer."""
    problem, result = v4_result
    again = solve(problem, CalibratedStageTimes(problem), top=6)
    assert [m.as_dict()["mapping"] for m in again.mappings] == [m.as_dict()["mapping"] for m in result.mappings]


@pytest.mark.slow
def test_progress_reports_rows_priced_then_fronts_found() -> None:
    """The progress callback (the terminal bar of `parasol solve`) hears every row screened, in order,
    then each Pareto front with the mappings found so far; the answer is the same as without it. In one search:
    searched in two halves (solver/search/halves.py) it hears this process's half, to its end."""
    problem = load_problem(V4_1024)
    halves = []
    solve(problem, CalibratedStageTimes(problem), top=6, progress=halves.append)
    screened = [p for p in halves if not p.fronts]
    assert screened and screened[-1].rows_screened == screened[-1].rows_total
    heard = []
    result = solve(problem, CalibratedStageTimes(problem), top=6, progress=heard.append, two_cores=False)
    rows = [p for p in heard if not p.fronts]
    fronts = [p for p in heard if p.fronts]
    assert [p.rows_screened for p in rows] == list(range(1, len(rows) + 1))
    assert rows[-1].rows_screened == result.rows_screened
    assert [p.fronts for p in fronts] == list(range(1, len(fronts) + 1))
    assert fronts[-1].mappings == len(result.mappings)
    plain = solve(problem, CalibratedStageTimes(problem), top=6)
    assert [m.front_values for m in plain.mappings] == [m.front_values for m in result.mappings]


def test_row_ordering_stops_at_the_pricing_deadline() -> None:
    """The most-promising-first ordering is inside the time limit: past its deadline the remaining rows
    keep their listing order (issue 13: the limit bounds the whole command, ordering included)."""
    problem = load_problem(V4_1024)
    rows = enumerate_rows(problem)
    model = CalibratedStageTimes(problem)
    totals = interval_counts(prefix_counts(problem, block_kinds(problem)))[0, -1]
    assert priced_first(problem, rows, model, totals, deadline=0.0) == rows
    ordered = priced_first(problem, rows, model, totals)
    assert sorted(ordered) == sorted(rows) and ordered != rows


def test_rows_whose_exchanges_cross_the_network_are_screened_later() -> None:
    """The screening order adds the EP exchange seconds no rank hides to the ideal compute (which is the
    same for both rows): of two rows that differ only in EP, the one whose EP group leaves the 8-GPU node
    comes later."""
    problem = load_problem_text("model: qwen3-30b-a3b\ntraining: {seq_len: 4096, global_batch: 256}\n"
                                "hardware: {preset: h100-hgx, gpus: 64}\n")
    model = CalibratedStageTimes(problem)
    totals = interval_counts(prefix_counts(problem, block_kinds(problem)))[0, -1]
    inside, across = Row(2, 1, 1, 1, 8, 1, 1, "none"), Row(2, 1, 1, 1, 16, 1, 1, "none")
    assert (exchange_step_s(problem, model, (across,), RowDegrees.of((across,)), totals)[0]
            > exchange_step_s(problem, model, (inside,), RowDegrees.of((inside,)), totals)[0] > 0)
    assert priced_first(problem, (across, inside), model, totals) == (inside, across)


def test_rows_that_fit_only_under_fsdp_take_turns_with_the_rest() -> None:
    """Where FSDP is open, rows whose weights and gradients fit only when FSDP shards them are screened in
    turns with the rows that fit as they are (a 235B MoE on 256 GPUs has its fastest mappings at PP1 EP1
    under FSDP), and rows that fit neither way come last; with FSDP closed (Muon) the former come last too."""
    text = ("model: qwen3-235b-a22b\ntraining: {{seq_len: 4096, global_batch: 1024, optimizer: {opt}}}\n"
            "hardware: {{preset: h100-hgx, gpus: 256}}\n")
    for optimizer, takes_turns in (("adam", True), ("muon", False)):
        problem = load_problem_text(text.format(opt=optimizer))
        usable = problem.hardware.gpu.usable_hbm_gb
        model = CalibratedStageTimes(problem)
        totals = interval_counts(prefix_counts(problem, block_kinds(problem)))[0, -1]
        rows = (Row(4, 1, 4, 1, 8, 1, 1, "none"), Row(2, 1, 8, 1, 16, 1, 1, "none"),
                Row(1, 1, 1, 1, 1, 1, 4, "full"), Row(1, 1, 1, 1, 2, 1, 4, "full"))
        own = (held_weights_gb(problem, RowDegrees.of(rows)) <= usable).tolist()
        sharded = (held_weights_gb(problem, RowDegrees.of(rows), sharded=True) <= usable).tolist()
        assert own == [True, True, False, False] and all(sharded)
        kinds = [own[rows.index(r)] for r in priced_first(problem, rows, model, totals)]
        assert kinds == ([True, False, True, False] if takes_turns else [True, True, False, False])


def test_gb200_ep_groups_stay_in_a_domain_or_pay() -> None:
    """GB200 NVL72 (72-GPU domains of 4-GPU nodes): a returned mapping whose EP group straddles two
    NVLink domains says so in its groups and pays for it: its exposed EP time is more than twice that
    of the same mapping with a domain-aligned EP24; the fastest mapping keeps EP in one domain, and runs
    flex on Hybrid-EP (DeepEP reaches 8 ranks over NVLink, so even EP24 in one domain goes to the NICs
    under it). EP48 against EP24 shows the same price on a fixed mapping."""
    problem = load_problem(GB200)
    result = solve(problem, CalibratedStageTimes(problem), top=4)
    assert result.mappings
    hybrid = result.mappings[0].explanation.problem
    assert hybrid.spec.framework.options.moe_flex_dispatcher_backend == "hybridep"

    def ep_seconds(mapping: Mapping, chosen: Problem = hybrid) -> tuple[bool, float]:
        data = explain(chosen, mapping, repairs=0).as_dict()
        return {g["group"]: g for g in data["groups"]}["ep"]["inside_nvlink_domain"], \
            data["step_time"]["breakdown_s"]["ep"]

    assert ep_seconds(result.mappings[0].explanation.mapping)[0]
    for sm in result.mappings:
        inside, seconds = ep_seconds(sm.explanation.mapping, sm.explanation.problem)
        if not inside:
            assert seconds > 2 * ep_seconds(sm.explanation.mapping.model_copy(update={"ep": 24}))[1]
    fixed = Mapping(gpus=1152, tp=1, pp=8, cp=2, ep=24, etp=1, mbs=1, gbs=4608, seq_len=8192, recompute="full")
    aligned, straddling = ep_seconds(fixed), ep_seconds(fixed.model_copy(update={"ep": 48}))
    assert aligned[0] and not straddling[0]
    assert straddling[1] > 2 * aligned[1]
    assert ep_seconds(fixed, problem)[1] > 2 * aligned[1]


@pytest.mark.slow
def test_cli_solve_json_out_and_rank_map(tmp_path) -> None:
    """`solve --json` prints {"status", "mappings": [... "pareto_rank"]}; --out and --rank-map write files."""
    rank_map = tmp_path / "ranks.csv"
    result = CliRunner().invoke(main, ["solve", V4_1024, "--top", "2", "--json", "--out", str(tmp_path),
                                       "--rank-map", str(rank_map)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "optimal"
    assert all("pareto_rank" in m and "constraints" in m for m in data["mappings"])
    assert (tmp_path / "deepseek-v4-pro-1024.json").is_file()
    rows = list(csv.DictReader(rank_map.open()))
    assert len(rows) == 1024
    assert rows[9] == {"rank": "9", "node": "1", "local_gpu": "1", "nvlink_domain": "1", "pp_stage": "0",
                       "tp": "0", "cp": str(9 % data["mappings"][0]["mapping"]["cp"]),
                       "dp": str(9 // data["mappings"][0]["mapping"]["cp"]),
                       "etp": "0", "ep": "9", "edp": "0"}


def test_cli_solve_infeasible_exits_1(tmp_path) -> None:
    """A problem no mapping fits (PP pinned to 1: 61 blocks of DeepSeek-V4-Pro on one stage) reports
    status infeasible and exit code 1."""
    text = Path(V4_1024).read_text(encoding="utf-8").replace("  pp: [4, 8, 16]", "  pp: 1")
    path = tmp_path / "tight.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["solve", str(path), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["status"] == "infeasible"
    assert "fits in memory with any stage cut" in data["reason"]


def test_cli_solve_says_why_nothing_folds(tmp_path) -> None:
    """196 GB200 GPUs (49 nodes of 4) with GBS 512: no degree tuple folds, and the answer names the odd factor
    49 that neither a batch divisor nor the powers of two of TP and CP can take, and PP only one 7 of (49 is
    past Llama 2 13B's 40 blocks). 288 GPUs (odd factor 9) fold through PP 9, 18 or 36."""
    text = ("model: llama-2-13b\ntraining: {seq_len: 4096, global_batch: 512}\n"
            "hardware: {preset: gb200-nvl72, gpus: %d}\n")
    path = tmp_path / "g196.yaml"
    path.write_text(text % 196, encoding="utf-8")
    result = CliRunner().invoke(main, ["solve", str(path)])
    assert result.exit_code == 1
    assert "odd factor 49" in " ".join(result.output.split())
    assert {9, 18, 36} <= set(default_domains(load_problem_text(text % 288))["pp"])


def test_time_limit_returns_best_found_marked_feasible(tmp_path) -> None:
    """A solver time-out returns the mappings found so far, marked `feasible`, not `optimal`: here
    the limit stops the step-time pricing after the most promising rows of a default search space (VPP
    kept to 1-2: a VPP 3+ row's exact cut search alone can outlast the limit). The limit is a share of
    the complete search's time on this machine, so the search is cut off (and has found mappings, which
    takes under a fifth of it) on a fast machine as on a loaded one."""
    path = tmp_path / "llama.yaml"
    path.write_text("model: llama-3.1-8b\ntraining: {seq_len: 4096, global_batch: 256}\n"
                    "hardware: {preset: h100-hgx, gpus: 64}\nsearch: {vpp: [1, 2]}\n", encoding="utf-8")
    complete = load_problem(path)
    whole = solve(complete, CalibratedStageTimes(complete), top=3, time_limit_s=120)
    assert whole.status == "optimal"
    problem = load_problem(path)
    result = solve(problem, CalibratedStageTimes(problem), top=3, time_limit_s=0.4 * whole.seconds)
    assert result.status == "feasible"
    assert result.mappings
    assert all(m.as_dict()["feasible"] for m in result.mappings)
    objective = result.mappings[0].as_dict()["objective"]
    assert not objective["proved_optimal"]
    assert objective["front"]["step_time"] == objective["step_time_s"]
    bound = objective["bound"]["step_time"]
    if bound is None:
        assert objective["gap"] is None and "no bound holds" in why_not_optimal(result, problem, 0.3)
    else:
        said = why_not_optimal(result, problem, 0.3)
        shown = float(re.search(r"no mapping of the space is below ([0-9.]+) s", said).group(1))
        assert bound <= objective["step_time_s"]
        assert bound - TIME_UNIT_S - 1e-3 < shown <= min(round(m.explanation.metrics()["step_time_s"], 3)
                                                      for m in result.mappings)
        assert ("bounded by their compute" in said) == (result.rows_screened < result.rows)


def test_a_cut_off_bound_holds_for_the_printed_values() -> None:
    """The master bounds objective units, and a value is held as its units rounded up, so a bound of B units only
    says the value exceeds B − 1 units: Nemotron-H 8B on 64 H100 cut off at 5 s had B = 90,645 (9.0645 s) and a
    first mapping printed at 9.064 s, and the answer said no mapping is below 9.065 s. The bound shown is now the
    one the printed values obey: the step time's rounded down to its 3 printed decimals, GPUs whole."""
    assert bound_as_printed("step_time", 90_645 * TIME_UNIT_S) == 9.064
    assert bound_as_printed("step_time", 22_662 * TIME_UNIT_S) == 2.266
    assert bound_as_printed("step_time", 20_000 * TIME_UNIT_S) == 1.999
    assert bound_as_printed("peak_memory", 46.59) == 46.58
    assert bound_as_printed("gpus", 1024.0) == 1024.0


def test_a_search_cut_off_before_any_mapping_says_how_far_it_got() -> None:
    """An `unknown` answer (the limit ran out before any row was cut: DeepSeek-V3 on 4,096 of the 5T ASIC in 8 s)
    says how many rows were screened and cut by then and what to do next."""
    problem = load_problem("problems/qwen3-30b-a3b-h100-64.yaml")
    result = SolveResult("unknown", (), 51_156, 4_900, 0, 5.5, rows_screened=31_910, rows_cut=0)
    said = why_not_optimal(result, problem, 8)
    assert said.startswith("no mapping found within the time limit (8 s): 31,910 of 51,156 rows screened and 0 cut")
    assert "raise --time-limit" in said


def test_rows_never_screened_are_bounded_by_their_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search that screens only the first rows (the time limit's effect, forced here) still bounds the
    space: the rows it never screened by their compute floors (RowSearch.unseen_floors), so the first
    mapping's bound is at most the complete search's optimum and the answer states it."""
    from parasol.solver.search import halves

    problem = load_problem("problems/qwen3-30b-a3b-h100-64.yaml")
    best = solve(problem, CalibratedStageTimes(problem), top=3, time_limit_s=60).mappings[0].step_time_objective_s
    screen = halves.search_rows
    monkeypatch.setattr(halves, "search_rows",
                        lambda search, ordered, deadline, on_screened=None: screen(search, ordered[:40], deadline,
                                                                                   on_screened))
    result = solve(problem, CalibratedStageTimes(problem), top=3, time_limit_s=60, two_cores=False)
    assert result.status == "feasible" and result.rows_screened == 40 < result.rows
    bound = result.mappings[0].bound["step_time"]
    assert bound is not None and 0 < bound <= best <= result.mappings[0].step_time_objective_s
    assert "rows were never screened, bounded by their compute" in why_not_optimal(result, problem, 60)


def test_bound_of_a_point_counts_the_rows_the_master_does_not_settle() -> None:
    """A point's bound over the space: the master's, lowered to the floor of every row left waiting or
    unproved whose floor memory is within the point's cap; none when some row was never screened. Caps are
    one unit below the previous point of the same front."""
    assert open_bound(500, None, [(450, 90), (480, 10)]) == 450
    assert open_bound(500, 60, [(450, 90), (480, 10)]) == 480
    assert open_bound(500, 5, [(450, 90), (480, 10)]) == 500
    assert open_bound(500, None, None) is None
    points = tuple(Point(0, (1,), t, m, rank, True, t, (t, m)) for t, m, rank in
                   [(10, 80, 1), (12, 60, 1), (11, 70, 2), (15, 50, 2)])
    assert front_caps(points) == [None, 79, None, 69]


@pytest.mark.slow
@pytest.mark.parametrize("limit", [2.0, 2.6, 3.2, 4.0])
def test_cut_off_bounds_hold_over_the_space(limit: float) -> None:
    """Cut off at any point, every bound printed is at most its mapping's value, and the first mapping's at
    most the proved optimum of the complete search (V4-Pro 8,192: 297 rows, all screened within about 3 s on
    2 cores, so some limits stop with rows waiting and print a bound below the first mapping)."""
    problem = load_problem("problems/deepseek-v4-pro-8192.yaml")
    best = _complete_8192().mappings[0].step_time_objective_s
    result = solve(problem, CalibratedStageTimes(problem), top=10, time_limit_s=limit)
    for m in result.mappings:
        bound = m.bound["step_time"]
        assert bound is None or bound <= m.step_time_objective_s
    if result.mappings and result.mappings[0].bound["step_time"] is not None:
        assert result.mappings[0].bound["step_time"] <= best
        assert result.status == "optimal" or result.mappings[0].gap >= 0


@pytest.mark.slow
def test_cut_searches_stopped_by_their_share_get_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row's cut search stops at its share of the limit (row_search.ROW_SHARE); once every row is screened
    and cut, those searches run again with the time left, so a complete search is proved whatever share each
    row got: with a share that stops every interleaved search at once, V4-Pro 8,192 is still `optimal` with
    the complete search's mappings, and without the second pass it is not."""
    from parasol.solver.search import row_search

    problem = load_problem("problems/deepseek-v4-pro-8192.yaml")
    complete = _complete_8192()
    monkeypatch.setattr(row_search, "ROW_SHARE", 1e-12)
    again = solve(problem, CalibratedStageTimes(problem), top=10)
    assert again.status == "optimal"
    assert [(m.step_time_objective_s, m.peak_memory_objective_gb) for m in again.mappings] == \
        [(m.step_time_objective_s, m.peak_memory_objective_gb) for m in complete.mappings]
    monkeypatch.setattr(row_search.RowSearch, "recut_unproved", lambda self, deadline: None)
    assert solve(problem, CalibratedStageTimes(problem), top=10).status == "feasible"


def test_a_row_whose_fit_needs_the_cut_search_is_floored_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row with one fit candidate whose fit only the cut search answers (savings.resolve_fit: 18 ms against
    its step floor's 3 on V4-Pro's interleaved rows) has its step floor priced before that search, so a row the
    floor sends back and a later cut beats never runs it (RowSearch.cut_waiting): on V4-Pro 1,024 every such
    search follows its row's floor, and the answer is the complete search's."""
    from parasol.solver.search import halves, row_search

    events: list[tuple[str, tuple[Row, ...]]] = []
    floor, resolve = row_search.RowSearch._floor, row_search.resolve_fit

    def floored(self: row_search.RowSearch, row: Row, memory: object = None) -> tuple[int, int]:
        events.append(("floor", (row,)))
        return floor(self, row, memory)

    def resolved(candidates: object, *args: object) -> object:
        events.append(("fit", candidates.rows))
        return resolve(candidates, *args)

    monkeypatch.setattr(row_search.RowSearch, "_floor", floored)
    monkeypatch.setattr(row_search, "resolve_fit", resolved)
    monkeypatch.setattr(halves, "splits", lambda rows: False)
    problem = load_problem(V4_1024)
    result = solve(problem, CalibratedStageTimes(problem), top=6)
    searched = [(i, rows) for i, (kind, rows) in enumerate(events) if kind == "fit" and len(rows) == 1]
    assert result.status == "optimal" and searched
    assert all(("floor", rows) in events[:i] for i, rows in searched)


@functools.cache
def _complete_8192():  # noqa: ANN202
    problem = load_problem("problems/deepseek-v4-pro-8192.yaml")
    result = solve(problem, CalibratedStageTimes(problem), top=10)
    assert result.status == "optimal"
    return result


def test_search_runs_at_the_searching_pace_and_restores_the_collector() -> None:
    """solve collects cycles at collector.SEARCH_THRESHOLDS while it searches (Python's defaults made the
    collector traverse the search's memo tables again and again) and leaves the thresholds as it found them."""
    import gc

    from parasol.solver.search.collector import SEARCH_THRESHOLDS

    problem = load_problem("problems/deepseek-v4-pro-1024.yaml")
    before = gc.get_threshold()
    during = []
    solve(problem, CalibratedStageTimes(problem), top=2, time_limit_s=30,
          progress=lambda _: during.append(gc.get_threshold()))
    assert during and set(during) == {SEARCH_THRESHOLDS}
    assert gc.get_threshold() == before
