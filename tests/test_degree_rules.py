"""Issue 15: rules whose verdict reads only a mapping's degrees (Megatron's interleaved-schedule rules read
PP, VPP and the microbatch count) drop their rows before pricing. Their degree verdict is judge's verdict on
every mapping, and dropping the rows leaves solve's answer as it was."""

from __future__ import annotations

import dataclasses

import pytest

from parasol.constraints.evaluate import holds
from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.derived import default_layout
from parasol.problems.empty_stages import stage_least
from parasol.problems.loader import load_problem_text
from parasol.problems.mapping import DEGREES
from parasol.solver.search import solve as solve_module
from parasol.solver.search.domains import degree_rules, meeting_degree_rules
from parasol.solver.search.solve import solve
from parasol.solver.search.space import enumerate_rows

SMALL_BATCH = """
model: llama-2-7b
training: {seq_len: 4096, global_batch: 16}
hardware: {preset: h100-hgx, gpus: 32}
search: {tp: [1, 2], cp: 1}
"""
"""Few microbatches (GBS 16): many interleaved rows break the microbatch-group rules (PP <= m)."""
GROUPED = SMALL_BATCH + "framework: {options: {microbatch_group_size_per_vp_stage: 3}}\n"
"""An explicit group size N = 3 (Megatron's flag): PP <= 3 <= m and the last group's remainder rule."""


@pytest.mark.parametrize("text", [SMALL_BATCH, GROUPED], ids=["default-group", "group-3"])
def test_degree_verdicts_are_judges_verdicts(text):
    problem = load_problem_text(text)
    rules = degree_rules(problem)
    assert {c.id for c in rules} == {"vpp-microbatch-group-range", "vpp-final-group-remainder"}
    refused = 0
    for row in enumerate_rows(problem):
        mapping = row.mapping(problem, row.default_cut(problem))
        degrees = {n: getattr(row, n) for n in DEGREES}
        for rule in rules:
            verdict = rule.degree_verdict(problem, degrees)
            assert verdict == holds(problem, mapping, (rule,)), (rule.id, degrees)
            refused += not verdict
    assert refused > 0


def test_rows_the_degree_rules_drop_leave_the_answer(monkeypatch):
    problem = load_problem_text(SMALL_BATCH)
    dropping = solve(problem, CalibratedStageTimes(problem), top=6, time_limit_s=120)
    with monkeypatch.context() as patch:
        patch.setattr(solve_module, "meeting_degree_rules", lambda problem, rows: rows)
        keeping = solve(problem, CalibratedStageTimes(problem), top=6, time_limit_s=120)
    assert dropping.status == keeping.status == "optimal"
    assert [m.as_dict() for m in dropping.mappings] == [m.as_dict() for m in keeping.mappings]
    assert dropping.rows < keeping.rows


def test_rows_are_kept_when_the_degree_rules_refuse_every_one():
    problem = load_problem_text(SMALL_BATCH)
    rows = enumerate_rows(problem)

    def accepted(row):
        return all(c.degree_verdict(problem, {n: getattr(row, n) for n in DEGREES}) for c in degree_rules(problem))

    refused = tuple(r for r in rows if not accepted(r))
    assert refused and meeting_degree_rules(problem, refused) == refused
    assert meeting_degree_rules(problem, rows) == tuple(r for r in rows if accepted(r))


FIVE_T_GB200 = """
model: moe-5t
training: {seq_len: 4096, global_batch: 1152, precision: fp8}
hardware: {preset: gb200-nvl72, gpus: 576}
"""
"""The 5T MoE on eight NVL72 racks: Hybrid-EP is offered where DeepEP reaches fewer ranks than a rack holds, and
its domain rules refuse the groups that split unevenly over racks."""


def test_grid_only_rules_give_one_verdict_per_grid_and_option() -> None:
    """A rule marked reads_grid_only (DeepEP's and Hybrid-EP's group asserts) gives the same verdict on every
    mapping of one grid (TP, CP, EP, ETP, PP, rank order) under one option variant, whatever its microbatch,
    recompute, VPP and layout: choices.ep_options asks it once per grid. Checked over every row of sampled
    grids, under every variant, and some verdicts refuse (the check is not vacuous)."""
    from parasol.solver.search.program import choice_rules
    from parasol.solver.search.space import choice_variants, with_choices

    problem = load_problem_text(FIVE_T_GB200)
    rules = tuple(c for c in choice_rules(problem) if c.reads_grid_only)
    assert {c.id for c in rules} >= {"deepep-group-size", "hybridep-even-domains", "hybridep-experts-per-domain"}
    grids: dict[tuple, list] = {}
    for row in enumerate_rows(problem):
        if row.ep > 1:
            grids.setdefault((row.tp, row.cp, row.ep, row.etp, row.pp, row.rank_order), []).append(row)
    refused = 0
    for rows in list(grids.values())[::max(len(grids) // 60, 1)]:
        for variant in choice_variants(problem, rows[0]):
            chosen = with_choices(problem, variant)
            for rule in rules:
                verdicts = set()
                for row in rows:
                    sibling = dataclasses.replace(variant, vpp=row.vpp, mbs=row.mbs, recompute=row.recompute)
                    blocks, least = problem.model.num_layers, stage_least(row.pp, row.vpp)
                    heavy_first = (blocks - sum(least[1:]), *least[1:])
                    for layout in (default_layout(blocks, row.pp, row.vpp), heavy_first):
                        verdicts.add(holds(chosen, sibling.mapping(chosen, layout), (rule,)))
                assert len(verdicts) == 1, (rule.id, variant)
                refused += not verdicts.pop()
    assert refused > 0
