"""The training/rollout split as a decision (issue 7; seed 003 §8): `search.gpus` lists training-pool
sizes, the rest of `contract.rollout.cluster_devices` generates rollouts, and `solve` merges the exact
fronts of every size. Effective tokens/s (seed 000's goodput) and the GPU count are objectives."""

from __future__ import annotations

import pytest
from contract_problems import SMALL_POOL

from parasol.errors import InputError
from parasol.problems.loader import load_problem_text
from parasol.solver.search.dominance import dominates
from parasol.solver.search.pools import solve_pools, training_sizes

SPLIT = SMALL_POOL.replace("search: {tp: 2,", "search: {gpus: [32, 64], tp: 2,")
GOODPUT = "  goodput: {device_mtbf_hours: 20000, storage_gb_s: 50, restart_s: 120}\n"


def _keys(sm, objectives):
    return tuple(-sm.front_values[o] if o == "effective_tokens_per_s" else sm.front_values[o] for o in objectives)


def test_rollout_supply_decides_the_split() -> None:
    """64 training devices leave 8 rollout devices: 800,000 accepted tokens/s cannot feed the step, so
    the supply rule removes every 64-device mapping; 32 training devices leave 40 rollout devices and
    run. The fixed 64-device problem alone has no mapping (status infeasible)."""
    result = solve_pools(load_problem_text(SPLIT), top=5, time_limit_s=60)
    assert result.status == "optimal" and result.mappings
    assert {sm.explanation.mapping.gpus for sm in result.mappings} == {32}
    assert all(sm.explanation.feasible for sm in result.mappings)
    alone = solve_pools(load_problem_text(SMALL_POOL), top=5, time_limit_s=60)
    assert alone.status == "infeasible" and not alone.mappings


def test_gpus_objective_trades_size_against_step_time() -> None:
    """With a fast rollout pool both sizes run; on [step_time, gpus] the front keeps the fastest
    mapping of each size that is not dominated, and ranks are a non-dominated sorting."""
    text = SPLIT.replace("accepted_tokens_per_s_per_device: 100000", "accepted_tokens_per_s_per_device: 10000000")
    result = solve_pools(load_problem_text(text + "objectives: [step_time, gpus]\n"), top=6, time_limit_s=60)
    assert {sm.explanation.mapping.gpus for sm in result.mappings} == {32, 64}
    first = [sm for sm in result.mappings if sm.pareto_rank == 1]
    assert {sm.front_values["gpus"] for sm in first} == {32.0, 64.0}
    fast64 = next(sm for sm in first if sm.front_values["gpus"] == 64)
    slow32 = next(sm for sm in first if sm.front_values["gpus"] == 32)
    assert fast64.front_values["step_time"] < slow32.front_values["step_time"]
    for sm in result.mappings:
        better = [o for o in result.mappings if o.pareto_rank < sm.pareto_rank]
        assert any(dominates(_keys(o, ("step_time", "gpus")), _keys(sm, ("step_time", "gpus"))) for o in better) \
            or sm.pareto_rank == 1


def test_effective_tokens_per_s_is_the_goodput_metric() -> None:
    """`effective_tokens_per_s` ranks by tokens/s × goodput fraction (seed 000): the front values are
    the explanation's own metric, best first."""
    text = SPLIT.replace("  rollout:", GOODPUT + "  rollout:") + "objectives: [effective_tokens_per_s, peak_memory]\n"
    result = solve_pools(load_problem_text(text), top=4, time_limit_s=60)
    values = [sm.front_values["effective_tokens_per_s"] for sm in result.mappings if sm.pareto_rank == 1]
    metrics = [sm.as_dict()["metrics"] for sm in result.mappings if sm.pareto_rank == 1]
    assert values == [pytest.approx(m["effective_tokens_per_s"], rel=1e-6) for m in metrics]
    assert values == sorted(values, reverse=True)
    assert all(0 < m["goodput_fraction"] < 1 for m in metrics)


@pytest.mark.parametrize(("sizes", "needle"), [("[72]", "leaves no rollout"), ("[]", "no training-pool size")])
def test_bad_pool_sizes_are_input_errors(sizes: str, needle: str) -> None:
    """A size that leaves the rollout pool empty, or no size, names search.gpus (a size off the node grid
    runs on partial nodes, hardware/topology.py for_job)."""
    problem = load_problem_text(SMALL_POOL.replace("search: {tp: 2,", f"search: {{gpus: {sizes}, tp: 2,"))
    with pytest.raises(InputError, match=needle) as err:
        training_sizes(problem)
    assert err.value.field == "search.gpus"


def test_objective_pairs_that_collapse_are_refused() -> None:
    """effective_tokens_per_s is optimised through step_time, so the pair is one objective twice."""
    problem = load_problem_text(SPLIT + "objectives: [effective_tokens_per_s, step_time]\n")
    with pytest.raises(InputError, match="not both"):
        solve_pools(problem)
