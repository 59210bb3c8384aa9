"""`solve` switches on FSDP or optimizer CPU offload for a row that fits no other way, where the problem
leaves them open (solver/search/savings.py), shows it and launches it.

Numbers: Llama 3.1 70B (70.55 B parameters) at TP8 holds 8.82 B parameters per rank: BF16 weights 17.6 GB,
FP32 gradients 35.3 GB and Adam state 12 B/param sharded over D_a (seed 003 §2). On 64 H100 (D_a 8)
without recompute that is 79.7 GB against 74 usable; Megatron-FSDP (optim_grads_params, arguments.py:3190)
shards weights and gradients over D_a too. On 16 H100 at PP1 (D_a 2) FSDP still leaves 52.9 GB of Adam
state; --optimizer-cpu-offload (arguments.py:2918-2922, with --use-precision-aware-optimizer, 1884-1887)
moves it to the host.
"""

from __future__ import annotations

import pytest

from parasol.constraints.evaluate import facts_for
from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.problems.loader import load_problem_text
from parasol.problems.mapping_input import build_mapping
from parasol.solver.outputs.emit import megatron_args
from parasol.solver.search import row_search
from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
from parasol.solver.search.reprice import memory_means_units
from parasol.solver.search.row_search import RowSearch, rows_pass_rules
from parasol.solver.search.savings import open_savings, quick_fit, without_static
from parasol.solver.search.solve import solve
from parasol.solver.search.space import enumerate_rows

TEXT = """
name: llama70b-{gpus}
model: llama-3.1-70b
training: {{seq_len: 4096, global_batch: 64, precision: bf16{training}}}
hardware: {{preset: h100-hgx, gpus: {gpus}}}
search: {{tp: [8], pp: [1], cp: [1], mbs: [1], vpp: [1], recompute: [{recompute}]}}
"""


def problem(gpus: int, recompute: str, training: str = ""):
    return load_problem_text(TEXT.format(gpus=gpus, recompute=recompute, training=training), source="p.yaml")


def solved(p):
    return solve(p, CalibratedStageTimes(p), top=3, time_limit_s=60)


def test_fsdp_where_the_row_fits_no_other_way() -> None:
    """64 H100, TP8 PP1 without recompute: 79.7 GB as the problem stands, under 74 with Megatron-FSDP;
    the answer says so, runs under it and launches it."""
    p = problem(64, "none")
    plain = facts_for(p, build_mapping(p, {"tp": "8", "pp": "1", "mbs": "1"})).ledger
    assert plain.peak.total_gb == pytest.approx(79.7, abs=0.1)
    result = solved(p)
    first = result.mappings[0]
    assert first.saving == "fsdp" and first.as_dict()["memory_saving"] == "fsdp"
    assert first.explanation.problem.training.fsdp == "megatron-fsdp" and first.explanation.feasible
    assert first.explanation.evaluation.facts.ledger.peak.total_gb < 74
    flags = dict(megatron_args(first.explanation.problem, first.explanation.mapping).pairs())
    assert flags["--data-parallel-sharding-strategy"] == "optim_grads_params" and "--use-megatron-fsdp" in flags


def test_optimizer_offload_where_fsdp_is_not_enough() -> None:
    """16 H100, TP8 PP1, full recompute: FSDP over D_a 2 leaves 52.9 GB of Adam state (83.3 GB in all);
    the host optimizer fits, with the flag Megatron needs beside it."""
    result = solved(problem(16, "full"))
    first = result.mappings[0]
    assert first.saving == "optimizer-offload"
    options = first.explanation.problem.spec.framework.options
    assert options.optimizer_cpu_offload and options.use_precision_aware_optimizer
    flags = dict(megatron_args(first.explanation.problem, first.explanation.mapping).pairs())
    assert "--optimizer-cpu-offload" in flags and "--use-precision-aware-optimizer" in flags


def test_a_problem_that_sets_the_choice_keeps_it() -> None:
    """`training.fsdp: none` written out (and Muon, which neither saving supports) leaves solve no saving."""
    assert open_savings(problem(64, "none", ", fsdp: none")) == ("optimizer-offload",)
    assert open_savings(problem(64, "none", ", optimizer: muon")) == ()
    assert open_savings(problem(64, "none")) == ("fsdp", "optimizer-offload")


def test_rows_that_fit_keep_the_problem_settings() -> None:
    """With full recompute on 64 H100 the row fits as it stands: no saving, no `memory_saving` key."""
    first = solved(problem(64, "full")).mappings[0]
    assert first.saving == "none" and "memory_saving" not in first.as_dict()
    assert first.explanation.problem.training.fsdp == "none"


@pytest.mark.parametrize(("recompute", "fits"), [("full", True), ("none", False)])
def test_a_row_that_fits_as_it_is_is_judged_by_its_whole_tables(recompute: str, fits: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A row that fits as it stands (64 H100, TP8 PP1, full recompute) tries no saving, so its own tables'
    memory floor, weights, gradients and optimizer state included, judges it before its variants are built:
    steps of `top` rows between that floor and the floor without those terms drop it at once. A row that
    needs a saving (no recompute: 79.7 GB) is judged by the lighter floor, which a saving could reach, and
    goes on to its variants."""
    p = problem(64, recompute)
    counts = interval_counts(prefix_counts(p, block_kinds(p)))
    row = next(r for r in enumerate_rows(p) if rows_pass_rules(p, r))
    plain = row_costs(p, row, None)
    assert quick_fit(plain, counts, usable_mb(p)) is fits
    whole, bare = memory_means_units(plain, counts), memory_means_units(without_static(plain), counts)
    assert bare < whole
    search = RowSearch(p, CalibratedStageTimes(p), counts, usable_mb(p), 3, True)

    class Peer:
        cuts = 0

        def exchange(self, cut: list) -> list:
            return [(i, row, [(0, (bare + whole) // 2)]) for i in range(3)]

    search.peer = Peer()
    search.exchange()
    built = []
    original = row_search.fit_candidates
    monkeypatch.setattr(row_search, "fit_candidates", lambda *a, **k: built.append(1) or original(*a, **k))
    search._judge(row_search._Screened(row), 10**9)
    assert bool(built) is not fits
