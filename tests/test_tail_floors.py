"""The steps a cut row's interleaved staircase has left (row_search.RowSearch._tail): their floors hold for every
cut they cover, and a search that lets them wait, skips them or drops them returns what one that cuts every step
returns, from fewer steps."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.loader import load_problem, load_problem_text
from parasol.solver.search import cuts, interleaved
from parasol.solver.search.choices import ep_options
from parasol.solver.search.costs import (
    MB,
    block_kinds,
    interval_counts,
    prefix_counts,
    rounding_slack_mb,
    row_costs,
    usable_mb,
)
from parasol.solver.search.reprice import tail_floor_units, time_units
from parasol.solver.search.solve import solve
from parasol.solver.search.space import enumerate_rows
from tests.every_cut import distinct_cuts, random_cuts

ROOT = Path(__file__).resolve().parents[1]

HYBRID = """
model:
  name: hybrid-irregular
  hidden_size: 2048
  vocab_size: 32000
  num_layers: 14
  layer_pattern: "M-M*-M-M-M*-M-"
  attention: {kind: gqa, num_heads: 16, num_kv_heads: 4, head_dim: 128}
  mamba: {num_heads: 64, head_dim: 64, state_size: 128, num_groups: 8}
  dense_mlp: {intermediate_size: 8192, activation: squared_relu}
