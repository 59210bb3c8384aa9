"""Long context: a real 128k sequence, per-rank sizes under CP, exposed CP share ≤ α.

Sources: seed 003 §5 (S = 131,072; one layer's BF16 KV of one sequence 2·n_kv·d_head·S·2 B; local
sequence S/CP; exposed CP ≤ α · step time; a batch of short sequences does not stand for one long
one); problems/5t-moe-asic-4096.yaml.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from parasol.constraints.physics import long_context as lc
from parasol.constraints.rules import contract
from parasol.problems.loader import load_problem
from parasol.problems.mapping import Mapping

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"


def test_kv_and_local_sequence() -> None:
    """128k, 8 KV heads of 128, BF16: 512 MiB per layer per sequence; CP8 holds 16,384 tokens each."""
    assert lc.kv_bytes_per_layer(131072, 8, 128) == 2 * 8 * 128 * 131072 * 2 == 512 * 2**20
    assert lc.local_sequence(131072, 8) == 16384
    assert lc.kv_bytes_per_rank_layer(131072, 8, 8, 8, 128) == 2 * 1 * 128 * 16384 * 2


def test_attention_work_stays_quadratic() -> None:
    """Doubling S quadruples (about) the causal pairs: flash attention saves memory, not the S² work."""
    assert lc.causal_attention_pairs(131072) / lc.causal_attention_pairs(65536) == pytest.approx(4, rel=1e-4)


def test_real_sequence_is_not_a_pack_of_short_ones() -> None:
    """Only an unpacked sequence of the target length counts as a real long-context test."""
    assert lc.is_real_long_sequence(131072, 131072, packed=False)
    assert not lc.is_real_long_sequence(131072, 131072, packed=True)
    assert not lc.is_real_long_sequence(8192, 131072, packed=False)


def test_exposed_share_and_its_floor() -> None:
    """share = exposed/step; the rule holds exactly from step = exposed/α on."""
    assert lc.exposed_share(2.0, 100.0) == 0.02
    floor = lc.step_floor_for_share(2.0, 0.05)
    assert floor == 40.0
    assert lc.exposed_share(2.0, floor) == pytest.approx(0.05)


def test_bundled_problem_bounds_exposed_cp() -> None:
    """5t-moe-asic-4096 at CP8: the contract's CP rule holds at α = 5%, and its floor is exposed/α."""
    problem = load_problem(PROBLEMS / "5t-moe-asic-4096.yaml")
    mapping = Mapping(gpus=4096, gbs=256, seq_len=131072, tp=8, pp=16, cp=8, ep=64, etp=1, mbs=1, recompute="full")
    rule = next(r for r in contract.contract_constraints(problem) if r.id == "contract-exposed-cp-share")
    step = contract.step_for(problem, mapping)
    assert rule.measure(mapping, None) == pytest.approx(0.05 - step.breakdown["cp"] / step.step_time_s)
    assert rule.step_time_floor_s(problem, mapping) == pytest.approx(step.breakdown["cp"] / 0.05)


def test_cp_required_where_activations_do_not_fit() -> None:
    """5t-moe-asic-4096 at CP1: the sequence-proportional memory does not fit beside the state within
    (1 − r)·usable HBM; the long-context row fails and names the CP needed (seed 003 §5). (Routed-expert
    activations follow the TP8 sequence-parallel split, so CP 2 suffices.)"""
    from parasol.solver.diagnose.explain import explain

    problem = load_problem(PROBLEMS / "5t-moe-asic-4096.yaml")
    mapping = Mapping(gpus=4096, gbs=256, seq_len=131072, tp=8, pp=16, cp=1, ep=64, etp=1, mbs=1, recompute="full")
    row = explain(problem, mapping, repairs=0).as_dict()["contract"][1]
    assert row["domain"] == "long context"
    assert row["verdict"] == "fails"
    assert "CP ≥ 2 is needed" in row["detail"]
