"""The problem's routing skew sets the time (issue 7; seed 003 §4: the hot expert and the hot rank set
the time). Under `contract.routing` a Zipf or measured skew makes the busiest EP rank compute more
expert GEMMs; on a flexible all-to-all it also receives more, while a fixed-size whole-group
all-to-all sends the same padded buffers whatever the routing."""

from __future__ import annotations

import pytest

from parasol.constraints.physics import routing
from parasol.constraints.physics.routing_load import hot_rank_skew, routing_tokens
from parasol.problems.loader import load_problem_text
from parasol.problems.mapping import Mapping
from parasol.solver.diagnose.explain import explain

MOE = """
model: mixtral-8x7b
training: {{seq_len: 4096, global_batch: 256{cf}}}
hardware: {{preset: {preset}, gpus: 64}}
contract:
  routing: {{skew: {skew}}}
"""
MAPPING = Mapping(gpus=64, gbs=256, seq_len=4096, tp=1, pp=2, ep=8, etp=1, recompute="full")


def _problem(skew: str, preset: str = "h100-hgx", cf: str = ""):
    return load_problem_text(MOE.format(skew=skew, preset=preset, cf=cf))


def test_uniform_routing_is_balanced() -> None:
    """Uniform routing: every EP rank gets k·T/EP assignments, skew 1."""
    assert hot_rank_skew(_problem("uniform"), MAPPING) == 1.0


def test_zipf_skew_is_the_hot_rank_over_the_mean() -> None:
    """Zipf(1) over 8 experts on EP 8 (one expert per rank): the hot rank is the hot expert, its load
    over the mean k·T/E (routing.expert_loads caps any expert at T, a 1/k share)."""
    problem = _problem("zipf, zipf_exponent: 1.0")
    domain = routing_tokens(MAPPING)[1]
    loads = routing.expert_loads(domain, 2, 8, routing.SkewModel("zipf", exponent=1.0))
    assert hot_rank_skew(problem, MAPPING) == pytest.approx(max(loads) / (2 * domain / 8))
    assert hot_rank_skew(problem, MAPPING) > 1.5


def test_skew_slows_the_hot_rank_and_a_flexible_all_to_all() -> None:
    """On H100 (flexible all-to-all) a Zipf skew raises both the compute of the critical stage and the
    exposed EP time over uniform routing."""
    uniform = explain(_problem("uniform"), MAPPING, repairs=0).step.breakdown
    skewed = explain(_problem("zipf, zipf_exponent: 1.0"), MAPPING, repairs=0).step.breakdown
    assert skewed["compute"] > uniform["compute"]
    assert skewed["ep"] > uniform["ep"]


def test_fixed_size_all_to_all_sends_the_same_bytes_whatever_the_skew() -> None:
    """On the fixed-size accelerator the EP exchange moves padded buffers (capacity factor × ideal)
    under any routing; only the hot rank's GEMMs slow down, and a capacity factor caps them."""
    cf = ", capacity_factor: 1.25"
    uniform = explain(_problem("uniform", "asic-5t", cf), MAPPING, repairs=0).step.breakdown
    skewed = explain(_problem("zipf, zipf_exponent: 1.0", "asic-5t", cf), MAPPING, repairs=0).step.breakdown
    assert skewed["ep"] == pytest.approx(uniform["ep"])
    assert skewed["compute"] > uniform["compute"]
    capped = hot_rank_skew(_problem("zipf, zipf_exponent: 1.0", "asic-5t", cf), MAPPING)
    assert capped <= 1.25 + 1e-9