training: {seq_len: 8192, global_batch: 64, precision: bf16, optimizer: adam}
hardware: {preset: h100-hgx, gpus: 8}
"""
"""A hybrid Mamba model whose attention blocks come at uneven gaps (as Nemotron-H's do): three block kinds and no
round program (rounds.py takes sequences that repeat after a short lead-in), so its staircases' floors are the
relaxation's."""


def _rows(name: str, count: int, seed: int):  # noqa: ANN202
    """`count` random interleaved rows of a bundled problem with their tables (calibrated times), the problem's
    interval counts, its usable MB and the model."""
    problem = load_problem(ROOT / "problems" / f"{name}.yaml")
    model = CalibratedStageTimes(problem)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    rows = [r for r in enumerate_rows(problem) if r.vpp > 1]
    picked = random.Random(seed).sample(rows, min(count, len(rows)))
    return problem, model, counts, usable_mb(problem), [(row, row_costs(problem, row, model)) for row in picked]


@pytest.mark.parametrize(("name", "within"), [("qwen3-30b-a3b-h100-64", "usable"), ("deepseek-v4-pro-1024", "any"),
                                              ("deepseek-v4-pro-8192", "any")])
def test_rounding_slack_bounds_every_rank_of_every_cut_within_its_cap(name: str, within: str) -> None:
    """A rank's MB in the tables (RowCosts.stage_memory) exceed its exact bytes (stage_bytes) by at most
    costs.rounding_slack_mb on random cuts keeping every rank within its cap: usable HBM, or any MB (the
    DeepSeek-V4 rows drawn mostly fit no cut)."""
    _, _, counts, usable, rows = _rows(name, 8, 31)
    usable = usable if within == "usable" else 1 << 40
    rng = random.Random(32)
    checked = 0
    for row, c in rows:
        slack = rounding_slack_mb(c, counts[0, counts.shape[0] - 1], usable)
        assert slack is not None
        for layout in random_cuts(rng, counts.shape[0] - 1, row.pp * row.vpp, row.pp, 40):
            per_rank = cuts.rank_counts(layout, row.pp, counts)
            tables = [c.stage_memory(r, n) for r, n in enumerate(per_rank)]
            if max(tables) > usable:
                continue
            for r, n in enumerate(per_rank):
                assert tables[r] * MB - c.stage_bytes(r, n) <= slack * MB, (row, layout, r)
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("name", ["deepseek-v4-pro-1024", "deepseek-v4-pro-8192"])
def test_tail_floor_is_below_every_cut_as_slow_by_the_tables(name: str) -> None:
    """reprice.tail_floor_units at a cut's own slowest rank by the linear tables is at most its exact step time
    (as printed), on random cuts of random rows, and above the row's plain floor for the slower cuts."""
    problem, model, counts, _, rows = _rows(name, 8, 41)
    rng = random.Random(42)
    raised = 0
    for row, c in rows:
        mapping = row.mapping(problem)
        options = ep_options(problem, row)
        plain = tail_floor_units(c, mapping, counts, model, 0, options)
        layouts = random_cuts(rng, counts.shape[0] - 1, row.pp * row.vpp, row.pp, 30)
        per_rank = cuts.cuts_rank_counts(layouts, row.pp, counts)
        seconds = model.cut_step_times_s(mapping, c.derived, per_rank)
        for held, exact in zip(per_rank.tolist(), seconds.tolist(), strict=True):
            slowest = max(c.stage_time_us(r, tuple(n)) for r, n in enumerate(held))
            floor = tail_floor_units(c, mapping, counts, model, slowest, options)
            assert floor is not None and plain is not None
            assert floor <= time_units(exact), (row, held)
            raised += floor > plain
    assert raised > 20


def _problem(name: str):  # noqa: ANN202
    """A bundled problem by name, or the irregular hybrid (HYBRID)."""
    return load_problem_text(HYBRID) if name == "irregular-hybrid" else load_problem(ROOT / "problems" / f"{name}.yaml")


@pytest.mark.parametrize("name", ["deepseek-v4-pro-1024", "deepseek-v4-pro-8192",
                                  pytest.param("irregular-hybrid", marks=pytest.mark.slow)])
def test_waiting_tails_give_the_answer_of_every_step_from_fewer(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """solve with tails (the steps a staircase has left waiting, skipped or dropped by their floors) returns
    the mappings, values and bounds of solve cutting every step at once, asking the cut search fewer steps: on
    the irregular hybrid too, whose steps' floors are the relaxation's (476 steps against 1,138 when written)."""
    asked: list[int] = []
    best = interleaved.InterleavedCuts.best

    def counted(self, cap_mb: int):  # noqa: ANN001, ANN202
        asked[-1] += 1
        return best(self, cap_mb)

    monkeypatch.setattr(interleaved.InterleavedCuts, "best", counted)
    answers = []
    for tails in (True, False):
        if not tails:
            monkeypatch.setattr(cuts.InterleavedStairs, "stepwise", property(lambda self: False))
        problem = _problem(name)
        asked.append(0)
        result = solve(problem, CalibratedStageTimes(problem), top=10, time_limit_s=120, two_cores=False)
        assert result.status == "optimal"
        answers.append([(m.pareto_rank, m.front_values, m.bound, m.explanation.mapping) for m in result.mappings])
    assert answers[0] == answers[1]
    assert asked[0] < asked[1]


def test_relaxed_floor_is_below_the_fastest_cut_within_each_cap() -> None:
    """Where no round program answers (an irregular hybrid), InterleavedCuts.slowest_floor is the relaxation's least
    slowest-rank time within the cap: at most that of every cut within it (checked over one cut per distinct holding,
    tests/every_cut.py, on sampled interleaved rows), mostly within 1% of the least, and None only where no cut is
    within it."""
    problem = load_problem_text(HYBRID)
    counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
    usable = usable_mb(problem)
    rows = [r for r in enumerate_rows(problem) if r.vpp > 1]
    checked = none = close = 0
    for row in random.Random(51).sample(rows, 12):
        c = row_costs(problem, row, CalibratedStageTimes(problem))
        search = interleaved.InterleavedCuts(c, counts)
        assert search.rounds is None and len(search.relaxed.groups) == 3
        held = [cuts.rank_counts(layout, row.pp, counts) for layout in distinct_cuts(search)]
        slowest = [max(c.stage_time_us(r, n) for r, n in enumerate(ranks)) for ranks in held]
        peak = [max(c.stage_memory(r, n) for r, n in enumerate(ranks)) for ranks in held]
        for cap in (usable, usable * 3 // 4, usable // 2, min(peak), min(peak) - 1, 0):
            answered, floor = search.slowest_floor(cap)
            within = [t for t, m in zip(slowest, peak, strict=True) if m <= cap]
            assert answered
            if floor is None:
                assert not within, (row, cap)
                none += 1
            elif within:
                assert floor <= min(within), (row, cap)
                checked += 1
                close += floor * 100 >= min(within) * 99
    assert checked > 10 and none > 0 and close * 2 > checked
