"""Asynchronous, non-co-located rollout: supply ≥ consumption, staleness, and the repair that moves
devices between the pools.

Sources: seed 003 §8 (R_supply ≥ R_consume = GBS·S/T_step, else the real step is GBS·S/R_supply;
staleness in versions, seconds and tokens; two pools, two failure domains); the issue's "supply X <
consumption Y" explanation with the repair; tests/contract_problems.py SMALL_POOL.
"""

from __future__ import annotations

import re

import pytest
from contract_problems import SMALL_POOL

from parasol.constraints.evaluate import evaluate
from parasol.constraints.physics import rollout as r
from parasol.constraints.rules import contract
from parasol.problems.loader import load_problem_text
from parasol.problems.mapping import Mapping
from parasol.solver.diagnose.explain import explain
from parasol.solver.diagnose.repairs import rollout_pool_repair

MAPPING = Mapping(gpus=64, gbs=256, seq_len=4096, tp=2, pp=2, cp=1, ep=4, etp=1, mbs=1, recompute="none")


def test_supply_consumption_and_starvation() -> None:
    """Supply = devices × rate; consumption = GBS·S/T; a starved step runs at GBS·S/supply."""
    assert r.supply_tokens_per_s(1024, 400) == 409_600
    assert r.consumption_tokens_per_s(33_554_432, 178.56) == pytest.approx(187_917, abs=1)
    assert r.starved_step_s(1_000_000, 1.0, 500_000) == 2.0
    assert r.starved_step_s(1_000_000, 4.0, 500_000) == 4.0
    assert r.step_floor_for_supply(1_000_000, 500_000) == 2.0
    assert r.devices_needed(1_000_000, 1.0, 100_000) == 10


def test_pools_and_staleness() -> None:
    """The rollout pool is pinned or the cluster's rest; staleness P/T versions and P·GBS·S/T tokens."""
    assert r.rollout_devices(8, None, 64) == 8
    assert r.rollout_devices(None, 72, 64) == 8
    assert r.rollout_devices(None, None, 64) is None
    assert r.staleness_versions(30.0, 10.0) == 3.0
    assert r.staleness_tokens(30.0, 1_000_000, 10.0) == 3_000_000


@pytest.fixture(scope="module")
def small_pool():
    return load_problem_text(SMALL_POOL, source="small-pool.yaml")


def test_small_pool_is_explained_as_supply_below_consumption(small_pool) -> None:
    """8 rollout devices × 100,000 tokens/s cannot feed 64 training GPUs: the rule says 'supply X <
    consumption Y' with both numbers."""
    ev = evaluate(small_pool, MAPPING)
    verdict = next(v for v in ev.violations if v.rule == "contract-rollout-supply")
    step = contract.step_for(small_pool, MAPPING).step_time_s
    consumption = 256 * 4096 / step
    assert verdict.slack == pytest.approx(800_000 - consumption)
    assert re.search(r"rollout supply 800,000 tokens/s \(8 devices × 100000\) < training consumption "
                     rf"{consumption:,.0f} tokens/s", verdict.message)


def test_repair_moves_devices_between_pools(small_pool) -> None:
    """The repair shrinks training to the largest feasible pool ≤ N − Δ and gives rollout the rest;
    the repaired mapping is feasible (training keeps its degrees)."""
    repair = rollout_pool_repair(small_pool, MAPPING, small_pool.spec.framework.options)
    step = contract.step_for(small_pool, MAPPING).step_time_s
    need = r.devices_needed(256 * 4096, step, 100_000)
    assert need == 16
    assert repair.changes == {"gpus": (64, 32)}
    assert "move 32 devices from training to rollout (rollout pool 8 → 40, at least 16 needed)" in repair.text
    assert repair.text.startswith("rollout supply 800,000 < consumption")
    assert evaluate(small_pool, repair.mapping).feasible


def test_pinned_pool_repair_raises_its_size() -> None:
    """With `rollout.devices` pinned the repair names the pool size that meets consumption."""
    problem = load_problem_text(SMALL_POOL.replace("cluster_devices: 72", "devices: 8"), source="pinned.yaml")
    repair = rollout_pool_repair(problem, MAPPING, problem.spec.framework.options)
    assert repair.changes == {"rollout_devices": (8, 16)}
    assert "raise contract.rollout.devices from 8 to 16 (+8 devices)" in repair.text
    assert repair.mapping == MAPPING


def test_feasible_pool_needs_no_repair(small_pool) -> None:
    """A pool that keeps up gets no pool repair."""
    problem = load_problem_text(SMALL_POOL.replace("cluster_devices: 72", "cluster_devices: 96"), source="ok.yaml")
    assert rollout_pool_repair(problem, MAPPING, problem.spec.framework.options) is None


@pytest.mark.slow
def test_explain_lists_the_pool_repair_first(small_pool) -> None:
    """`explain` of the too-small pool: infeasible, minimal conflict is the supply rule, first repair
    moves devices between the pools."""
    d = explain(small_pool, MAPPING).as_dict()
    assert not d["feasible"]
    assert d["minimal_conflict"] == ["contract-rollout-supply"]
    assert d["repairs"][0]["changes"] == {"gpus": [64, 32]}
